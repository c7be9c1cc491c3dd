"""Checkpointers for in-process use (served graphs get the server's own)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from gaprag.config import gaprag_home


def sqlite_checkpointer(path: str | Path | None = None) -> Any:
    """A SQLite checkpointer (default: ``GAPRAG_HOME/checkpoints.sqlite``)."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    db = Path(path) if path else gaprag_home() / "checkpoints.sqlite"
    conn = sqlite3.connect(str(db), check_same_thread=False)
    return SqliteSaver(conn)
