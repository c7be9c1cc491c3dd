"""iterkey: iterative keyword generation for BM25 RAG (Hayashi et al., arXiv 2505.08450).

generate_keywords (q -> K_1) -> retrieve (q + K_i, top-3) -> generate_answer (q, D_i -> a_i)
-> validate_answer (forced choice True/False; stop when P(True) >= validation_threshold), else
regenerate_keywords (q, K_i -> K_(i+1), no documents, no answer) and retrieve again, up to
``max_iterations`` rounds. See docs/methods/iterkey.md for every choice the paper leaves open.
"""

from __future__ import annotations

from typing import Any, Literal

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from gaprag.deps import Deps
from gaprag.graphs.iterkey.context import Context
from gaprag.graphs.iterkey.nodes import (
    finalize,
    gathered,
    generate_answer,
    generate_keywords,
    regenerate_keywords,
    retrieve,
    validate_answer,
)
from gaprag.graphs.iterkey.state import InputState, OutputState, State
from gaprag.nodes import add_nodes, add_router, add_short_answer, compile_graph


def route_after_validate_answer(
    state: State, runtime: Runtime[Context]
) -> Literal["finalize", "regenerate_keywords"]:
    """Finish when the answer was accepted or the rounds are used up, else regenerate the
    keywords for another round."""
    ctx = runtime.context
    if state.stop_validated:  # accepted at validation_threshold (never in calibration runs)
        return "finalize"
    if state.iterations >= ctx.max_iterations:
        return "finalize"
    return "regenerate_keywords"


def build(
    deps: Deps,
    context: type[Context] = Context,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    builder = StateGraph(
        State, context_schema=context, input_schema=InputState, output_schema=OutputState
    )
    add_nodes(
        builder, deps, generate_keywords, retrieve, generate_answer, validate_answer,
        regenerate_keywords, finalize, gate=True,
    )  # fmt: skip
    builder.add_edge("generate_keywords", "retrieve")
    builder.add_edge("retrieve", "generate_answer")
    builder.add_edge("generate_answer", "validate_answer")
    add_router(
        builder, "validate_answer", route_after_validate_answer,
        on_limit={"regenerate_keywords": "finalize"},
    )  # fmt: skip
    builder.add_edge("regenerate_keywords", "retrieve")
    add_short_answer(builder, deps, after="finalize", reader=gathered, choice=True)
    # a round: retrieve, generate_answer, validate_answer, regenerate_keywords
    return compile_graph(builder, checkpointer, name="iterkey", loops={"max_iterations": 4})


__all__ = ["Context", "build"]
