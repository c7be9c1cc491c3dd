"""Build the default :class:`LLM`: the configured endpoint, or the embedded local server."""

from __future__ import annotations

import threading

from langchain_core.language_models import BaseChatModel

from gaprag import config
from gaprag.llm.client import LLM

_default: LLM | None = None
_lock = threading.Lock()


def openai_llm(
    base_url: str,
    model: str | None = None,
    *,
    structured_mode: str | None = None,
    context_window: int | None = None,
) -> LLM:
    from langchain_openai import ChatOpenAI

    chat = ChatOpenAI(
        base_url=base_url,
        model=model or "default",
        api_key=config.api_key(),  # type: ignore[arg-type]
        temperature=0.0,
        timeout=config.request_timeout(),  # GAPRAG_TIMEOUT
        # the openai client retries connection errors, 408/409/429 and 5xx with backoff,
        # honouring Retry-After (GAPRAG_MAX_RETRIES)
        max_retries=config.max_retries(),
    )
    return LLM(chat, structured_mode=structured_mode, endpoint=base_url,  # type: ignore[arg-type]
               context_window=context_window)  # fmt: skip


def default_llm() -> LLM:
    """One shared client per process: ``GAPRAG_BASE_URL`` if set, else the embedded server."""
    global _default
    with _lock:
        if _default is None:
            url = config.base_url()
            if url:
                _default = openai_llm(url, config.model_name())
            else:
                from gaprag.llm.server import ensure_local_server

                server = ensure_local_server()
                _default = openai_llm(
                    server.base_url, server.model, structured_mode=server.structured_mode,
                    context_window=config.context_window() or server.n_ctx,
                )  # fmt: skip
        return _default


def resolve_llm(llm: LLM | BaseChatModel | None) -> LLM:
    if llm is None:
        return default_llm()
    if isinstance(llm, LLM):
        return llm
    return LLM(llm)
