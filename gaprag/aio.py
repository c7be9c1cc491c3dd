"""One implementation for both call styles: write a step once as a coroutine, run it either way.

Every graph node and every model call in gaprag is written once, as ``async def``. Under
``ainvoke``/``astream`` they run natively on the event loop (the chat model's async client,
retrieval in a worker thread), so many questions share one process without a thread each.
Under ``invoke``/``stream`` :func:`run_sync` drives the same coroutine to completion in the
calling thread with no event loop at all: while it runs, :func:`sync_mode` is true, and the
few places that would suspend (:meth:`gaprag.llm.LLM` calls, :func:`to_thread`) call the
blocking API instead, so the coroutine never yields and finishes on its first step.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

_sync: contextvars.ContextVar[bool] = contextvars.ContextVar("gaprag_sync_mode", default=False)


def sync_mode() -> bool:
    """True while :func:`run_sync` drives a coroutine: use blocking calls, never suspend."""
    return _sync.get()


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a gaprag coroutine to completion in this thread, without an event loop."""
    token = _sync.set(True)
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    finally:
        _sync.reset(token)
    coro.close()
    raise RuntimeError(
        "a gaprag step awaited something that suspends while running synchronously; "
        "use gaprag.aio.to_thread or the LLM layer's calls inside nodes"
    )


async def to_thread(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Call a blocking function: directly in sync mode, in a worker thread under asyncio."""
    if sync_mode():
        return fn(*args, **kwargs)
    ctx = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(
        None, functools.partial(ctx.run, fn, *args, **kwargs)
    )
