"""missing_knowledge (MisK-RAG): one pass of missing-knowledge retrieval.

retrieve (user question -> KB A) -> generate_draft -> judge_missing (ONE call: thought, whether
knowledge is missing, the missing knowledge, KB-aligned queries; then the decision on
P(nothing missing) against judge_threshold) -> retrieve_missing (each query -> KB B, chunks
not retrieved yet) -> update_evidence_pool (md5 dedup, round-robin merge within the budget) ->
generate_answer (Context / Missing Knowledge Context / Question). When the decision is to stop,
the graph goes straight to generate_answer. See docs/methods/missing_knowledge.md.
"""

from __future__ import annotations

from typing import Any, Literal

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from gaprag.deps import Deps
from gaprag.graphs.missing_knowledge.context import Context
from gaprag.graphs.missing_knowledge.nodes import (
    gathered,
    generate_answer,
    generate_draft,
    judge_missing,
    retrieve,
    retrieve_missing,
    update_evidence_pool,
)
from gaprag.graphs.missing_knowledge.state import InputState, OutputState, State
from gaprag.nodes import add_nodes, add_router, add_short_answer, compile_graph


def route_after_judge_missing(
    state: State, runtime: Runtime[Context]
) -> Literal["retrieve_missing", "generate_answer"]:
    """Retrieve for the missing knowledge when the decision was to continue and there are
    queries (the judge's, else the user question)."""
    return "retrieve_missing" if state.missing and state.mk_queries else "generate_answer"


def build(
    deps: Deps,
    context: type[Context] = Context,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """``deps.kb_pairs``: a question-answer pair store (else ``qa_store`` is opened on first
    use when a knowledge base needs pairs)."""
    builder = StateGraph(
        State, context_schema=context, input_schema=InputState, output_schema=OutputState
    )
    add_nodes(
        builder, deps, retrieve, generate_draft, judge_missing, retrieve_missing,
        update_evidence_pool, generate_answer, gate=True,
    )  # fmt: skip
    builder.add_edge("retrieve", "generate_draft")
    builder.add_edge("generate_draft", "judge_missing")
    add_router(
        builder, "judge_missing", route_after_judge_missing,
        on_limit={"retrieve_missing": "generate_answer"},
    )  # fmt: skip
    builder.add_edge("retrieve_missing", "update_evidence_pool")
    builder.add_edge("update_evidence_pool", "generate_answer")
    add_short_answer(builder, deps, after="generate_answer", reader=gathered, choice=True)
    return compile_graph(builder, checkpointer, name="missing_knowledge")


__all__ = ["Context", "build", "route_after_judge_missing"]
