"""Per-question capture of every LLM prompt and reply, without touching graphs.

:class:`LLMCallRecorder` is a LangChain callback handler passed in ``config={"callbacks":
[...]}``; LangGraph hands it down to every chat model call made inside the graph's nodes. (Every
retrieval is recorded once, by the retriever that ran it, into
:func:`gaprag.accounting.retrieval_log` as well as the node's meter.)
"""

from __future__ import annotations

import time
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage
from langchain_core.outputs import LLMResult


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
