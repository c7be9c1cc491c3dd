"""Calls waiting for one of an endpoint's few slots take turns across clients, and across runs
within a client (:mod:`gaprag.llm.turns`); an endpoint without a slot count has no queue."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from gaprag.llm.client import LLM
from gaprag.llm.memo import run_scope
from gaprag.llm.turns import Turns, caller, endpoint_turns


async def settle() -> None:
    """Let every ready task run until it waits again."""
    for _ in range(5):
        await asyncio.sleep(0)


class Endpoint:
    """Records the order in which calls got their slot; each call holds it until released."""

    def __init__(self, turns: Turns) -> None:
        self.turns = turns
        self.order: list[str] = []
        self.done: dict[str, asyncio.Event] = {}

    def call(self, client: str, run: str, name: str) -> asyncio.Task[None]:
        self.done[name] = asyncio.Event()

        async def go() -> None:
            async with self.turns.aturn(client, run):
                self.order.append(name)
                await self.done[name].wait()

        return asyncio.create_task(go())

    async def finish(self, name: str) -> None:
        self.done[name].set()
        await settle()


async def test_one_clients_queue_takes_one_turn_for_each_turn_of_another() -> None:
    endpoint = Endpoint(Turns(1))
    tasks = [endpoint.call("alice", f"run{i}", f"a{i}") for i in range(4)]
    await settle()
    tasks += [endpoint.call("bob", "run", f"b{i}") for i in range(2)]
    await settle()
    for name in ["a0", "b0", "a1", "b1", "a2", "a3"]:
        await endpoint.finish(name)
    await asyncio.gather(*tasks)
    assert endpoint.order == ["a0", "b0", "a1", "b1", "a2", "a3"]


async def test_a_client_that_returns_after_a_pause_is_served_next() -> None:
    endpoint = Endpoint(Turns(1))
    tasks = [endpoint.call("bob", "run", "b0")]
    await settle()
    await endpoint.finish("b0")  # bob had his turn and waits for nothing now
    tasks += [endpoint.call("alice", f"run{i}", f"a{i}") for i in range(4)]
    await settle()
    await endpoint.finish("a0")
    await endpoint.finish("a1")
    tasks.append(endpoint.call("bob", "run", "b1"))  # behind alice's a2 and a3 in arrival
    await settle()
    for name in ["a2", "b1", "a3"]:
        await endpoint.finish(name)
    await asyncio.gather(*tasks)
    assert endpoint.order == ["b0", "a0", "a1", "a2", "b1", "a3"]


async def test_a_clients_runs_take_turns_and_a_runs_calls_keep_their_order() -> None:
    endpoint = Endpoint(Turns(1))
    tasks = [endpoint.call("alice", "r1", f"x{i}") for i in range(3)]
    tasks += [endpoint.call("alice", "r2", f"y{i}") for i in range(2)]
    await settle()
    for name in ["x0", "y0", "x1", "y1", "x2"]:
        await endpoint.finish(name)
    await asyncio.gather(*tasks)
    assert endpoint.order == ["x0", "y0", "x1", "y1", "x2"]


async def test_a_free_slot_goes_to_the_client_with_fewest_calls_at_the_endpoint() -> None:
    endpoint = Endpoint(Turns(3))
    tasks = [endpoint.call("alice", f"r{i}", f"a{i}") for i in range(4)]
    await settle()
    assert endpoint.order == ["a0", "a1", "a2"] and endpoint.turns.waiting == 1
    tasks += [endpoint.call("bob", "r", f"b{i}") for i in range(2)]
    await settle()
    await endpoint.finish("a0")
    assert endpoint.order[-1] == "b0"  # alice holds 2, bob none
    await endpoint.finish("a1")
    assert endpoint.order[-1] == "a3"  # each holds 1; alice's last turn is the older one
    for name in ["a2", "b0", "a3", "b1"]:
        await endpoint.finish(name)
    await asyncio.gather(*tasks)
    assert endpoint.order == ["a0", "a1", "a2", "b0", "a3", "b1"]
    assert endpoint.turns.in_use == 0


async def test_a_cancelled_waiting_call_leaves_its_place() -> None:
    endpoint = Endpoint(Turns(1))
    first = endpoint.call("alice", "r", "a0")
    await settle()
    cancelled = endpoint.call("bob", "r", "b0")
    later = endpoint.call("carol", "r", "c0")
    await settle()
    assert endpoint.turns.waiting == 2
    cancelled.cancel()
    await settle()
    assert endpoint.turns.waiting == 1
    await endpoint.finish("a0")
    await endpoint.finish("c0")
    await asyncio.gather(first, later)
    assert cancelled.cancelled() and endpoint.order == ["a0", "c0"]
    assert endpoint.turns.in_use == 0 and endpoint.turns.waiting == 0


async def test_a_call_cancelled_as_its_turn_came_passes_the_slot_on() -> None:
    turns = Turns(1)
    entered: list[str] = []

    async def call(client: str) -> None:
        async with turns.aturn(client, "r"):
            entered.append(client)

    holder = turns.aturn("alice", "r")
    await holder.__aenter__()
    bob, carol = asyncio.create_task(call("bob")), asyncio.create_task(call("carol"))
    await settle()
    await holder.__aexit__(None, None, None)  # bob's turn comes ...
    bob.cancel()  # ... and he is cancelled before he runs again
    await asyncio.gather(bob, carol, return_exceptions=True)
    assert bob.cancelled() and entered == ["carol"]
    assert turns.in_use == 0 and turns.waiting == 0


async def test_a_failing_call_releases_its_slot() -> None:
    turns = Turns(1)

    async def fail() -> None:
        async with turns.aturn("alice", "r"):
            raise ConnectionError("the endpoint hung up")

    with pytest.raises(ConnectionError):
        await fail()
    assert turns.in_use == 0
    async with turns.aturn("bob", "r"):
        assert turns.in_use == 1


def test_blocking_callers_in_threads_take_turns_too() -> None:
    turns = Turns(1)
    order: list[str] = []
    hold = threading.Event()
    held = threading.Event()

    def first() -> None:
        with turns.turn("alice", "r0"):
            order.append("a0")
            held.set()
            hold.wait(5)

    def later(client: str, run: str, name: str) -> None:
        with turns.turn(client, run):
            order.append(name)

    threads = [threading.Thread(target=first)]
    threads[0].start()
    held.wait(5)
    for client, run, name in [("alice", "r1", "a1"), ("alice", "r2", "a2"), ("bob", "r", "b0")]:
        threads.append(threading.Thread(target=later, args=(client, run, name)))
        threads[-1].start()
        while turns.waiting < len(threads) - 1:
            threading.Event().wait(0.01)
    hold.set()
    for thread in threads:
        thread.join(5)
    assert order == ["a0", "b0", "a1", "a2"]


def test_no_slots_means_no_turns_and_no_waiting() -> None:
    llm = LLM(FakeListChatModel(responses=["ok"] * 20))
    assert llm.turns is None

    async def many() -> list[str]:
        return list(await asyncio.gather(*(llm.agenerate("q") for _ in range(20))))

    assert asyncio.run(many()) == ["ok"] * 20
    with pytest.raises(ValueError, match="at least 1"):
        Turns(0)


def test_the_llm_layer_takes_a_turn_around_every_call_and_gives_it_back() -> None:
    turns = Turns(1)
    seen: list[int] = []

    class Watched(FakeListChatModel):
        def _call(self, *args: Any, **kwargs: Any) -> str:
            seen.append(turns.in_use)
            return super()._call(*args, **kwargs)

    llm = LLM(Watched(responses=["a", "b"]), turns=turns)
    assert llm.generate("q1") == "a"  # a blocking call
    assert asyncio.run(llm.agenerate("q2")) == "b"
    assert seen == [1, 1] and turns.in_use == 0


def test_one_endpoint_has_one_queue_per_process() -> None:
    assert endpoint_turns("http://h:1/v1/", 2) is endpoint_turns("http://h:1/v1", 2)
    assert endpoint_turns("http://h:1/v1", 2) is not endpoint_turns("http://h:2/v1", 2)


def test_the_caller_is_the_served_client_and_its_run() -> None:
    class S(TypedDict):
        who: str

    def node(state: S) -> dict[str, Any]:
        with run_scope("run-key"):
            client, run = caller()
        return {"who": f"{client}/{run}"}

    graph = StateGraph(S)
    graph.add_node("node", node)
    graph.add_edge(START, "node")
    graph.add_edge("node", END)
    app = graph.compile()
    served: RunnableConfig = {"configurable": {"langgraph_auth_user_id": "alice"}}
    assert app.invoke({"who": ""}, served)["who"] == "alice/run-key"
    assert app.invoke({"who": ""})["who"] == "/run-key"
    assert caller() == ("", "")


@pytest.mark.parametrize(("value", "slots"), [("", None), ("0", None), ("3", 3)])
def test_the_configured_endpoints_slots_come_from_the_operator(
    monkeypatch: pytest.MonkeyPatch, value: str, slots: int | None
) -> None:
    from gaprag.llm.factory import default_llm

    monkeypatch.setenv("GAPRAG_BASE_URL", f"http://127.0.0.1:9/v{value or 'x'}")
    monkeypatch.setenv("GAPRAG_MODEL", "m")
    monkeypatch.setenv("GAPRAG_ENDPOINT_SLOTS", value)
    llm = default_llm()
    assert (llm.turns.slots if llm.turns is not None else None) == slots


@pytest.mark.parametrize("value", ["two", "-1"])
def test_a_bad_slot_count_is_refused_with_a_hint(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    from gaprag.config import endpoint_slots
    from gaprag.errors import GapragError

    monkeypatch.setenv("GAPRAG_ENDPOINT_SLOTS", value)
    with pytest.raises(GapragError, match="GAPRAG_ENDPOINT_SLOTS") as err:
        endpoint_slots()
    assert "e.g. GAPRAG_ENDPOINT_SLOTS=4" in str(err.value.hint)


class Recording(Turns):
    """Turns that note who took each one."""

    def __init__(self) -> None:
        super().__init__(1)
        self.seen: list[tuple[str, str]] = []

    def aturn(self, client: str, run: str) -> Any:
        self.seen.append((client, run))
        return super().aturn(client, run)

    def turn(self, client: str, run: str) -> Any:
        self.seen.append((client, run))
        return super().turn(client, run)


def test_a_graphs_calls_take_turns_as_the_served_client_and_its_run(store: Any) -> None:
    from gaprag.graphs import build_graph

    turns = Recording()
    llm = LLM(FakeListChatModel(responses=["Paris"] * 10), turns=turns)
    graph = build_graph("standard_rag", llm=llm, retriever=store)
    question = {"question": "What is the capital of France?"}
    served: RunnableConfig = {"configurable": {"langgraph_auth_user_id": "alice"}}
    asyncio.run(graph.ainvoke(question, served))
    first = turns.seen[:]
    graph.invoke(question, served)
    second = turns.seen[len(first) :]
    graph.invoke(question)
    third = turns.seen[len(first) + len(second) :]
    assert first and second and third
    assert {c for c, _ in first + second} == {"alice"} and {c for c, _ in third} == {""}
    runs = [{r for _, r in calls} for calls in (first, second, third)]
    assert all(len(r) == 1 and "" not in r for r in runs)  # one run key per invocation
    assert len(runs[0] | runs[1] | runs[2]) == 3


async def test_idle_runs_beyond_the_remembered_ones_are_forgotten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gaprag.llm import turns as module

    monkeypatch.setattr(module, "REMEMBERED", 3)
    turns = Turns(1)
    for i in range(10):
        async with turns.aturn("alice", f"run{i}"):
            pass
    assert list(turns._runs) == [("alice", f"run{i}") for i in (7, 8, 9)]
