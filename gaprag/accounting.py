"""Per-node accounting: usage, what was retrieved and shown, and the decisions taken.

Nodes stay pure functions of state: the node wiring (:mod:`gaprag.nodes.wiring`) opens a
:class:`Meter` in a context variable around each node, and everything a node does through the
shared layers records into it: every LLM call (tokens, by part, and cache reuse), every
retrieval (one record per search, by the retriever that ran it: the call and the ids returned), every passage rendered into a prompt (its id), every
loop decision, and how each structured call was parsed. When the node returns, the meter's
totals are added to its state update (``usage``, ``retrieved_ids``, ``shown_ids``,
``decisions``, ``trace``), which the state's reducers sum over the run.
"""

from __future__ import annotations

import contextvars
import functools
import math
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from gaprag.state.base import Decision, Usage

P = ParamSpec("P")
R = TypeVar("R")


@dataclass
class Meter:
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retrieval_calls: int = 0
    cached_tokens: int = 0
    instruction_tokens: int = 0
    passage_tokens: int = 0
    retrieved: list[str] = field(default_factory=list)
    shown: list[str] = field(default_factory=list)
    loop_decisions: list[Decision] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)  # parse paths -> ``trace``

    def usage(self, wall_s: float) -> Usage:
        return Usage(
            llm_calls=self.llm_calls,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            retrieval_calls=self.retrieval_calls,
            wall_s=round(wall_s, 4),
            cached_tokens=self.cached_tokens,
            instruction_tokens=self.instruction_tokens,
            passage_tokens=self.passage_tokens,
        )

    def apply(self, update: Any, label: str, wall_s: float) -> Any:
        """Add this meter's records to a node's state update (a dict; anything else as is)."""
        if not isinstance(update, dict):
            return update
        update.setdefault("usage", self.usage(wall_s))
        if self.retrieved:
            update["retrieved_ids"] = [*update.get("retrieved_ids", []), *self.retrieved]
        if self.shown:
            update["shown_ids"] = [*update.get("shown_ids", []), *self.shown]
        if self.loop_decisions:
            update["decisions"] = [*update.get("decisions", []), *self.loop_decisions]
        if self.decisions:
            trace = [{"node": label, **d} for d in self.decisions]
            update["trace"] = [*update.get("trace", []), *trace]
        return update


_meter: contextvars.ContextVar[Meter | None] = contextvars.ContextVar("gaprag_meter", default=None)


CHARS_PER_TOKEN = 4.0
"""Characters per token of English text under the usual tokenizers."""


def estimate_tokens(
    text: str, *, chars_per_token: float = CHARS_PER_TOKEN, minimum: int = 1
) -> int:
    """The token estimate used wherever a count is not reported: characters / 4, rounded up,
    at least ``minimum`` (a call's usage counts at least one token per message)."""
    return max(minimum, math.ceil(len(text) / chars_per_token))


def record_llm_call(
    prompt_tokens: int,
    completion_tokens: int,
    *,
    cached_tokens: int = 0,
    parts: tuple[int, int, int] | None = None,
) -> None:
    """One model call. ``parts``: characters of (instructions, passages, total) in its prompt,
    used to attribute the prompt tokens proportionally."""
    meter = _meter.get()
    if meter is None:
        return
    meter.llm_calls += 1
    meter.prompt_tokens += prompt_tokens
    meter.completion_tokens += completion_tokens
    meter.cached_tokens += cached_tokens
    if parts is not None and parts[2] > 0:
        instructions, passages, total = parts
        meter.instruction_tokens += round(prompt_tokens * instructions / total)
        meter.passage_tokens += round(prompt_tokens * passages / total)


_question_retrievals: contextvars.ContextVar[list[dict[str, Any]] | None] = contextvars.ContextVar(
    "gaprag_question_retrievals", default=None
)
_retrievals_recorded: contextvars.ContextVar[int] = contextvars.ContextVar(
    "gaprag_retrievals_recorded", default=0
)


def retrievals_recorded() -> int:
    """How many searches were recorded so far in this context (an adapter around a retriever
    that may record its own searches compares it before and after, to record each once)."""
    return _retrievals_recorded.get()


def record_retrieval(query: str, ids: Iterable[str], *, mode: str | None = None) -> None:
    """One search of a retriever, recorded once, by the retriever that ran it: counted, its
    ids kept as retrieved (the node's ``retrieved_ids``), and inside :func:`retrieval_log`
    noted with its query and mode."""
    found = list(ids)
    _retrievals_recorded.set(_retrievals_recorded.get() + 1)
    meter = _meter.get()
    if meter is not None:
        meter.retrieval_calls += 1
        meter.retrieved.extend(found)
    log = _question_retrievals.get()
    if log is not None:
        log.append({"query": query, "mode": mode, "ids": found})


@contextmanager
def retrieval_log() -> Iterator[list[dict[str, Any]]]:
    """Every search made inside, as ``{query, mode, ids}`` (an evaluation's per-question log;
    context variables follow the question into the threads and tasks its nodes run in)."""
    log: list[dict[str, Any]] = []
    token = _question_retrievals.set(log)
    try:
        yield log
    finally:
        _question_retrievals.reset(token)


def record_shown(ids: Iterable[str]) -> None:
    """Passage ids rendered into a prompt (called by the one passage renderer)."""
    meter = _meter.get()
    if meter is not None:
        meter.shown.extend(i for i in ids if i)


def record_loop_decision(decision: Decision) -> None:
    meter = _meter.get()
    if meter is not None:
        meter.loop_decisions.append(decision)


def record_decision(**fields: Any) -> None:
    """Note how a structured call was decided (parser path, default used...) in the run trace."""
    meter = _meter.get()
    if meter is not None:
        meter.decisions.append(dict(fields))


@contextmanager
def metered() -> Iterator[Meter]:
    """Collect usage outside a graph node (CLI jobs, tests)."""
    meter = Meter()
    token = _meter.set(meter)
    try:
        yield meter
    finally:
        _meter.reset(token)


def node(name: str | None = None) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a synchronous step so its usage and wall time land in its state update."""

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        label = name or fn.__name__

        @functools.wraps(fn)
        def inner(*args: P.args, **kwargs: P.kwargs) -> R:
            start = time.perf_counter()
            with metered() as meter:
                update = fn(*args, **kwargs)
            return meter.apply(update, label, time.perf_counter() - start)  # type: ignore[no-any-return]

        return inner

    return wrap
