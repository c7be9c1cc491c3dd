"""escalating_rag: plain RAG once; when unsure, the first loop; when still unsure, the second;
the answer chosen among every candidate.

plain_rag (plain RAG's own request, scored; confident -> short_answer) -> first_loop (a
method's graph, its gate off, its answer scored) -> choose (the answer among the candidates;
agreed, confident, out of calls or no second loop -> short_answer) -> second_loop -> choose
-> short_answer. Each loop runs as a subgraph with its model profile; its decisions and trace
records are kept with the method's name as a prefix (``ircot.reason``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph

from gaprag.composed.escalating_rag.context import LOOPS, Context
from gaprag.composed.escalating_rag.deps import EscalatingDeps
from gaprag.composed.escalating_rag.nodes import (
    PASSED,
    choose,
    confident,
    first_loop,
    plain_rag,
    second_loop,
)
from gaprag.composed.escalating_rag.state import InputState, OutputState, State
from gaprag.errors import InputError
from gaprag.nodes import add_nodes, add_router, add_short_answer, compile_graph


def route_after_plain_rag(state: State) -> Literal["first_loop", "short_answer"]:
    """Plain RAG's answer when it was confident, else the first loop."""
    return "short_answer" if confident(state) else "first_loop"


def route_after_choose(state: State) -> Literal["second_loop", "short_answer"]:
    """The second loop when the step after the choice did not end the question
    (:func:`gaprag.nodes.choice.next_step` sets ``stop_reason`` when it does), else the
    answer."""
    return "short_answer" if state.stop_reason else "second_loop"


def subgraphs(context: type[Context]) -> dict[str, dict[str, Any]]:
    """The graphs a rung may run (:data:`LOOPS`), each with the build options it takes from
    this graph's operator settings; the registry (:func:`gaprag.graphs.build_graph`) builds
    them, each with its model profile, and gives them in ``EscalatingDeps.loops``."""
    defaults = {
        f.name: getattr(context, f.name)
        for f in dataclasses.fields(context)
        if f.name in PASSED and f.name != "filter" and getattr(context, f.name, None)
    }
    return dict.fromkeys(LOOPS, defaults)


def build(
    deps: EscalatingDeps,
    context: type[Context] = Context,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    missing = [m for m in LOOPS if m not in deps.loops]
    if missing:
        raise InputError(
            f"escalating_rag: no compiled graph for {', '.join(missing)} in deps.loops",
            hint="build it with gaprag.build_graph('escalating_rag'), which builds its loops",
        )
    builder = StateGraph(
        State, context_schema=context, input_schema=InputState, output_schema=OutputState
    )
    add_nodes(builder, deps, plain_rag, first_loop, choose, second_loop)
    add_router(builder, "plain_rag", route_after_plain_rag)
    builder.add_edge("first_loop", "choose")
    add_router(builder, "choose", route_after_choose)
    builder.add_edge("second_loop", "choose")
    add_short_answer(builder, deps)
    graph = compile_graph(builder, checkpointer, name="escalating_rag")
    # a loop runs inside a node: the run's recursion limit is inherited by its subgraph
    inner = max(int((g.config or {}).get("recursion_limit", 0)) for g in deps.loops.values())
    own = int((graph.config or {}).get("recursion_limit", 0))
    return graph.with_config(recursion_limit=max(own, inner))


__all__ = ["Context", "build", "subgraphs"]
