"""A retriever that counts its searches, over a store."""

from __future__ import annotations

from collections.abc import Collection

from gaprag.state.base import Evidence
from gaprag.stores import Store
from gaprag.stores.store import RetrievalMode


class CountingRetriever:
    """A store that counts how often it was searched."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.queries: list[str] = []

    def search(
        self,
        query: str,
        k: int = 5,
        *,
        mode: RetrievalMode | None = None,
        exclude: Collection[str] = (),
    ) -> list[Evidence]:
        self.queries.append(query)
        return self.store.search(query, k, mode=mode, exclude=exclude)
