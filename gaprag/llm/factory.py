"""Build the default :class:`LLM`: the configured endpoint, or the embedded local server."""

from __future__ import annotations

import threading
from typing import Any

from langchain_core.language_models import BaseChatModel

from gaprag import config
from gaprag.llm.client import LLM
from gaprag.llm.turns import endpoint_turns

# one client per (repeatable, endpoint, model): settings changed in the process (a calibration of
# another model, a test's endpoint) get their own client instead of the first one made
_defaults: dict[tuple[bool, str | None, str | None], LLM] = {}
_lock = threading.Lock()


def openai_llm(
    base_url: str,
    model: str | None = None,
    *,
    structured_mode: str | None = None,
    seed: int | None = None,
    context_window: int | None = None,
    api_key: str | None = None,
    slots: int | None = None,
) -> LLM:
    """A client of the endpoint ``base_url``. ``api_key``: the key sent; None sends the
    configured one (``OPENAI_API_KEY``): only for an endpoint the operator configured.
    ``slots``: requests the endpoint serves at once, taken in turns by this process's calls
    (:mod:`gaprag.llm.turns`); None: every call is sent at once."""
    from langchain_openai import ChatOpenAI

    from gaprag.llm.endpoint import endpoint_model

    chat = ChatOpenAI(
        base_url=base_url,
        model=model or endpoint_model(base_url, api_key),  # none named: the endpoint's first
        api_key=api_key if api_key is not None else config.api_key(),  # type: ignore[arg-type]
        temperature=0.0,
        seed=seed,
        timeout=config.request_timeout(),  # GAPRAG_TIMEOUT
        # the openai client retries connection errors, 408/409/429 and 5xx with backoff,
        # honouring Retry-After (GAPRAG_MAX_RETRIES)
        max_retries=config.max_retries(),
    )
    return LLM(
        chat,
        structured_mode=structured_mode,  # type: ignore[arg-type]
        endpoint=base_url,
        context_window=context_window,
        turns=endpoint_turns(base_url, slots) if slots else None,
    )


def default_llm(*, repeatable: bool = False) -> LLM:
    """One shared client per process and setting: ``GAPRAG_BASE_URL`` if set, else the embedded
    server of ``GAPRAG_LOCAL_MODEL``. The client is kept per endpoint and model, so a change of
    either in the environment (``gaprag calibrate --model``) is honoured on the next call.

    ``repeatable=True`` asks for answers that repeat run after run: the embedded server is
    started in its repeatable mode (one slot, fixed seed, prompt cache as measured; see
    :func:`serving_settings`) and every request carries temperature 0 and the fixed seed. A
    configured endpoint gets the same request settings; how it serves is up to it.
    """
    url = config.base_url()
    model = config.model_name() if url else config.local_model()
    key = (repeatable, url, model)
    with _lock:
        llm = _defaults.get(key)
        if llm is None:
            from gaprag.llm.server import REPEATABLE_SEED

            seed = REPEATABLE_SEED if repeatable else None
            if url:
                llm = openai_llm(url, model, seed=seed, slots=config.endpoint_slots())
            else:
                from gaprag.llm.server import ensure_local_server

                server = ensure_local_server(model, repeatable=repeatable)
                llm = openai_llm(
                    server.base_url,
                    server.model,
                    structured_mode=server.structured_mode,
                    seed=seed,
                    context_window=config.context_window() or server.n_ctx,
                    slots=server.slots,
                )
            _defaults[key] = llm
        return llm


def serving_settings(*, repeatable: bool = False) -> dict[str, Any]:
    """How :func:`default_llm` (with the same ``repeatable``) serves, as a JSON-ready dict.

    For the embedded server: engine and version, model and its file's sha256, context size,
    threads, slots, seed, temperature, prompt cache, batch sizes. For a configured endpoint:
    its URL and model name and the request settings gaprag sends. Starts nothing.
    """
    from gaprag.llm.server import REPEATABLE_SEED, local_server_config, running_local_server

    url = config.base_url()
    if url:
        return {
            "endpoint": url,
            "model": config.model_name(),
            "temperature": 0.0,
            "seed": REPEATABLE_SEED if repeatable else None,
            "repeatable": repeatable,
        }
    server = running_local_server(repeatable=repeatable) or local_server_config(
        repeatable=repeatable
    )
    return server.settings()


def resolve_llm(llm: LLM | BaseChatModel | None) -> LLM:
    if llm is None:
        return default_llm()
    if isinstance(llm, LLM):
        return llm
    return LLM(llm)
