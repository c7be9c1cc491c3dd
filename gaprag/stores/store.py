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
from collections.abc import Collection, Sequence
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
from gaprag.stores.embeddings import Embedder, Vectors, default_embedder, embedder_by_name
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
    return Evidence(
        id=doc["id"],
        title=doc["title"],
        text=doc["text"],
        source=source,
        score=round(score, 6),
        round=0,
    )


@dataclass
class Store:
    """Open with :meth:`Store.open`; create with :meth:`Store.build`."""

    records_retrievals: ClassVar[bool] = True  # each search records itself (gaprag.accounting)

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
        embedder: Embedder | None = None,
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
        embedder = embedder or default_embedder()
        settings = bm25 or BM25Settings()
        if bm25_engine is not None and bm25_engine != settings.engine:
            settings = BM25Settings(**{**settings.as_dict(), "engine": bm25_engine})
        stamp = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
        tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=root))
        try:
            with (tmp / "docs.jsonl").open("w", encoding="utf-8") as fh:
                for d in docs:
                    fh.write(json.dumps(d, ensure_ascii=False) + "\n")
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
            DenseIndex.create(client, collection, ids, vectors)
            chroma_s = time.perf_counter() - t0
            manifest = {
                "format": FORMAT_VERSION,
                "count": len(docs),
                "corpus_hash": corpus_hash(docs),
                "bm25_engine": settings.engine,
                "bm25": settings.as_dict(),
                "embedder": embedder.name,
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
    def open(cls, root: str | Path, *, embedder: Embedder | None = None) -> Store:
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
            _embedder=embedder,
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
            self._embedder = embedder_by_name(self.manifest["embedder"])
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
    ) -> list[Evidence]:
        """Top-``k`` passages for ``query``; ``exclude`` drops already-seen ids."""
        asked = mode
        mode = mode or "hybrid"
        if mode not in MODES:
            raise StoreError(
                f"unknown retrieval mode {mode!r}", hint=f"use one of {', '.join(MODES)}"
            )
        want = k + len(exclude)
        if mode == "bm25":
            ranked = [(self.docs[r]["id"], s) for r, s in self.bm25.search(query, want)]
        elif mode == "dense":
            ranked = self.dense_index().search(self.embed_query(query)[0], want)
        else:
            depth = max(want, 20)
            sparse = [self.docs[r]["id"] for r, _ in self.bm25.search(query, depth)]
            dense = [i for i, _ in self.dense_index().search(self.embed_query(query)[0], depth)]
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

    def similarity(self, query: str, doc_ids: Sequence[str]) -> np.ndarray[Any, Any]:
        """Cosine similarity of ``query`` to each document (embeds the documents on the fly)."""
        texts = [passage_text(d) for i in doc_ids if (d := self.get(i)) is not None]
        vecs = self.embedder.embed([query, *texts])
        return np.asarray(vecs[1:] @ vecs[0])
