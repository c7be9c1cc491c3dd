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

Across methods, ``gaprag eval`` under repeatable serving shares replies per question
(:class:`SharedReplies`, :func:`shared_scope`): a request identical to one already answered
for the same question in the same evaluation run (plain RAG's answer call and every gate's)
is answered from the store. Unlike the memo, such a reply counts as the call it stands for
(its tokens, and its seconds on the row), so each method's cost is what a user pays; the
trace records ``reply_shared``.
"""

from __future__ import annotations

import contextvars
import dataclasses
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future
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


@dataclasses.dataclass(frozen=True)
class Shared:
    """A reply answered once for a question and the cost of getting it: its tokens as the
    endpoint counted them and the seconds the call took."""

    reply: AIMessage
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    seconds: float


@dataclasses.dataclass
class SharedTally:
    """What one question's run took from the store: the calls reused, the seconds they would
    have taken, and each as the trace records a call."""

    reused: int = 0
    seconds_saved: float = 0.0
    calls: list[dict[str, Any]] = dataclasses.field(default_factory=list)


class SharedReplies:
    """Replies shared by every method of one evaluation run, per question; keeps the
    ``questions`` most recent questions. Single-flight: while the first of two identical
    requests is in flight, the second waits for its reply. Thread-safe.

    Only for repeatable serving (the same request, the same reply). A request whose first
    sending failed is sent again by the next caller."""

    def __init__(self, questions: int = 256) -> None:
        self.questions = questions
        self._by_question: OrderedDict[str, dict[str, Future[Shared | None]]] = OrderedDict()
        self._lock = threading.Lock()
        self.reused = 0
        self.seconds_saved = 0.0

    def claim(self, question: str, key: str) -> tuple[Future[Shared | None], bool]:
        """The future holding the reply to ``key`` and whether the caller owns it (then it
        must send the request and :meth:`Future.set_result` the :class:`Shared`, or None
        after a failure)."""
        with self._lock:
            replies = self._by_question.setdefault(question, {})
            self._by_question.move_to_end(question)
            while len(self._by_question) > self.questions:
                self._by_question.popitem(last=False)
            found = replies.get(key)
            if found is not None and not (found.done() and found.result() is None):
                return found, False
            replies[key] = Future()
            return replies[key], True

    def count(self, seconds_saved: float) -> None:
        with self._lock:
            self.reused += 1
            self.seconds_saved += seconds_saved


_shared: contextvars.ContextVar[tuple[SharedReplies, str, SharedTally] | None] = (
    contextvars.ContextVar("gaprag_shared", default=None)
)


def current_shared() -> tuple[SharedReplies, str, SharedTally] | None:
    """The run's shared store, the question's key and its tally (None: nothing shared)."""
    return _shared.get()


@contextmanager
def shared_scope(store: SharedReplies | None, question: str) -> Iterator[SharedTally]:
    """Calls made inside are answered from ``store`` when an identical request was answered
    for ``question`` (None: nothing shared); yields the tally of what was reused."""
    tally = SharedTally()
    token = _shared.set((store, question, tally) if store is not None else None)
    try:
        yield tally
    finally:
        _shared.reset(token)
