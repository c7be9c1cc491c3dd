"""Per-node usage accounting.

Nodes stay pure functions of state: the :func:`node` decorator opens a meter in a context
variable, every LLM call and retrieval made while the node runs records into it, and the
decorator adds the meter's totals (plus the node's wall time) to the node's state update as a
``usage`` delta, which the state's ``add_usage`` reducer sums over the run.
"""

from __future__ import annotations

import contextvars
import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from gaprag.state.base import Usage

P = ParamSpec("P")
R = TypeVar("R")


@dataclass
class Meter:
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retrieval_calls: int = 0
    decisions: list[dict[str, Any]] = field(default_factory=list)

    def usage(self, wall_s: float) -> Usage:
        return Usage(
            llm_calls=self.llm_calls,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            retrieval_calls=self.retrieval_calls,
            wall_s=round(wall_s, 4),
        )


_meter: contextvars.ContextVar[Meter | None] = contextvars.ContextVar("gaprag_meter", default=None)


def record_llm_call(prompt_tokens: int, completion_tokens: int) -> None:
    meter = _meter.get()
    if meter is not None:
        meter.llm_calls += 1
        meter.prompt_tokens += prompt_tokens
        meter.completion_tokens += completion_tokens


def record_retrieval(calls: int = 1) -> None:
    meter = _meter.get()
    if meter is not None:
        meter.retrieval_calls += calls


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
    """Decorate a graph node so its LLM/retrieval usage and wall time land in ``usage``."""

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        label = name or fn.__name__

        @functools.wraps(fn)
        def inner(*args: P.args, **kwargs: P.kwargs) -> R:
            start = time.perf_counter()
            with metered() as meter:
                update = fn(*args, **kwargs)
            if isinstance(update, dict):
                update.setdefault("usage", meter.usage(time.perf_counter() - start))
                if meter.decisions:
                    trace = [{"node": label, **d} for d in meter.decisions]
                    update["trace"] = [*update.get("trace", []), *trace]
            return update

        return inner

    return wrap
