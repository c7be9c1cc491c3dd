"""migres: missing-information guided retrieve - extract - solve (Wang et al., MIGRES).

Each round retrieves, filters, extracts and verifies facts, then the judge answers from the
known facts or says what is missing and new queries are generated; after T judge rounds a
final call forces an answer. Nodes: :mod:`gaprag.graphs.migres.nodes`; the method:
docs/methods/migres.md.
"""

from __future__ import annotations

from typing import Any, Literal

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from gaprag.graphs.migres.context import Context, budget
from gaprag.graphs.migres.deps import MigresDeps
from gaprag.graphs.migres.nodes import (
    extract,
    finalize,
    gathered,
    generate_answer,
    init,
    judge_missing,
    llm_knowledge,
    regenerate_keywords,
    rerank_filter,
    retrieve,
    update_evidence_pool,
    verify_nli,
)
from gaprag.graphs.migres.state import InputState, OutputState, State
from gaprag.nodes import add_nodes, add_router, add_short_answer, compile_graph


def route_after_rerank_filter(
    state: State, runtime: Runtime[Context]
) -> Literal["extract", "llm_knowledge", "update_evidence_pool"]:
    """Extract from the kept snippets; with none, ask the LLM's own knowledge when
    ``llm_knowledge`` is on, else go on with the pool as it is."""
    if state.filtered_snippets:
        return "extract"
    return "llm_knowledge" if runtime.context.llm_knowledge else "update_evidence_pool"


def route_after_update_evidence_pool(
    state: State, runtime: Runtime[Context]
) -> Literal["judge_missing", "generate_answer"]:
    """Judge again while judge rounds are left, else force the final answer."""
    return "generate_answer" if state.judge_rounds >= budget(runtime.context) else "judge_missing"


def route_after_judge_missing(state: State) -> Literal["finalize", "regenerate_keywords"]:
    """Finish when the judge answered, else generate new queries for what is missing."""
    return "finalize" if state.status == "answered" else "regenerate_keywords"


def build(
    deps: MigresDeps,
    context: type[Context] = Context,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    builder = StateGraph(
        State, context_schema=context, input_schema=InputState, output_schema=OutputState
    )
    add_nodes(
        builder, deps, init, retrieve, rerank_filter, llm_knowledge, extract, verify_nli,
        update_evidence_pool, judge_missing, regenerate_keywords, generate_answer, finalize,
        gate=True,
    )  # fmt: skip
    builder.add_edge("init", "retrieve")
    builder.add_edge("retrieve", "rerank_filter")
    add_router(builder, "rerank_filter", route_after_rerank_filter)
    builder.add_edge("llm_knowledge", "extract")
    builder.add_edge("extract", "verify_nli")
    builder.add_edge("verify_nli", "update_evidence_pool")
    add_router(
        builder, "update_evidence_pool", route_after_update_evidence_pool,
        on_limit={"judge_missing": "generate_answer"},
    )  # fmt: skip
    add_router(
        builder, "judge_missing", route_after_judge_missing,
        on_limit={"regenerate_keywords": "generate_answer"},
    )  # fmt: skip
    builder.add_edge("regenerate_keywords", "retrieve")
    builder.add_edge("generate_answer", "finalize")
    add_short_answer(builder, deps, after="finalize", reader=gathered, choice=True)
    # a round: retrieve, rerank_filter, llm_knowledge, extract, verify_nli,
    # update_evidence_pool, judge_missing, regenerate_keywords (T judge rounds, T+1 retrievals)
    return compile_graph(builder, checkpointer, name="migres", loops={"max_iterations": 8})


__all__ = ["Context", "build"]
