"""A gaprag store: one corpus, BM25 and Chroma over the same ids, in a versioned directory.

Layout::

    STORE/CURRENT            name of the live version (replaced atomically)
    STORE/v-<stamp>/manifest.json, docs.jsonl, bm25/, chroma/

``Store.build`` writes a complete new version beside the live one and then swaps ``CURRENT``
with ``os.replace``, so an interrupted build leaves the previous index usable.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np

from gaprag.accounting import record_retrieval
from gaprag.config import quiet
from gaprag.errors import StoreError
from gaprag.state.base import Evidence
from gaprag.stores.bm25 import BM25Index, BM25Settings, Engine
from gaprag.stores.dense import DenseIndex, make_client
from gaprag.stores.documents import Document, corpus_hash, passage_text
from gaprag.stores.embeddings import (
    Embedder,
    Vectors,
    as_embedder,
    default_embedder,
    embedder_from_spec,
    spec_of,
)
from gaprag.stores.filters import chroma_metadata, chroma_where, matches
from gaprag.stores.hybrid import rrf

RetrievalMode = Literal["bm25", "dense", "hybrid"]
MODES: tuple[RetrievalMode, ...] = ("bm25", "dense", "hybrid")
FORMAT_VERSION = 2  # 2: bm25s tokenisation (stemming, stop words per language), bm25/settings.json


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    """Flush every file of a finished version (and its folders) to disk."""
    for path in [root, *root.rglob("*")]:
        if path.is_dir():
            _fsync_dir(path)
        elif path.is_file():
            try:
                with path.open("rb+") as fh:
                    os.fsync(fh.fileno())
            except OSError:
                pass


def _evidence(doc: Document, score: float, source: str) -> Evidence:
    hit = Evidence(
        id=doc["id"],
        title=doc["title"],
        text=doc["text"],
        source=source,
        score=round(score, 6),
        round=0,
    )
    if "metadata" in doc:
        hit["metadata"] = public_metadata(doc["metadata"])
    return hit


def public_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A passage's metadata as callers see it: an absolute file path in ``source`` (a store
    indexed from absolute paths) is cut to the file's name, so no server path leaves it."""
    out = dict(metadata)
    source = out.get("source")
    if isinstance(source, str) and "://" not in source and Path(source).is_absolute():
        out["source"] = Path(source).name
    return out


@dataclass
class Store:
    """Open with :meth:`Store.open`; create with :meth:`Store.build`."""

    records_retrievals: ClassVar[bool] = True  # each search records itself (gaprag.accounting)
    takes_filter: ClassVar[bool] = True  # search(..., filter=) filters on metadata

    root: Path
    version_dir: Path
    manifest: dict[str, Any]
    docs: list[Document]
    bm25: BM25Index
    _embedder: Embedder | None = None
    _dense: DenseIndex | None = None
    _client: Any = None
    _row: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- building -------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        root: str | Path,
        docs: Sequence[Document],
        *,
        bm25_engine: Engine | None = None,
        bm25: BM25Settings | None = None,
        embedder: Embedder | Any = None,
        chroma_url: str | None = None,
        progress: bool = True,
        batch_size: int = 64,
    ) -> Store:
        if not docs:
            raise StoreError("cannot build a store from no documents", hint="check the corpus")
        ids = [d["id"] for d in docs]
        if len(set(ids)) != len(ids):
            raise StoreError("document ids are not unique", hint="give each document its own id")
        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        embedder = as_embedder(embedder) if embedder is not None else default_embedder()
        settings = bm25 or BM25Settings()
        if bm25_engine is not None and bm25_engine != settings.engine:
            settings = BM25Settings(**{**settings.as_dict(), "engine": bm25_engine})
        stamp = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
        tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=root))
        try:
            with (tmp / "docs.jsonl").open("w", encoding="utf-8") as fh:
                for d in docs:
                    fh.write(json.dumps(d, ensure_ascii=False, default=str) + "\n")
            t0 = time.perf_counter()
            sparse = BM25Index.build([f"{d['title']} {d['text']}" for d in docs], settings)
            sparse.save(tmp / "bm25")
            bm25_s = time.perf_counter() - t0
            if progress and not quiet():
                print(
                    f"gaprag: indexing {len(docs)} passages (BM25 + {embedder.name} vectors)...",
                    file=sys.stderr,
                    flush=True,
                )
            t0 = time.perf_counter()
            vectors = embedder.embed(
                [passage_text(d) for d in docs],
                batch_size=batch_size,
                progress=progress,
            )
            embed_s = time.perf_counter() - t0
            collection = f"gaprag-{stamp}"
            client = make_client(None, chroma_url) if chroma_url else make_client(tmp / "chroma")
            t0 = time.perf_counter()
            metadatas = [chroma_metadata(d.get("metadata")) for d in docs]
            DenseIndex.create(client, collection, ids, vectors, metadatas)
            chroma_s = time.perf_counter() - t0
            manifest = {
                "format": FORMAT_VERSION,
                "count": len(docs),
                "corpus_hash": corpus_hash(docs),
                "bm25_engine": settings.engine,
                "bm25": settings.as_dict(),
                "embedder": embedder.name,
                "embedder_spec": spec_of(embedder),
                "dim": int(vectors.shape[1]),
                "chroma": {"url": chroma_url, "collection": collection},
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "timings_s": {
                    "bm25": round(bm25_s, 3),
                    "embed": round(embed_s, 3),
                    "chroma_add": round(chroma_s, 3),
                },
            }
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2))
            del client
            final = root / f"v-{stamp}"
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _fsync_tree(final)  # the new version is on disk before anything points at it
        pointer = root / f".CURRENT-{uuid.uuid4().hex[:6]}"
        with pointer.open("w") as fh:
            fh.write(final.name)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(pointer, root / "CURRENT")  # the atomic switch
        _fsync_dir(root)
        cls._prune(root, keep=final.name)
        return cls.open(root, embedder=embedder)

    @staticmethod
    def _prune(root: Path, keep: str) -> None:
        for old in root.glob("v-*"):
            if old.name != keep:
                shutil.rmtree(old, ignore_errors=True)
        for tmp in root.glob(".building-*"):
            if time.time() - tmp.stat().st_mtime > 24 * 3600:  # abandoned builds
                shutil.rmtree(tmp, ignore_errors=True)

    # -- opening --------------------------------------------------------------------------
    @classmethod
    def exists(cls, root: str | Path) -> bool:
        """True when ``root`` holds a store of the current format (an older one counts as
        absent, so a cached store is rebuilt rather than failing to open)."""
        current = Path(root) / "CURRENT"
        if not current.is_file():
            return False
        try:
            manifest = json.loads(
                (Path(root) / current.read_text().strip() / "manifest.json").read_text()
            )
        except (OSError, ValueError):
            return True  # damaged: open() says so
        return bool(manifest.get("format") == FORMAT_VERSION)

    @classmethod
    def open(cls, root: str | Path, *, embedder: Embedder | Any = None) -> Store:
        """The store's live version; ``embedder`` (a gaprag Embedder or LangChain Embeddings)
        replaces the one its manifest records."""
        root = Path(root)
        current = root / "CURRENT"
        if not current.is_file():
            raise StoreError(
                f"no gaprag store at {root}",
                hint=f"build one with: gaprag index CORPUS --store {root}",
            )
        version_dir = root / current.read_text().strip()
        if not version_dir.resolve().is_relative_to(root.resolve()):
            raise StoreError(
                f"the store at {root} points outside itself (CURRENT names {version_dir})",
                hint=f"rebuild it with: gaprag index CORPUS --store {root}",
            )
        try:
            manifest = json.loads((version_dir / "manifest.json").read_text())
            with (version_dir / "docs.jsonl").open(encoding="utf-8") as fh:
                docs: list[Document] = [json.loads(line) for line in fh if line.strip()]
        except (OSError, ValueError) as exc:
            raise StoreError(
                f"the store at {root} is damaged ({exc})", hint="rebuild it with `gaprag index`"
            ) from None
        if manifest.get("format") != FORMAT_VERSION:
            raise StoreError(
                f"the store at {root} has index format {manifest.get('format')}; "
                f"this gaprag reads format {FORMAT_VERSION}",
                hint="rebuild it with `gaprag index` (the BM25 tokenisation changed)",
            )
        bm25 = BM25Index.load(version_dir / "bm25", len(docs))
        store = cls(
            root=root,
            version_dir=version_dir,
            manifest=manifest,
            docs=docs,
            bm25=bm25,
            _embedder=as_embedder(embedder) if embedder is not None else None,
        )
        store._row = {d["id"]: i for i, d in enumerate(docs)}
        return store

    # -- access ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.docs)

    def get(self, doc_id: str) -> Document | None:
        row = self._row.get(doc_id)
        return None if row is None else self.docs[row]

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = embedder_from_spec(
                self.manifest.get("embedder_spec"), self.manifest["embedder"]
            )
        return self._embedder

    def dense_index(self) -> DenseIndex:
        with self._lock:
            if self._dense is None:
                chroma = self.manifest["chroma"]
                self._client = make_client(self.version_dir / "chroma", chroma.get("url"))
                self._dense = DenseIndex.open(self._client, chroma["collection"])
            return self._dense

    def embed_query(self, query: str) -> Vectors:
        return self.embedder.embed([query])

    # -- retrieval (the Retriever protocol) ----------------------------------------------
    def search(
        self,
        query: str,
        k: int = 5,
        *,
        mode: RetrievalMode | None = None,
        exclude: Collection[str] = (),
        filter: Mapping[str, Any] | None = None,
    ) -> list[Evidence]:
        """Top-``k`` passages for ``query``; ``exclude`` drops already-seen ids; ``filter``
        keeps passages whose metadata matches (:mod:`gaprag.stores.filters`): Chroma's
        ``where`` on the dense side, BM25 fetching deeper until enough match."""
        asked = mode
        mode = mode or "hybrid"
        if mode not in MODES:
            raise StoreError(
                f"unknown retrieval mode {mode!r}", hint=f"use one of {', '.join(MODES)}"
            )
        want = k + len(exclude)
        where = dict(filter or {})
        if mode == "bm25":
            ranked = self._sparse_ranked(query, want, where)
        elif mode == "dense":
            ranked = self._dense_ranked(query, want, where)
        else:
            depth = max(want, 20)
            sparse = [i for i, _ in self._sparse_ranked(query, depth, where)]
            dense = [i for i, _ in self._dense_ranked(query, depth, where)]
            ranked = rrf([sparse, dense])
        out: list[Evidence] = []
        for doc_id, score in ranked:
            doc = self.get(doc_id)
            if doc is None or doc_id in exclude:
                continue
            out.append(_evidence(doc, score, mode))
            if len(out) >= k:
                break
        record_retrieval(query, [h["id"] for h in out], mode=asked)
        return out

    def _sparse_ranked(
        self, query: str, want: int, where: dict[str, Any]
    ) -> list[tuple[str, float]]:
        """BM25's best ``want`` (id, score) pairs among the passages ``where`` keeps: bm25s
        cannot filter, so it is asked for ever more rows until enough match or none are left."""
        depth = want if not where else max(4 * want, 50)
        while True:
            rows = self.bm25.search(query, depth)
            kept = [(r, s) for r, s in rows if not where or matches(self._meta(r), where)]
            if len(kept) >= want or len(rows) < depth or depth >= len(self.docs):
                return [(self.docs[r]["id"], s) for r, s in kept[:want]]
            depth *= 4

    def _dense_ranked(
        self, query: str, want: int, where: dict[str, Any]
    ) -> list[tuple[str, float]]:
        return self.dense_index().search(self.embed_query(query)[0], want, chroma_where(where))

    def _meta(self, row: int) -> dict[str, Any] | None:
        return self.docs[row].get("metadata")

    def similarity(self, query: str, doc_ids: Sequence[str]) -> np.ndarray[Any, Any]:
        """Cosine similarity of ``query`` to each document (embeds the documents on the fly)."""
        texts = [passage_text(d) for i in doc_ids if (d := self.get(i)) is not None]
        vecs = self.embedder.embed([query, *texts])
        return np.asarray(vecs[1:] @ vecs[0])
