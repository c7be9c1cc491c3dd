"""The bundled demo corpus (HotpotQA paragraphs) and dataset corpora, built once and cached."""

from __future__ import annotations

import threading
from importlib import resources
from pathlib import Path

from gaprag.config import gaprag_home
from gaprag.stores.documents import Document, corpus_hash, load_jsonl
from gaprag.stores.store import Store

_cache: dict[str, Store] = {}
_lock = threading.Lock()


def demo_corpus_path() -> Path:
    return Path(str(resources.files("gaprag") / "data" / "demo" / "hotpotqa_paragraphs.jsonl"))


def store_for(docs: list[Document], name: str, *, progress: bool = True) -> Store:
    """A store for ``docs`` under ``GAPRAG_HOME/stores``, keyed by content hash and reused."""
    key = f"{name}-{corpus_hash(docs)}"
    with _lock:
        if key in _cache:
            return _cache[key]
        root = gaprag_home() / "stores" / key
        store = (
            Store.open(root) if Store.exists(root) else Store.build(root, docs, progress=progress)
        )
        _cache[key] = store
        return store


def demo_store(*, progress: bool = True) -> Store:
    return store_for(load_jsonl(demo_corpus_path()), "demo", progress=progress)
