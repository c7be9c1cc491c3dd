"""A fake method whose graph reports the output contract's fields; tests register it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import HumanMessage

from gaprag.context import BaseContext
from gaprag.llm.client import LLM
from gaprag.stores.store import RetrievalMode


@dataclass(kw_only=True)
class Context(BaseContext):
    """Settings of the fake ``contract`` method (registered under that name by a fixture)."""

    top_k: int = 6  # passages retrieved (all six): retrieval recall is 1 for every question
    shown: int = 1  # passages rendered into the prompt: support recall counts these only
    retrieval_mode: RetrievalMode = "dense"


class ContractGraph:
    """Retrieves ``top_k``, shows the first ``shown`` passages to one LLM call, and reports the
    contract's fields, as the restructured graphs do."""

    def __init__(self, llm: Callable[[], LLM], retriever: Callable[[], Any], ctx: Context) -> None:
        self.llm, self.retriever, self.ctx = llm, retriever, ctx

    async def ainvoke(self, state: dict[str, Any], config: Any = None) -> dict[str, Any]:
        question = state["question"]
        hits = self.retriever().search(question, self.ctx.top_k, mode=self.ctx.retrieval_mode)
        shown = hits[: self.ctx.shown]
        passages = "\n".join(h["text"] for h in shown)
        prompt = f"Answer briefly.\n{passages}\nQuestion: {question}\nAnswer:"
        chat = self.llm().chat
        reply = await chat.ainvoke([HumanMessage(prompt)], config=config)
        answer = str(reply.content)
        prompt_tokens = (getattr(reply, "usage_metadata", None) or {}).get("input_tokens", 0)
        decisions = [
            {"node": "validate_answer", "round": 1, "decision": "reject", "p": 0.2,
             "path": "logprobs", "threshold": 0.5},
            {"node": "validate_answer", "round": 2, "decision": "accept", "p": 0.9,
             "path": "logprobs", "threshold": 0.5},
            {"node": "judge", "round": 1, "decision": "sufficient", "p": None,
             "path": "default", "threshold": None},
        ]  # fmt: skip
        usage = {
            "llm_calls": 1, "prompt_tokens": prompt_tokens, "completion_tokens": 1,
            "retrieval_calls": 1, "cached_tokens": 3, "instruction_tokens": 2,
            "passage_tokens": max(0, prompt_tokens - 12),
        }  # fmt: skip
        return {
            "answer": answer,
            "stop_reason": "validated",
            "iterations": 2,
            "queries": [question, f"{question} again"],
            "evidence": shown,
            "retrieved_ids": [h["id"] for h in hits],
            "shown_ids": [h["id"] for h in shown],
            "decisions": decisions,
            "usage": usage,
        }


def build(deps: Any, context: type[Context], checkpointer: Any = None) -> ContractGraph:
    ctx = context()
    return ContractGraph(lambda: deps.chat(ctx), lambda: deps.search(ctx), ctx)
