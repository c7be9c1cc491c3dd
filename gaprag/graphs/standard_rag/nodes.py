"""standard_rag's nodes: retrieve the question's top-k passages once, answer from them."""

from __future__ import annotations

import math
from typing import Any

from langgraph.runtime import Runtime

from gaprag import nodes
from gaprag.deps import Deps
from gaprag.graphs.standard_rag.context import Context
from gaprag.graphs.standard_rag.state import State
from gaprag.nodes.answer import clean_answer
from gaprag.nodes.decisions import log_decision
from gaprag.nodes.gate import logprob_signals, plain_rag


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
    """One answer call over the passages, scored as the shared gate scores plain RAG's answer.

    The same request as the gate's answer call. Records decision ``answer`` (round 1, ``stop``) with ``p`` = exp(mean token logprob of the
    answer), path ``logprobs``; without logprobs no ``p``, path ``no-logprobs``. No call when
    the shared reader answers after this step.

    Reads: `question`, `evidence`; writes: `answer`, `stop_reason`, `decisions`.
    """
    ctx = runtime.context
    if nodes.reader_answers(ctx):  # the shared reader answers over the same passages
        return {"stop_reason": "answered"}
    prompt, fmt = plain_rag()
    passages = nodes.render_passages(state.evidence, fmt, max_words=ctx.max_passage_words)
    llm = await deps.achat(ctx)
    scored = await llm.agenerate_scored(
        prompt.render(question=state.question, passages=passages),
        max_tokens=ctx.answer_max_tokens,
    )
    answer = clean_answer(scored.text)
    found = logprob_signals(scored.tokens) if scored.tokens else None
    if found is None:
        log_decision("answer", 1, "stop", path="no-logprobs", answer=answer)
    else:
        p = math.exp(min(found["logprob_mean"], 0.0))
        log_decision("answer", 1, "stop", p=p, path="logprobs", answer=answer)
    return {"answer": answer, "stop_reason": "answered"}
