"""Dense retrieval in Chroma: embedded (``PersistentClient``) or a server (``HttpClient``).

We embed with our own model and hand Chroma vectors, so Chroma's default embedding function
(which downloads a model) is never used.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np

from gaprag.errors import StoreError
from gaprag.stores.embeddings import Vectors

BATCH = 1000


def _settings() -> Any:
    from chromadb.config import Settings

    return Settings(anonymized_telemetry=False)


def make_client(path: Path | None = None, url: str | None = None) -> Any:
    import chromadb

    if url:
        parsed = urlparse(url if "://" in url else f"http://{url}")
        try:
            return chromadb.HttpClient(
                host=parsed.hostname or "127.0.0.1",
                port=parsed.port or 8000,
                ssl=parsed.scheme == "https",
                settings=_settings(),
            )
        except Exception as exc:
            raise StoreError(
                f"cannot reach the Chroma server at {url}: {exc}", hint="start it with `chroma run`"
            ) from None
    assert path is not None
    return chromadb.PersistentClient(path=str(path), settings=_settings())


class DenseIndex:
    def __init__(self, collection: Any) -> None:
        self.collection = collection

    @classmethod
    def create(
        cls,
        client: Any,
        name: str,
        ids: Sequence[str],
        vectors: Vectors,
        metadatas: Sequence[dict[str, Any] | None] | None = None,
    ) -> DenseIndex:
        """A new collection of ``ids`` with their vectors and (filterable) metadata."""
        with contextlib.suppress(Exception):
            client.delete_collection(name)
        col = client.create_collection(
            name, embedding_function=None, metadata={"hnsw:space": "cosine"}
        )
        index = cls(col)
        index.add(ids, vectors, metadatas)
        return index

    def edit(
        self,
        remove: Sequence[str],
        ids: Sequence[str],
        vectors: Vectors,
        metadatas: Sequence[dict[str, Any] | None] | None = None,
    ) -> None:
        """Delete ``remove``, then add ``ids`` with their vectors and metadata (an update of a
        copy)."""
        for start in range(0, len(remove), BATCH):
            self.collection.delete(ids=list(remove[start : start + BATCH]))
        self.add(ids, vectors, metadatas)

    def add(
        self,
        ids: Sequence[str],
        vectors: Vectors,
        metadatas: Sequence[dict[str, Any] | None] | None = None,
    ) -> None:
        """Add ``ids`` with their vectors and metadata, :data:`BATCH` at a time."""
        for start in range(0, len(ids), BATCH):
            batch = list(metadatas[start : start + BATCH]) if metadatas else None
            self.collection.add(
                ids=list(ids[start : start + BATCH]),
                embeddings=vectors[start : start + BATCH].tolist(),
                metadatas=batch if batch and any(batch) else None,
            )

    @classmethod
    def open(cls, client: Any, name: str) -> DenseIndex:
        try:
            return cls(client.get_collection(name, embedding_function=None))
        except Exception as exc:
            raise StoreError(
                f"Chroma collection {name!r} is missing ({exc})",
                hint="rebuild the store with `gaprag index`",
            ) from None

    def search(
        self, vector: np.ndarray[Any, Any], k: int, where: dict[str, Any] | None = None
    ) -> list[tuple[str, float]]:
        """(id, cosine similarity) pairs, best first; ``where`` filters on metadata (Chroma's
        syntax, :func:`gaprag.stores.filters.chroma_where`)."""
        count = self.collection.count()
        if count == 0 or k <= 0:
            return []
        res = self.collection.query(
            query_embeddings=[vector.tolist()],
            n_results=min(k, count),
            where=where or None,
            include=["distances"],
        )
        return [
            (i, 1.0 - float(d)) for i, d in zip(res["ids"][0], res["distances"][0], strict=True)
        ]
