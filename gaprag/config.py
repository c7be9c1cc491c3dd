"""Environment configuration (DESIGN.md §5). Read at call time so tests can monkeypatch."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_LOCAL_MODEL = "qwen2.5-coder-1.5b"
PLACEHOLDER_API_KEY = "sk-local-placeholder"


def gaprag_home() -> Path:
    """Cache directory for stores, assembled model files and server logs."""
    home = Path(os.environ.get("GAPRAG_HOME") or Path.home() / ".cache" / "gaprag").expanduser()
    home.mkdir(parents=True, exist_ok=True)
    return home


def base_url() -> str | None:
    """The configured OpenAI-compatible endpoint, or None to start the embedded server."""
    return os.environ.get("GAPRAG_BASE_URL") or os.environ.get("OPENAI_BASE_URL") or None


def model_name() -> str | None:
    return os.environ.get("GAPRAG_MODEL") or None


def api_key() -> str:
    return os.environ.get("OPENAI_API_KEY") or PLACEHOLDER_API_KEY


def local_model() -> str:
    return os.environ.get("GAPRAG_LOCAL_MODEL") or DEFAULT_LOCAL_MODEL


def offline_env() -> None:
    """Never let a library reach for a model hub at run time."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
