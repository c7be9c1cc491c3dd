"""Opening a store by what names it: a directory (:class:`~gaprag.stores.store.Store`) or a
``milvus://HOST:PORT/COLLECTION`` address (:class:`~gaprag.stores.milvus.MilvusStore`)."""

from __future__ import annotations

from typing import Any

from gaprag.operator import is_store_address
from gaprag.stores.milvus import MilvusStore
from gaprag.stores.store import Store


def open_store(address: str, *, embedder: Any = None) -> Store | MilvusStore:
    """The store ``address`` names; ``embedder`` replaces the one it records."""
    if is_store_address(address):
        return MilvusStore.open(address, embedder=embedder)
    return Store.open(address, embedder=embedder)
