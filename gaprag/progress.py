"""Custom progress events for UIs (``stream_mode="custom"``), safe outside a graph run."""

from __future__ import annotations

from typing import Any


def emit(**event: Any) -> None:
    """Send ``event`` (e.g. ``round=2, query=..., added=3``) to custom-stream listeners."""
    try:
        from langgraph.config import get_stream_writer

        writer = get_stream_writer()
    except (RuntimeError, ImportError, KeyError):
        return  # not inside a graph run
    writer(event)
