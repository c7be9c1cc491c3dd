"""standard_rag: the baseline. Retrieve top-k passages once, answer from them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from gaprag.graphs.common import BaseContext, Resources, describe, merge_context
from gaprag.llm.accounting import node
from gaprag.nodes import generate_answer, retrieve
from gaprag.prompts import load_prompts
from gaprag.state.base import BaseState, InputState, OutputState
from gaprag.stores.store import RetrievalMode

PROMPTS = load_prompts(__package__)


@dataclass(kw_only=True)
class Context(BaseContext):
    top_k: int = describe(5, "Passages retrieved for the question.")
    retrieval_mode: RetrievalMode = describe(
        "hybrid", "bm25, dense or hybrid (reciprocal-rank fusion of both)."
    )


@dataclass(kw_only=True)
class State(BaseState):
    pass


def build(
    res: Resources, defaults: Context, checkpointer: BaseCheckpointSaver[Any] | None = None
) -> CompiledStateGraph[Any, Any, Any, Any]:
    @node("retrieve")
    def retrieve_node(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        hits = retrieve(
            res.retriever(ctx), [state.question], k=ctx.top_k, mode=ctx.retrieval_mode, round=1
        )
        return {"evidence": hits, "queries": [state.question], "iterations": 1}

    @node("generate_answer")
    def answer_node(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        answer = generate_answer(
            res.llm(ctx), PROMPTS["answer"], question=state.question, evidence=state.evidence,
            max_words=ctx.max_passage_words, max_tokens=ctx.answer_max_tokens,
        )  # fmt: skip
        return {"answer": answer, "stop_reason": "answered"}

    builder = StateGraph(
        State, context_schema=Context, input_schema=InputState, output_schema=OutputState
    )
    builder.add_node("retrieve", retrieve_node)
    builder.add_node("generate_answer", answer_node)
    builder.add_edge(START, "retrieve")
    builder.add_edge("retrieve", "generate_answer")
    builder.add_edge("generate_answer", END)
    return builder.compile(checkpointer=checkpointer, name="standard_rag")
