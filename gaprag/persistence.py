"""Checkpointers for in-process use.

Graphs served by ``langgraph dev`` / LangGraph Studio are compiled without one: the server
brings its own persistence. In your own process pass any LangGraph checkpointer to
``build_graph(..., checkpointer=...)`` and a ``thread_id`` in the run config; a run that stops
(an exception, a crash, an ``interrupt()``) then resumes from its last checkpoint with
``graph.invoke(None, thread_config(...))``, and finished nodes are not run again.

- :func:`sqlite_checkpointer`: a file under ``GAPRAG_HOME`` (what ``gaprag ask --thread`` uses).
- :func:`postgres_checkpointer`: a PostgreSQL database (``pip install 'gaprag[postgres]'``).
- :func:`checkpointer_from_url`: pick one from a URL (``memory``, ``sqlite:///...``,
  ``postgresql://...``).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver

from gaprag.config import gaprag_home, private_file
from gaprag.errors import GapragError

if TYPE_CHECKING:
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.checkpoint.sqlite import SqliteSaver

SQLITE_FILE = "checkpoints.sqlite"


def sqlite_checkpointer(path: str | Path | None = None) -> SqliteSaver:
    """A SQLite checkpointer (default: ``GAPRAG_HOME/checkpoints.sqlite``), tables created.

    The file is created owner-only (0600). Every finished step is committed to it, so a
    process killed mid-run (even ``kill -9``) resumes from its last finished step with
    ``graph.invoke(None, thread_config(thread_id))``.
    """
    from langgraph.checkpoint.sqlite import SqliteSaver

    db = Path(path) if path else gaprag_home() / SQLITE_FILE
    private_file(db)  # checkpoints hold prompts and answers: owner-only (0600)
    conn = sqlite3.connect(str(db), check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    return saver


def postgres_checkpointer(conninfo: str, *, setup: bool = True) -> PostgresSaver:
    """A PostgreSQL checkpointer on one autocommit connection.

    ``conninfo`` is a libpq URL or key/value string, e.g.
    ``postgresql://user:pass@127.0.0.1:5432/gaprag``. With ``setup`` (the default) the
    checkpoint tables are created or migrated, which is idempotent. Close the connection with
    ``saver.conn.close()`` when done. Needs the ``postgres`` extra.
    """
    try:
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg import Connection
        from psycopg.rows import dict_row
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise GapragError(
            "the Postgres checkpointer is not installed",
            hint="pip install 'gaprag[postgres]'",
        ) from exc
    import psycopg

    try:
        conn: Connection[dict[str, Any]] = Connection.connect(
            conninfo, autocommit=True, prepare_threshold=0, row_factory=dict_row
        )
    except psycopg.OperationalError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise GapragError(
            f"cannot connect to PostgreSQL ({first})",
            hint="check the connection string and that the server is running",
        ) from None
    saver = PostgresSaver(conn)
    if setup:
        saver.setup()
    return saver


def checkpointer_from_url(url: str) -> BaseCheckpointSaver[Any]:
    """``memory`` | ``sqlite`` (the default file) | ``sqlite:///PATH`` | ``postgresql://...``."""
    if url in ("memory", "mem", ":memory:"):
        from langgraph.checkpoint.memory import InMemorySaver

        return InMemorySaver()
    if url == "sqlite":
        return sqlite_checkpointer()
    if url.startswith("sqlite:///"):
        return sqlite_checkpointer(url.removeprefix("sqlite:///"))
    if url.startswith(("postgres://", "postgresql://")):
        return postgres_checkpointer(url)
    raise GapragError(
        f"unknown checkpointer URL {url!r}",
        hint="use memory, sqlite, sqlite:///PATH or postgresql://USER@HOST:PORT/DB",
    )


def thread_config(thread_id: str, checkpoint_id: str | None = None) -> RunnableConfig:
    """The run config that selects a thread (and optionally a past checkpoint to fork from)."""
    configurable: dict[str, Any] = {"thread_id": thread_id}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}
