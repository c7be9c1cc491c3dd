"""Fair turns at an endpoint with few slots.

An endpoint that serves a few requests at once (the embedded server's ``GAPRAG_LOCAL_SLOTS``,
a remote one's ``GAPRAG_ENDPOINT_SLOTS``) queues the others in arrival order, so a client with
many runs in flight, each sending its next call as soon as the last one returns, stands ahead
of another client's single call with all of them. :class:`Turns` keeps the calls of one
process to at most ``slots`` at the endpoint and hands a free slot to a waiting call of the
client served least: the fewest calls at the endpoint, then the longest since its last turn
(never served: first); within that client, to the run served least in the same way; within
that run, to its earliest call. So one client's many runs take one turn for each turn of
another waiting client, and one run's many calls one turn for each turn of its client's other
runs. The turns hold within one process: several server processes each keep their own.

:meth:`LLM._send <gaprag.llm.client.LLM._send>` takes a turn around every request when its
endpoint has a slot count; who is calling comes from the run (:func:`caller`). An endpoint with
no slot count has no turns and nothing waits.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from langchain_core.runnables.config import var_child_runnable_config

from gaprag.llm.memo import current_run

#: Clients and runs whose last turn is remembered (least recently served dropped first).
REMEMBERED = 4096
#: The metadata key LangGraph's server names a served client by (set by gaprag's auth).
_CLIENT_KEYS = ("langgraph_auth_user_id",)
_K = TypeVar("_K", str, tuple[str, str])


def caller() -> tuple[str, str]:
    """Who makes the call being sent: ``(client, run)``.

    The client is the served caller LangGraph's server names in the run's config
    (``langgraph_auth_user_id``, the identity gaprag's auth gave the token; else the run's
    ``owner`` metadata); '' outside a served run. The run is the question's run
    (:func:`gaprag.llm.memo.current_run`), else the run id LangGraph gives, else ''."""
    config = var_child_runnable_config.get() or {}
    configurable = config.get("configurable") or {}
    metadata = config.get("metadata") or {}
    client = next((configurable[k] for k in _CLIENT_KEYS if configurable.get(k)), None)
    client = client or metadata.get("owner") or ""
    run = current_run() or configurable.get("run_id") or metadata.get("run_id") or ""
    return str(client), str(run)


@dataclass(eq=False)
class _Call:
    client: str
    run: str
    order: int  # arrival
    wake: Callable[[], None]
    granted: bool = False


@dataclass
class _Party:
    """A client's or a run's standing: calls at the endpoint, its last turn's number."""

    held: int = 0
    last: int = 0
    waiting: deque[_Call] = field(default_factory=deque)


class Turns:
    """At most ``slots`` calls at once, granted round robin across clients and their runs.
    Thread-safe; a waiting call may be awaited on any event loop or blocked on in a thread."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"an endpoint serves at least 1 request at once, not {slots}")
        self.slots = slots
        self._free = slots
        self._count = 0  # calls that arrived (their order) and turns given (their number)
        self._turns = 0
        self._clients: OrderedDict[str, _Party] = OrderedDict()
        self._runs: OrderedDict[tuple[str, str], _Party] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def in_use(self) -> int:
        """Slots held now."""
        with self._lock:
            return self.slots - self._free

    @property
    def waiting(self) -> int:
        """Calls waiting for a slot now."""
        with self._lock:
            return sum(len(run.waiting) for run in self._runs.values())

    @asynccontextmanager
    async def aturn(self, client: str, run: str) -> AsyncIterator[None]:
        """Hold a slot for ``run`` of ``client`` while the block runs; wait for it if none
        is free. A cancelled wait leaves the queue (a slot granted meanwhile goes on)."""
        loop = asyncio.get_running_loop()
        granted: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            loop.call_soon_threadsafe(_resolve, granted)

        call = self._arrive(client, run, wake)
        if not call.granted:
            try:
                await granted
            except BaseException:
                self._leave(call)
                raise
        try:
            yield
        finally:
            self._release(call)

    @contextmanager
    def turn(self, client: str, run: str) -> Iterator[None]:
        """:meth:`aturn` for a blocking caller: the thread waits for its turn."""
        granted = threading.Event()
        call = self._arrive(client, run, granted.set)
        if not call.granted:
            try:
                granted.wait()
            except BaseException:
                self._leave(call)
                raise
        try:
            yield
        finally:
            self._release(call)

    # -- the queue, under the lock ---------------------------------------------------------
    def _arrive(self, client: str, run: str, wake: Callable[[], None]) -> _Call:
        with self._lock:
            self._count += 1
            call = _Call(client, run, self._count, wake)
            self._party(self._clients, client).waiting.append(call)
            self._party(self._runs, (client, run)).waiting.append(call)
            self._grant()
            return call

    def _leave(self, call: _Call) -> None:
        """A waiting call gives up: out of the queue, or its slot to the next call."""
        with self._lock:
            if not call.granted:
                self._clients[call.client].waiting.remove(call)
                self._runs[(call.client, call.run)].waiting.remove(call)
                return
        self._release(call)

    def _release(self, call: _Call) -> None:
        with self._lock:
            self._free += 1
            self._clients[call.client].held -= 1
            self._runs[(call.client, call.run)].held -= 1
            self._grant()

    def _grant(self) -> None:
        """Give every free slot to the next waiting call."""
        while self._free > 0:
            waiting = [(k, p) for k, p in self._clients.items() if p.waiting]
            if not waiting:
                return
            name, client = min(waiting, key=lambda kp: _standing(kp[1]))
            runs = {call.run for call in client.waiting}  # the client's runs that wait
            run = min((self._runs[(name, r)] for r in runs), key=_standing)
            call = run.waiting.popleft()
            client.waiting.remove(call)
            self._turns += 1
            for party in (client, run):
                party.held += 1
                party.last = self._turns
            self._clients.move_to_end(name)
            self._runs.move_to_end((name, call.run))
            self._free -= 1
            call.granted = True
            try:
                call.wake()
            except RuntimeError:  # its event loop is closed: nobody waits for the slot
                self._free += 1
                client.held -= 1
                run.held -= 1
        _forget(self._clients)
        _forget(self._runs)

    @staticmethod
    def _party(table: OrderedDict[_K, _Party], key: _K) -> _Party:
        party = table.get(key)
        if party is None:
            party = table[key] = _Party()
        table.move_to_end(key)
        return party


def _forget(table: OrderedDict[_K, _Party]) -> None:
    """Drop the least recently served idle parties beyond :data:`REMEMBERED`."""
    if len(table) <= REMEMBERED:
        return
    for key in list(table)[: len(table) - REMEMBERED]:
        if not table[key].held and not table[key].waiting:
            del table[key]


def _standing(party: _Party) -> tuple[int, int, int]:
    """Who is served next: fewest calls at the endpoint, then the oldest last turn, then the
    earliest waiting call."""
    return (party.held, party.last, party.waiting[0].order)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():  # a cancelled wait: :meth:`Turns._leave` passes the slot on
        future.set_result(None)


_endpoints: dict[tuple[str, int], Turns] = {}
_endpoints_lock = threading.Lock()


def endpoint_turns(base_url: str, slots: int) -> Turns:
    """The turns of the endpoint ``base_url`` serving ``slots`` requests at once: one per
    endpoint and process, shared by every client of it."""
    key = (base_url.rstrip("/"), slots)
    with _endpoints_lock:
        turns = _endpoints.get(key)
        if turns is None:
            turns = _endpoints[key] = Turns(slots)
        return turns
