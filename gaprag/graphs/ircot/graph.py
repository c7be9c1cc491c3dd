"""ircot: interleaving retrieval with chain-of-thought reasoning (Trivedi et al., arXiv 2212.10509).

retrieve (the question, K passages) -> reason (one CoT sentence over all passages so far) ->
stop when the sentence states the answer or after ``max_steps`` sentences, else retrieve K
new passages with the sentence as the query and reason again -> generate_answer.
"""

from __future__ import annotations

from typing import Any, Literal

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from gaprag.deps import Deps
from gaprag.graphs.ircot.context import Context
from gaprag.graphs.ircot.nodes import (
    ends_empty,
    final_answer,
    gathered,
    generate_answer,
    reason,
    retrieve,
)
from gaprag.graphs.ircot.state import InputState, OutputState, State
from gaprag.nodes import add_nodes, add_router, add_short_answer, compile_graph


def route_after_reason(
    state: State, runtime: Runtime[Context]
) -> Literal["retrieve", "generate_answer"]:
    """Answer when the last sentence states the answer, the last step wrote none and
    ``empty_step="stop"``, or ``max_steps`` steps are done; else retrieve with that sentence."""
    if ends_empty(state.last_step_empty, runtime.context):
        return "generate_answer"
    if state.thoughts and final_answer(state.thoughts[-1]) is not None:
        return "generate_answer"
    return "generate_answer" if state.iterations >= runtime.context.max_steps else "retrieve"


def build(
    deps: Deps,
    context: type[Context] = Context,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    builder = StateGraph(
        State, context_schema=context, input_schema=InputState, output_schema=OutputState
    )
    add_nodes(builder, deps, retrieve, reason, generate_answer, gate=True)
    builder.add_edge("retrieve", "reason")
    add_router(builder, "reason", route_after_reason, on_limit={"retrieve": "generate_answer"})
    add_short_answer(builder, deps, after="generate_answer", reader=gathered, choice=True)
    # a step: retrieve, reason
    return compile_graph(builder, checkpointer, name="ircot", loops={"max_steps": 2})


__all__ = ["Context", "build"]
