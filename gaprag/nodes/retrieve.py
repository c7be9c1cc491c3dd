"""Shared retrieval step: run queries, tag evidence with its round, de-duplicate by id."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from gaprag.state.base import Evidence
from gaprag.stores.retriever import Retriever
from gaprag.stores.store import RetrievalMode


def retrieve(
    retriever: Retriever,
    queries: Sequence[str],
    *,
    k: int,
    mode: RetrievalMode | None = None,
    round: int = 1,
    exclude: Collection[str] = (),
) -> list[Evidence]:
    """Top-``k`` passages for each query, merged in query order, each id once."""
    seen: set[str] = set(exclude)
    out: list[Evidence] = []
    for query in queries:
        if not query.strip():
            continue
        for hit in retriever.search(query, k, mode=mode, exclude=exclude):
            if hit["id"] in seen:
                continue
            seen.add(hit["id"])
            out.append(Evidence(**{**hit, "round": round}))
    return out
