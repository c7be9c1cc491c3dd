"""A method's nodes as LangGraph runs them (gaprag.nodes.wiring.as_node): each runs its one
implementation natively under ``invoke`` and ``ainvoke`` with the run's resolved settings, and
``stream``, ``astream_events`` and callbacks show one run per node under the node's name."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Annotated, Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langgraph.graph import StateGraph
from langgraph.runtime import Runtime

from gaprag import build_graph
from gaprag.aio import sync_mode
from gaprag.context import BaseContext
from gaprag.deps import Deps
from gaprag.nodes import add_nodes, compile_graph
from gaprag.state.base import BaseState, InputState
from gaprag.stores.store import Store
from gaprag.testing import ScriptedChatModel


def _add(left: list[Any], right: list[Any]) -> list[Any]:
    return left + right


@dataclass(kw_only=True)
class ProbeState(BaseState):
    seen: Annotated[list[dict[str, Any]], _add] = field(default_factory=list)


@dataclass(kw_only=True)
class ProbeContext(BaseContext):
    pass


async def probe(state: ProbeState, runtime: Runtime[ProbeContext], deps: Deps) -> dict[str, Any]:
    return {
        "seen": [
            {
                "sync": sync_mode(),
                "thread": threading.get_ident(),
                "loop": _running_loop(),
                "context": type(runtime.context),
                "answer_max_tokens": runtime.context.answer_max_tokens,
                "deps": deps,
            }
        ],
        "stop_reason": "answered",
    }


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def probe_graph(deps: Deps) -> Any:
    builder = StateGraph(ProbeState, context_schema=ProbeContext, input_schema=InputState)
    add_nodes(builder, deps, probe)
    return compile_graph(builder, None, name="probe")


def test_a_node_runs_natively_in_each_mode_with_the_runs_settings() -> None:
    deps = Deps()
    graph = probe_graph(deps)
    (sync,) = graph.invoke({"question": "q"}, context={"answer_max_tokens": 7})["seen"]
    assert sync["sync"] is True and sync["loop"] is None  # driven in the calling thread
    assert sync["thread"] == threading.get_ident()

    async def run() -> tuple[dict[str, Any], asyncio.AbstractEventLoop, int]:
        out = await graph.ainvoke({"question": "q"}, context={"answer_max_tokens": 9})
        return out["seen"][0], asyncio.get_running_loop(), threading.get_ident()

    seen, loop, thread = asyncio.run(run())
    assert seen["sync"] is False and seen["loop"] is loop and seen["thread"] == thread
    for one, value in ((sync, 7), (seen, 9)):
        assert issubclass(one["context"], ProbeContext) and one["answer_max_tokens"] == value
        assert one["deps"] is deps


# -- what a trace and a stream show -------------------------------------------------------------
def node_runs(events: list[tuple[str, str, tuple[str, ...], int]], node: str) -> list[Any]:
    return [e for e in events if e[1] == node]


def expected_node_runs(node: str, depth: int) -> list[tuple[str, str, tuple[str, ...], int]]:
    """A node's task (its name, at ``depth``) holds one run of the node (tagged as the task's
    first step), which does not stream; the task streams its update."""
    return [
        ("on_chain_start", node, (), depth),
        ("on_chain_start", node, ("seq:step:1",), depth + 1),
        ("on_chain_end", node, ("seq:step:1",), depth + 1),
        ("on_chain_stream", node, (), depth),
        ("on_chain_end", node, (), depth),
    ]


def chain_events(graph: Any, question: str) -> list[tuple[str, str, tuple[str, ...], int]]:
    async def collect() -> list[tuple[str, str, tuple[str, ...], int]]:
        out = []
        async for e in graph.astream_events({"question": question}, version="v2"):
            if e["event"].startswith("on_chain"):
                tags = tuple(t for t in e.get("tags", []) if not t.startswith("graph:step"))
                out.append((e["event"], e["name"], tags, len(e["parent_ids"])))
        return out

    return asyncio.run(collect())


class ChainStarts(BaseCallbackHandler):
    def __init__(self) -> None:
        self.starts: list[tuple[str, tuple[str, ...]]] = []

    def on_chain_start(
        self, serialized: Any, inputs: Any, *, run_id: UUID, tags: Any = None, **kwargs: Any
    ) -> None:
        names = tuple(t for t in (tags or []) if not t.startswith("graph:step"))
        self.starts.append((kwargs.get("name") or "", names))


def test_stream_events_and_callbacks_name_each_node_once_per_step(store: Store) -> None:
    def graph() -> Any:
        return build_graph(
            "iterkey", llm=ScriptedChatModel(default="Paris"), retriever=store, max_iterations=2
        )

    question = "What is the capital of France?"
    steps = [next(iter(c)) for c in graph().stream({"question": question}, stream_mode="updates")]
    assert steps[:3] == ["gate", "generate_keywords", "retrieve"] and steps[-1] == "short_answer"
    events = chain_events(graph(), question)
    assert events[0][:2] == ("on_chain_start", "iterkey") and events[-1][:2] == (
        "on_chain_end",
        "iterkey",
    )
    for node in set(steps):
        assert node_runs(events, node) == expected_node_runs(node, 1) * steps.count(node), node
    routers = {name for _, name, _, _ in events if name.startswith("route_after_")}
    assert routers == {"route_after_gate", "route_after_validate_answer"}
    handler = ChainStarts()
    graph().invoke({"question": question}, {"callbacks": [handler]})
    starts = [s for s in handler.starts if not s[0].startswith("route_after_")]
    assert starts[0] == ("iterkey", ())
    assert starts[1:] == [s for node in steps for s in ((node, ()), (node, ("seq:step:1",)))]
