"""Synchronous forms of the shared steps for methods not yet moved to the module-level node
layout (issue 17 transition); deleted when the last method has moved."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from gaprag.aio import run_sync
from gaprag.nodes.render import truncate_words
from gaprag.nodes.retrieve import retrieve as _retrieve
from gaprag.state.base import Evidence
from gaprag.stores.retriever import Retriever
from gaprag.stores.store import RetrievalMode


def format_passages(
    evidence: Sequence[Evidence], *, max_words: int = 150, numbered: bool = True
) -> str:
    """Passages as ``[1] Title: text`` lines (titles help multi-hop questions)."""
    if not evidence:
        return "(no passages)"
    lines = []
    for i, ev in enumerate(evidence, 1):
        head = f"[{i}] " if numbered else ""
        title = f"{ev['title']}: " if ev.get("title") else ""
        lines.append(f"{head}{title}{truncate_words(ev['text'], max_words)}")
    return "\n".join(lines)


def retrieve(
    retriever: Retriever,
    queries: Sequence[str],
    *,
    k: int,
    mode: RetrievalMode | None = None,
    round: int = 1,
    exclude: Collection[str] = (),
) -> list[Evidence]:
    return run_sync(_retrieve(retriever, queries, k=k, mode=mode, round=round, exclude=exclude))
