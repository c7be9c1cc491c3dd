"""The bundled demo corpus (HotpotQA paragraphs) and dataset corpora, built once and cached."""

from __future__ import annotations

import threading
from importlib import resources
from pathlib import Path

import numpy as np

from gaprag.config import gaprag_home
from gaprag.stores.documents import Document, corpus_hash, load_jsonl, passage_text
from gaprag.stores.embeddings import CachedEmbedder, Embedder, default_embedder
from gaprag.stores.store import Store

_cache: dict[str, Store] = {}
_lock = threading.Lock()


def demo_corpus_path() -> Path:
    return Path(str(resources.files("gaprag") / "data" / "demo" / "hotpotqa_paragraphs.jsonl"))


def store_for(
    docs: list[Document], name: str, *, progress: bool = True, embedder: Embedder | None = None
) -> Store:
    """A store for ``docs`` under ``GAPRAG_HOME/stores``, keyed by content hash and reused."""
    key = f"{name}-{corpus_hash(docs)}"
    with _lock:
        if key in _cache:
            return _cache[key]
        root = gaprag_home() / "stores" / key
        if Store.exists(root):
            store = Store.open(root)
        else:
            emb = embedder or demo_embedder(docs)
            store = Store.build(root, docs, progress=progress, embedder=emb)
        _cache[key] = store
        return store


def demo_vectors_path() -> Path:
    return Path(str(resources.files("gaprag") / "data" / "demo" / "minilm_vectors.npz"))


def demo_embedder(docs: list[Document]) -> Embedder | None:
    """MiniLM with the shipped demo-corpus vectors, when ``docs`` are (a subset of) that corpus."""
    path = demo_vectors_path()
    if not path.exists():
        return None
    data = np.load(path, allow_pickle=False)
    ids = [str(i) for i in data["ids"]]
    by_id = dict(zip(ids, data["vectors"].astype(np.float32), strict=True))
    cache = {passage_text(d): by_id[d["id"]] for d in docs if d["id"] in by_id}
    if not cache:
        return None
    return CachedEmbedder(default_embedder(), cache)


def demo_store(*, progress: bool = True) -> Store:
    return store_for(load_jsonl(demo_corpus_path()), "demo", progress=progress)
