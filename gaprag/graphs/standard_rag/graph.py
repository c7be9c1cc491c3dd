"""standard_rag: the baseline. Retrieve top-k passages once, answer from them."""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph

from gaprag.deps import Deps
from gaprag.graphs.standard_rag.context import Context
from gaprag.graphs.standard_rag.nodes import generate_answer, retrieve
from gaprag.graphs.standard_rag.state import InputState, OutputState, State
from gaprag.nodes import add_nodes, add_short_answer, compile_graph


def build(
    deps: Deps,
    context: type[Context] = Context,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    builder = StateGraph(
        State, context_schema=context, input_schema=InputState, output_schema=OutputState
    )
    add_nodes(builder, deps, retrieve, generate_answer)
    builder.add_edge("retrieve", "generate_answer")
    add_short_answer(builder, deps, after="generate_answer", reader=True)
    return compile_graph(builder, checkpointer, name="standard_rag")


__all__ = ["Context", "build"]
