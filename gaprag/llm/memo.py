"""Replies reused within one question's run.

A loop that makes no progress sends the model a prompt it has already sent: IterKey's round
retrieves the passages of an earlier round (so its answer and validation prompts repeat), a
MIGRES round adds no fact (so its query prompt repeats). At temperature 0 the reply to the same
prompt is the same, so :class:`gaprag.llm.client.LLM` answers such a call from this memo
instead of the endpoint. In the n = 50 evaluation's traces every repeated prompt (311 of them)
had got the same reply both times.

The memo is scoped to one run of one question: the node wiring (:mod:`gaprag.nodes.wiring`)
sets the key of the run's ledger (:mod:`gaprag.llm.spend`, kept by the run, never read from
the state) around every node with :func:`run_scope`; outside a run there is no key and nothing
is reused. So one method's cost never depends on what another method, or an earlier question,
asked. A reused reply is not an LLM call: it adds no calls or tokens to ``usage`` and leaves a
``reply_reused`` record in the trace.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, messages_to_dict

_run: contextvars.ContextVar[str] = contextvars.ContextVar("gaprag_run", default="")


def current_run() -> str:
    """The run key of the question being answered ('' outside a run)."""
    return _run.get()


@contextmanager
def run_scope(key: str) -> Iterator[None]:
    """Calls made inside share the memo of run ``key`` ('' reuses nothing)."""
    token = _run.set(key)
    try:
        yield
    finally:
        _run.reset(token)


def memo_key(messages: Sequence[BaseMessage], kwargs: Mapping[str, Any]) -> str:
    """What makes two calls the same: the messages and every request setting."""
    body = json.dumps([messages_to_dict(list(messages)), dict(kwargs)], sort_keys=True, default=str)
    return hashlib.sha256(body.encode()).hexdigest()


def deterministic(chat: Any) -> bool:
    """Whether the chat model samples at temperature 0 (the same prompt, the same reply)."""
    temperature = getattr(chat, "temperature", None)
    return isinstance(temperature, int | float) and float(temperature) == 0.0


class ReplyMemo:
    """Replies by run and call; keeps the ``runs`` most recent runs. Thread-safe."""

    def __init__(self, runs: int = 64) -> None:
        self.runs = runs
        self._by_run: OrderedDict[str, dict[str, AIMessage]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, run: str, key: str) -> AIMessage | None:
        with self._lock:
            replies = self._by_run.get(run)
            reply = replies.get(key) if replies else None
        return reply.model_copy(deep=True) if reply is not None else None

    def put(self, run: str, key: str, reply: AIMessage) -> None:
        with self._lock:
            replies = self._by_run.setdefault(run, {})
            self._by_run.move_to_end(run)
            replies[key] = reply.model_copy(deep=True)
            while len(self._by_run) > self.runs:
                self._by_run.popitem(last=False)
