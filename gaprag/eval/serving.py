"""The model an evaluation runs with, and the serving settings its run record keeps: the
default model is the embedded server in its repeatable serving mode, started before anything
else so a model that cannot start fails the run at once."""

from __future__ import annotations

import inspect
import json
from typing import Any

from langchain_core.language_models import BaseChatModel

from gaprag.llm.client import LLM


def default_llm_repeatable() -> tuple[LLM, dict[str, Any]]:
    """The default LLM in its repeatable serving mode, and the serving settings to record.

    Uses ``gaprag.llm.factory.default_llm(repeatable=True)`` and ``serving_settings()`` where
    the installed gaprag has them; otherwise the plain default and a note saying so.
    """
    from gaprag import config
    from gaprag.llm import factory

    make: Any = factory.default_llm  # repeatable=True where the engine offers it
    repeatable = "repeatable" in inspect.signature(make).parameters
    llm: LLM = make(repeatable=True) if repeatable else make()
    describe = getattr(factory, "serving_settings", None)
    if describe is None:
        from gaprag.llm import server

        describe = getattr(server, "serving_settings", None)
    settings: dict[str, Any] = {}
    if callable(describe):
        try:
            wants = "repeatable" in inspect.signature(describe).parameters
            settings = dict(describe(repeatable=True) if wants and repeatable else describe())
        except Exception as exc:  # the description must never fail a run
            settings = {"error": f"{type(exc).__name__}: {exc}"}
    url = config.base_url()
    if url:
        settings.setdefault("endpoint", url)
        # the model really sent: GAPRAG_MODEL, else the one the endpoint lists
        settings["model"] = getattr(llm.chat, "model_name", None) or config.model_name()
    settings.setdefault("repeatable", repeatable)
    if not repeatable:
        settings.setdefault(
            "note", "this gaprag has no repeatable serving mode (default_llm(repeatable=True))"
        )
    settings.setdefault("temperature", getattr(llm.chat, "temperature", None))
    return llm, json.loads(json.dumps(settings, default=str))


def client_settings(chat: LLM | BaseChatModel) -> dict[str, Any]:
    inner = chat.chat if isinstance(chat, LLM) else chat
    info = {
        "client": type(inner).__name__,
        "endpoint": getattr(chat, "endpoint", None) or getattr(inner, "openai_api_base", None),
        "model": getattr(inner, "model_name", None) or getattr(inner, "model", None),
        "temperature": getattr(inner, "temperature", None),
        "seed": getattr(inner, "seed", None),
        "repeatable": "not controlled by gaprag (an endpoint or model you passed)",
    }
    return json.loads(json.dumps(info, default=str))  # type: ignore[no-any-return]


def run_model(
    llm: LLM | BaseChatModel | None,
    base_url: str | None,
    model: str | None,
    options: dict[str, dict[str, Any]],
) -> tuple[LLM | BaseChatModel | None, dict[str, Any]]:
    """The chat model of a run (None: each method's own ``base_url`` option) and its serving
    settings for the run record."""
    chat: LLM | BaseChatModel | None = llm
    if chat is None and base_url:
        from gaprag.llm.factory import openai_llm

        chat = openai_llm(base_url, model)
    if chat is None and not any(o.get("base_url") for o in options.values()):
        # The default LLM, served repeatably. Started before indexing and before any question,
        # so a default LLM that cannot start (weights not installed, no engine) fails at once.
        return default_llm_repeatable()
    if chat is None:
        return None, {"endpoints": {k: o.get("base_url") for k, o in options.items()}}
    return chat, client_settings(chat)
