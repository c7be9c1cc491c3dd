"""rfm_rag: RFM-RAG (Li et al., arXiv 2508.17862). Retrieval feedback + a persistent evidence pool.

extract_question_structure -> retrieve -> extract_evidence -> update_evidence_pool, then the
sufficiency judge (feedback_classifier) either ends the loop or finds the knowledge gaps
(judge_missing) and the next query (regenerate_keywords). At most ``max_iterations``
retrievals; at the cap the judge is skipped (its verdict could not change anything).
The nodes are in :mod:`gaprag.graphs.rfm_rag.nodes`; see docs/methods/rfm_rag.md.
"""

from __future__ import annotations

from typing import Any, Literal

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from gaprag.graphs.rfm_rag.context import Context
from gaprag.graphs.rfm_rag.deps import RfmRagDeps
from gaprag.graphs.rfm_rag.nodes import (
    extract_evidence,
    extract_question_structure,
    feedback_classifier,
    gathered,
    generate_answer,
    judge_missing,
    regenerate_keywords,
    retrieve,
    update_evidence_pool,
)
from gaprag.graphs.rfm_rag.state import InputState, OutputState, State
from gaprag.nodes import add_nodes, add_router, add_short_answer, compile_graph


def route_after_update_evidence_pool(
    state: State, runtime: Runtime[Context]
) -> Literal["feedback_classifier", "generate_answer"]:
    """At the retrieval cap, answer (the judge's verdict could not change anything)."""
    if state.iterations >= runtime.context.max_iterations:
        return "generate_answer"
    return "feedback_classifier"


def route_after_feedback_classifier(state: State) -> Literal["judge_missing", "generate_answer"]:
    """Answer when the evidence is judged sufficient, else look for the knowledge gaps."""
    return "generate_answer" if state.sufficient else "judge_missing"


def build(
    deps: RfmRagDeps,
    context: type[Context] = Context,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    builder = StateGraph(
        State, context_schema=context, input_schema=InputState, output_schema=OutputState
    )
    add_nodes(
        builder, deps, extract_question_structure, retrieve, extract_evidence,
        update_evidence_pool, feedback_classifier, judge_missing, regenerate_keywords,
        generate_answer, gate=True,
    )  # fmt: skip
    builder.add_edge("extract_question_structure", "retrieve")
    builder.add_edge("retrieve", "extract_evidence")
    builder.add_edge("extract_evidence", "update_evidence_pool")
    add_router(
        builder, "update_evidence_pool", route_after_update_evidence_pool,
        on_limit={"feedback_classifier": "generate_answer"},
    )  # fmt: skip
    add_router(
        builder,
        "feedback_classifier",
        route_after_feedback_classifier,
        on_limit={"judge_missing": "generate_answer"},
    )
    builder.add_edge("judge_missing", "regenerate_keywords")
    builder.add_edge("regenerate_keywords", "retrieve")
    add_short_answer(builder, deps, after="generate_answer", reader=gathered, choice=True)
    # a round: retrieve, extract_evidence, update_evidence_pool, feedback_classifier,
    # judge_missing, regenerate_keywords
    return compile_graph(builder, checkpointer, name="rfm_rag", loops={"max_iterations": 6})


__all__ = ["Context", "build"]
