"""The shared retrieval step: run queries, tag evidence with its round, record what came back."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from gaprag.accounting import record_retrieval
from gaprag.aio import to_thread
from gaprag.state.base import Evidence
from gaprag.stores.retriever import Retriever
from gaprag.stores.store import RetrievalMode


async def retrieve(
    retriever: Retriever,
    queries: Sequence[str],
    *,
    k: int,
    mode: RetrievalMode | None = None,
    round: int = 1,
    exclude: Collection[str] = (),
    dedupe: bool = True,
) -> list[Evidence]:
    """Top-``k`` passages for each query, merged in query order (each id once with
    ``dedupe``), excluding ``exclude``. Every id returned is recorded as retrieved."""
    seen: set[str] = set(exclude)
    out: list[Evidence] = []
    for query in queries:
        if not query.strip():
            continue
        hits = await to_thread(retriever.search, query, k, mode=mode, exclude=exclude)
        record_retrieval(0, [h["id"] for h in hits])
        for hit in hits:
            if dedupe and hit["id"] in seen:
                continue
            seen.add(hit["id"])
            out.append(Evidence(**{**hit, "round": round}))
    return out
