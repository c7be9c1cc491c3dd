"""The shared retrieval step: run queries, tag evidence with its round, merge the results."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from gaprag.aio import to_thread
from gaprag.state.base import Evidence
from gaprag.stores.retriever import Retriever, traced_search
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
        ``dedupe``), excluding ``exclude``. The retriever records each search (the ids it returned
    are the node's ``retrieved_ids``; :func:`gaprag.accounting.record_retrieval`). Each search
    is a retriever run in the node's LangChain run tree (``on_retriever_start``/``_end``)."""
    seen: set[str] = set(exclude)
    out: list[Evidence] = []
    for query in queries:
        if not query.strip():
            continue
        hits = await to_thread(traced_search, retriever, query, k, mode=mode, exclude=exclude)
        for hit in hits:
            if dedupe and hit["id"] in seen:
                continue
            seen.add(hit["id"])
            out.append(Evidence(**{**hit, "round": round}))
    return out
