"""rag_ef: RAG with an expert-feedback store (RAG-EF, train-free enhancement from feedback).

Answering is one pass over a store of (question, answer, chunk) pairs: ``retrieve`` ranks
pairs by Eq. 2, ``rerank_filter`` applies the optional score gate, ``assemble_evidence``
builds the Q&A lines and unique chunks, ``generate_answer`` makes one call. The expert loop
of the paper's Fig. 1(b) is off unless asked for: ``feedback_classifier`` judges the answer,
``collect_feedback`` pauses for the expert (``Command(resume={"answer", "chunk"})``),
``update_evidence_pool`` inserts the triple and ``retrieve_again`` answers once more. The
pair store is ``build_graph("rag_ef", pair_store=...)``, the ``feedback_store`` path, or
``GAPRAG_HOME/feedback.sqlite``. See docs/methods/rag_ef.md.
"""

from __future__ import annotations

from typing import Any, Literal

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from gaprag.deps import Deps
from gaprag.graphs.rag_ef.context import Context
from gaprag.graphs.rag_ef.nodes import (
    assemble_evidence,
    collect_feedback,
    feedback_classifier,
    generate_answer,
    rerank_filter,
    retrieve,
    retrieve_again,
    update_evidence_pool,
)
from gaprag.graphs.rag_ef.state import InputState, OutputState, State
from gaprag.nodes import add_nodes, add_router, add_short_answer, compile_graph


def route_after_retrieve(
    state: State, runtime: Runtime[Context]
) -> Literal["rerank_filter", "assemble_evidence"]:
    """Apply the score gate when ``min_pair_score`` is set and pairs were found."""
    if runtime.context.min_pair_score is not None and state.retrieved_pairs:
        return "rerank_filter"
    return "assemble_evidence"


def route_after_retrieve_again(
    state: State, runtime: Runtime[Context]
) -> Literal["rerank_filter", "assemble_evidence"]:
    """As after the first retrieval: the score gate when set and pairs were found."""
    return route_after_retrieve(state, runtime)


def route_after_generate_answer(
    state: State, runtime: Runtime[Context]
) -> Literal["feedback_classifier", "short_answer"]:
    """Judge the answer unless the feedback rounds are used up or neither a judge nor a
    review is asked for."""
    ctx = runtime.context
    if state.feedback_rounds >= ctx.max_feedback_rounds:
        return "short_answer"
    if ctx.judge == "off" and not ctx.review:
        return "short_answer"
    return "feedback_classifier"


def route_after_feedback_classifier(
    state: State, runtime: Runtime[Context]
) -> Literal["collect_feedback", "short_answer"]:
    """Ask the expert when every answer is reviewed or the judge found it incorrect."""
    if runtime.context.review or state.verdict == "incorrect":
        return "collect_feedback"
    return "short_answer"


def route_after_collect_feedback(state: State) -> Literal["update_evidence_pool", "short_answer"]:
    """Insert the expert's correction when one was given."""
    return "update_evidence_pool" if state.feedback is not None else "short_answer"


def route_after_update_evidence_pool(
    state: State, runtime: Runtime[Context]
) -> Literal["retrieve_again", "short_answer"]:
    """Answer once more from the updated store when the triple was added,
    ``reanswer_after_feedback`` is on and the rounds allow it."""
    ctx = runtime.context
    if state.stop_reason != "feedback_added":  # not stored: writes off, or an invalid triple
        return "short_answer"
    if ctx.reanswer_after_feedback and state.feedback_rounds <= ctx.max_feedback_rounds:
        return "retrieve_again"
    return "short_answer"


def build(
    deps: Deps,
    context: type[Context] = Context,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    builder = StateGraph(
        State, context_schema=context, input_schema=InputState, output_schema=OutputState
    )
    add_nodes(
        builder, deps, retrieve, rerank_filter, assemble_evidence, generate_answer,
        feedback_classifier, collect_feedback, update_evidence_pool, retrieve_again,
    )  # fmt: skip
    add_router(builder, "retrieve", route_after_retrieve)
    add_router(builder, "retrieve_again", route_after_retrieve_again)
    builder.add_edge("rerank_filter", "assemble_evidence")
    builder.add_edge("assemble_evidence", "generate_answer")
    add_router(
        builder, "generate_answer", route_after_generate_answer,
        on_limit={"feedback_classifier": "short_answer"},
    )  # fmt: skip
    add_router(
        builder, "feedback_classifier", route_after_feedback_classifier,
        on_limit={"collect_feedback": "short_answer"},
    )  # fmt: skip
    add_router(builder, "collect_feedback", route_after_collect_feedback)
    add_router(
        builder, "update_evidence_pool", route_after_update_evidence_pool,
        on_limit={"retrieve_again": "short_answer"},
    )  # fmt: skip
    add_short_answer(builder, deps)
    # a feedback round: feedback_classifier, collect_feedback, update_evidence_pool,
    # retrieve_again, rerank_filter, assemble_evidence, generate_answer
    return compile_graph(builder, checkpointer, name="rag_ef", loops={"max_feedback_rounds": 7})


__all__ = ["Context", "build"]
