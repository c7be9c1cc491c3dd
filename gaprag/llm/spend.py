"""A run's spend, kept where it happens: in the LLM layer, for the run, outside the graph state.

Every call of :class:`gaprag.llm.client.LLM` inside a run goes through the run's
:class:`Ledger`. Before a call is sent the ledger checks the run's limits, all set when the
run starts (:func:`gaprag.nodes.wiring.run_limits`): the operator's
(:class:`gaprag.operator.OperatorPolicy`), the run's step time against its deadline and the
tokens already spent plus the call's cost (its prompt's estimate plus its ``max_tokens``)
against its token budget; and a graph's ``call_budget`` setting (escalating_rag), the calls
sent or in flight against it. A call the run cannot afford is not sent: the layer raises
:class:`SpendLimit`, the ledger stays stopped for the rest of the run, and the node wiring
(:mod:`gaprag.nodes.wiring`) ends the question with the limit as its ``stop_reason``. What a
call really spent (the endpoint's usage, else the estimate) is added once it returns; calls
in flight hold their cost, so concurrent calls of one node cannot overshoot together.

The ledger also counts how many times each node ran, which bounds the run's loops whatever
counters its state holds, and gives the run its key (the scope of :mod:`gaprag.llm.memo`).
Nothing in it is read from the state, so a state written by a caller changes none of it.

Which run a node belongs to (:func:`ledger_for`) comes from the run itself: one ledger per
invocation of the graph (LangGraph's run-scoped ``Runtime.control``), and on a checkpointed
thread an invocation that does not start at the graph's first node (a resume after RAG-EF's
expert review, an ``invoke(None, config)``) continues the ledger of the thread's last run in
this process. An invocation that starts at the first node starts a new ledger.
"""

from __future__ import annotations

import contextvars
import math
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

#: Runs whose ledgers are kept (least recently used dropped first): far more than run at once.
RUNS_KEPT = 4096
#: Threads whose last run's ledger is kept for a resume (least recently used dropped first).
THREADS_KEPT = 1024


class SpendLimit(BaseException):
    """A call the run cannot afford; ``reason`` is ``token_budget``, ``deadline`` or
    ``call_budget``.

    A ``BaseException``, like a cancellation: a step's ``except Exception`` (a fallback for an
    endpoint without logprobs, say) does not take it for a failure; the node wiring ends the
    step with it."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass
class Ledger:
    """One run's spend: LLM calls and tokens really spent, step time, steps taken."""

    token_budget: int | None = None
    deadline_s: float | None = None
    key: str = field(default_factory=lambda: uuid.uuid4().hex)
    calls: int = 0
    tokens: int = 0
    reserved: int = 0
    call_budget: int | None = None
    """The most LLM calls the run may send (a graph's ``call_budget`` setting); None: no
    limit."""
    pending: int = 0
    """Calls admitted and not yet answered."""
    steps: dict[str, int] = field(default_factory=dict)
    """How many times each node has run (returned) in this run."""
    stopped: str = ""
    """The limit that refused a call ('' until one did); calls stay refused after it."""
    _closed_s: float = 0.0
    _open: dict[int, float] = field(default_factory=dict)
    _next: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # -- time --------------------------------------------------------------------------------
    def elapsed(self) -> float:
        """Seconds of step time: finished steps, plus the time since the oldest open one
        started (steps running in parallel count once)."""
        with self._lock:
            running = time.perf_counter() - min(self._open.values()) if self._open else 0.0
            return self._closed_s + running

    def most_runs(self) -> int:
        """The most times any one node has run in this run."""
        with self._lock:
            return max(self.steps.values(), default=0)

    @contextmanager
    def step(self, node: str) -> Iterator[None]:
        """One execution of ``node``: its time added to the run's step time, and counted when
        it returns (a step interrupted for a review runs again when resumed: it counts once)."""
        with self._lock:
            self._next += 1
            token = self._next
            self._open[token] = time.perf_counter()
        try:
            yield
        finally:
            with self._lock:
                self._closed_s += time.perf_counter() - self._open.pop(token)
        with self._lock:
            self.steps[node] = self.steps.get(node, 0) + 1

    # -- limits ------------------------------------------------------------------------------
    def limit(self) -> str:
        """The limit this run has reached: ``token_budget``, ``deadline``, ``call_budget``
        (once a call past it was refused: a run with its last call left may still answer)
        or ''."""
        if self.stopped:
            return self.stopped
        if self.token_budget is not None and self.tokens >= self.token_budget:
            return "token_budget"
        if self.deadline_s is not None and self.elapsed() >= self.deadline_s:
            return "deadline"
        return ""

    def stop(self, reason: str) -> None:
        """End the run's calls for ``reason`` (a filter matching no passage, say): every call
        from now on is refused with it, and the run ends as at a spend limit."""
        with self._lock:
            self.stopped = self.stopped or reason

    def admit(self, cost: int) -> int:
        """Hold ``cost`` tokens for a call about to be sent and return it; :class:`SpendLimit`
        (and the run stopped) when the deadline has passed or the budget cannot cover it."""
        reason, detail = "", ""
        if self.deadline_s is not None and self.elapsed() >= self.deadline_s:
            reason, detail = "deadline", f"{self.deadline_s:g} s of step time spent"
        with self._lock:
            if not reason and self.stopped:
                reason = self.stopped
            committed = self.tokens + self.reserved
            budget = self.token_budget
            if not reason and budget is not None and committed + cost > budget:
                reason, detail = "token_budget", f"{committed} + {cost} tokens > {budget}"
            calls = self.calls + self.pending
            if not reason and self.call_budget is not None and calls >= self.call_budget:
                reason, detail = "call_budget", f"{calls} calls of {self.call_budget}"
            if reason:
                self.stopped = self.stopped or reason
                raise SpendLimit(reason, detail)
            self.reserved += cost
            self.pending += 1
        return cost

    def release(self, held: int) -> None:
        """A held call that was never answered: its tokens are free again."""
        with self._lock:
            self.reserved -= held
            self.pending -= 1

    def settle(self, held: int, prompt_tokens: int, completion_tokens: int) -> None:
        """A held call that returned: what it really spent replaces what it held."""
        with self._lock:
            self.reserved -= held
            self.pending -= 1
            self.calls += 1
            self.tokens += max(0, prompt_tokens) + max(0, completion_tokens)


def call_cost(prompt_chars: int, max_tokens: int, chars_per_token: float = 4.0) -> int:
    """What a call may spend at most, as the ledger holds it: its prompt's token estimate
    (characters / 4, as :func:`gaprag.accounting.estimate_tokens`) plus its output cap."""
    return max(1, math.ceil(prompt_chars / chars_per_token)) + max(0, max_tokens)


# -- which run a node belongs to ----------------------------------------------------------------
_lock = threading.Lock()
# by the run's id, or the identity of its object (kept alive with its ledger while listed)
_by_run: OrderedDict[int | str, tuple[object, Ledger]] = OrderedDict()
_by_thread: OrderedDict[str, Ledger] = OrderedDict()


def _keep(table: OrderedDict[Any, Any], key: Any, value: Any, size: int) -> None:
    table[key] = value
    table.move_to_end(key)
    while len(table) > size:
        table.popitem(last=False)


def ledger_for(
    run: object | None, thread: str, *, starting: bool, make: Callable[[], Ledger]
) -> Ledger:
    """The ledger of invocation ``run`` (an object that lives as long as the invocation, or
    the run's id), made with ``make`` on its first node: a new one when that node is the graph's first
    (``starting``) or the thread has none, else the thread's last run's (a resume)."""
    with _lock:
        found = _by_run.get(_run_key(run)) if run is not None else None
        if found is not None:
            _by_run.move_to_end(_run_key(run))
            return found[1]
        ledger = None if starting or not thread else _by_thread.get(thread)
        if ledger is None:
            ledger = make()
        if run is not None:
            _keep(_by_run, _run_key(run), (run, ledger), RUNS_KEPT)
        if thread:
            _keep(_by_thread, thread, ledger, THREADS_KEPT)
        return ledger


def find(run: object | None) -> Ledger | None:
    """The ledger of invocation ``run`` if one of its nodes has run."""
    with _lock:
        found = _by_run.get(_run_key(run)) if run is not None else None
    return found[1] if found is not None else None


def _run_key(run: object) -> int | str:
    return run if isinstance(run, str) else id(run)


_current: contextvars.ContextVar[Ledger | None] = contextvars.ContextVar(
    "gaprag_ledger", default=None
)


def current() -> Ledger | None:
    """The ledger of the run the calling node belongs to (None outside a run)."""
    return _current.get()


@contextmanager
def spending(ledger: Ledger) -> Iterator[Ledger]:
    """LLM calls made inside count against ``ledger``."""
    token = _current.set(ledger)
    try:
        yield ledger
    finally:
        _current.reset(token)
