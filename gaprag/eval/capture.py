"""Per-question capture: every LLM prompt and reply, every retrieval, without touching graphs.

* :class:`LLMCallRecorder` is a LangChain callback handler passed in
  ``config={"callbacks": [...]}``; LangGraph hands it down to every chat model call made
  inside the graph's nodes.
* :class:`RecordingRetriever` wraps the store the graphs share and appends each search (query,
  mode, ids returned) to the list held by :data:`current_retrievals`, a context variable the
  runner sets per question (context variables follow the question into the worker threads
  LangGraph runs sync nodes in, so concurrent questions do not mix).
"""

from __future__ import annotations

import contextvars
import dataclasses
import time
from collections.abc import Collection
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage
from langchain_core.outputs import LLMResult

from gaprag.state.base import Evidence
from gaprag.stores.retriever import Retriever
from gaprag.stores.store import RetrievalMode, Store

current_retrievals: contextvars.ContextVar[list[dict[str, Any]] | None] = contextvars.ContextVar(
    "gaprag_eval_retrievals", default=None
)


def _content(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(c if isinstance(c, str) else str(c.get("text", "")) for c in content)


class LLMCallRecorder(BaseCallbackHandler):
    """Collects ``{"messages": [{role, content}], "reply", "prompt_tokens", ...}`` per call."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self._open: dict[UUID, dict[str, Any]] = {}

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        **kwargs: Any,
    ) -> None:
        call = {
            "messages": [
                {"role": m.type, "content": _content(m)} for m in (messages[0] if messages else [])
            ],
            "reply": None,
            "started": time.time(),
        }
        self._open[run_id] = call
        self.calls.append(call)

    def on_llm_start(
        self, serialized: dict[str, Any], prompts: list[str], *, run_id: UUID, **kwargs: Any
    ) -> None:
        call = {
            "messages": [{"role": "human", "content": p} for p in prompts[:1]],
            "reply": None,
            "started": time.time(),
        }
        self._open[run_id] = call
        self.calls.append(call)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        call = self._open.pop(run_id, None)
        if call is None:
            return
        generation = (
            response.generations[0][0] if response.generations and response.generations[0] else None
        )
        call["reply"] = generation.text if generation is not None else ""
        message = getattr(generation, "message", None)
        usage = getattr(message, "usage_metadata", None) or {}
        call["prompt_tokens"] = int(usage.get("input_tokens", 0))
        call["completion_tokens"] = int(usage.get("output_tokens", 0))
        details = usage.get("input_token_details") or {}
        call["cached_tokens"] = int(details.get("cache_read", 0) or 0)
        call["seconds"] = round(time.time() - call.pop("started"), 4)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        call = self._open.pop(run_id, None)
        if call is not None:
            call["error"] = f"{type(error).__name__}: {error}"
            call["seconds"] = round(time.time() - call.pop("started"), 4)


def _record(query: str, mode: str | None, hits: list[Evidence]) -> None:
    log = current_retrievals.get()
    if log is not None:
        log.append({"query": query, "mode": mode, "ids": [h["id"] for h in hits]})


class RecordingStore(Store):
    """A :class:`Store` that also records every search into :data:`current_retrievals`.

    A subclass (not a proxy) so graphs that use store-only features (``get``,
    ``similarity``, ``isinstance(..., Store)``) behave exactly as with the plain store.
    """

    @classmethod
    def wrap(cls, store: Store) -> RecordingStore:
        fields = {f.name: getattr(store, f.name) for f in dataclasses.fields(store)}
        return cls(**fields)

    def search(
        self,
        query: str,
        k: int = 5,
        *,
        mode: RetrievalMode | None = None,
        exclude: Collection[str] = (),
    ) -> list[Evidence]:
        hits = super().search(query, k, mode=mode, exclude=exclude)
        _record(query, mode, hits)
        return hits


class RecordingRetriever:
    """The same recording around any other gaprag :class:`Retriever`; other attributes pass through."""

    def __init__(self, inner: Retriever) -> None:
        self.inner = inner

    def search(
        self,
        query: str,
        k: int = 5,
        *,
        mode: RetrievalMode | None = None,
        exclude: Collection[str] = (),
    ) -> list[Evidence]:
        hits = self.inner.search(query, k, mode=mode, exclude=exclude)
        _record(query, mode, hits)
        return hits

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def recording(retriever: Any) -> Any:
    """Wrap a store or retriever so its searches are recorded per question."""
    from gaprag.stores.retriever import as_retriever

    if isinstance(retriever, Store):
        return RecordingStore.wrap(retriever)
    return RecordingRetriever(as_retriever(retriever))
