"""standard_rag's nodes: retrieve the question's top-k passages once, answer from them."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from gaprag import nodes
from gaprag.deps import Deps
from gaprag.graphs.standard_rag.context import Context
from gaprag.graphs.standard_rag.state import State
from gaprag.prompts import load_prompts

PROMPTS = load_prompts(__package__)
FORMATS = nodes.load_formats(__package__)


async def retrieve(state: State, runtime: Runtime[Context], deps: Deps) -> dict[str, Any]:
    """The one retrieval round: the question's top ``top_k`` passages.

    Reads: `question`; writes: `evidence`, `queries`, `iterations`.
    """
    ctx = runtime.context
    hits = await nodes.retrieve(
        await deps.aretriever(ctx), [state.question], k=ctx.top_k, mode=ctx.retrieval_mode, round=1
    )
    return {"evidence": hits, "queries": [state.question], "iterations": 1}


async def generate_answer(state: State, runtime: Runtime[Context], deps: Deps) -> dict[str, Any]:
    """One answer call over the passages.

    No call when the shared reader answers after this step.

    Reads: `question`, `evidence`; writes: `answer`, `stop_reason`.
    """
    ctx = runtime.context
    if nodes.reader_answers(ctx):  # the shared reader answers over the same passages
        return {"stop_reason": "answered"}
    answer, _ = await nodes.generate_answer(
        await deps.achat(ctx),
        PROMPTS["answer"],
        question=state.question,
        evidence=state.evidence,
        fmt=FORMATS["passages"],
        max_words=ctx.max_passage_words,
        max_tokens=ctx.answer_max_tokens,
    )
    return {"answer": answer, "stop_reason": "answered"}
