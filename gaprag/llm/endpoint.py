"""The model an OpenAI-compatible endpoint serves, for a client that names none.

``GET {base_url}/models`` is asked once per endpoint (with the client's timeout, ``GAPRAG_TIMEOUT``)
and its first model is used: a server that checks the model name (vLLM) refuses any other. An
endpoint that lists no models gets the name ``"default"`` (most single-model servers accept any
name) and a logged warning saying how to name one. An endpoint that cannot be reached gets
``"default"`` without a warning (the chat call then reports the endpoint) and is asked again by
the next client.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from gaprag import config
from gaprag.errors import one_line

#: The name sent when the endpoint lists no models.
FALLBACK_MODEL = "default"

log = logging.getLogger("gaprag")
_models: dict[str, str] = {}
_lock = threading.Lock()


def endpoint_model(base_url: str, api_key: str | None = None) -> str:
    """The first model ``base_url`` lists at ``/models``, else :data:`FALLBACK_MODEL`.
    ``api_key``: the key this endpoint's client sends (None: the configured one)."""
    key = base_url.rstrip("/")
    with _lock:  # one question per endpoint, whatever the number of threads asking
        known = _models.get(key)
        if known is not None:
            return known
        model, remember = _ask(key, config.api_key() if api_key is None else api_key)
        if remember:
            _models[key] = model
        return model


def known_model(base_url: str) -> str | None:
    """The model already found for ``base_url``, without asking the endpoint."""
    with _lock:
        return _models.get(base_url.rstrip("/"))


def _ask(base_url: str, api_key: str) -> tuple[str, bool]:
    """(model, whether the answer is the endpoint's and may be remembered)."""
    import httpx

    url = f"{base_url}/models"
    try:
        reply = httpx.get(
            url,
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=config.request_timeout(),
        )
    except httpx.HTTPError:  # not reachable now: the chat call will say so, with a hint
        return FALLBACK_MODEL, False
    model = _first_model(reply)
    if model is None:
        _warn(url, f"HTTP {reply.status_code}, no model listed")
        return FALLBACK_MODEL, True
    return model, True


def _first_model(reply: Any) -> str | None:
    if reply.status_code != 200:
        return None
    try:
        data = reply.json().get("data")
    except (ValueError, AttributeError):
        return None
    if not isinstance(data, list):
        return None
    for item in data:
        name = item.get("id") if isinstance(item, dict) else None
        if isinstance(name, str) and name:
            return name
    return None


def _warn(url: str, why: str) -> None:
    log.warning(
        "gaprag: %s named no model (%s); sending the model name %r. Set GAPRAG_MODEL (or the "
        "`model` setting) to the endpoint's model name.",
        url,
        one_line(why, 200),
        FALLBACK_MODEL,
    )
