"""A gaprag store: one corpus, BM25 and Chroma over the same ids, in a versioned directory.

Layout (see :mod:`gaprag.stores.versions` for the store's record, lock and reader leases)::

    STORE/gaprag-store.json  the versions gaprag wrote here
    STORE/CURRENT            name of the live version (replaced atomically)
    STORE/v-<stamp>/manifest.json, docs.jsonl, bm25/, chroma/, .readers

Every change (``Store.build``, ``add``, ``delete``, ``Store.index``) writes a complete new
version beside the live one and then swaps ``CURRENT`` with ``os.replace``, so an interrupted
run leaves the previous index usable; writers are serialised by the store's lock, and a
version an open reader holds is removed only once it is released. An update follows
``langchain_core.indexing``: each passage's source (``metadata["source"]``) and content hash
decide what is added, updated, left alone or removed, and only new or changed texts are
embedded (the others' vectors are copied from the previous version).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from langchain_core.documents import Document as LCDocument
from langchain_core.indexing import IndexingResult

from gaprag.accounting import record_retrieval
from gaprag.config import quiet
from gaprag.errors import StoreError
from gaprag.state.base import Evidence
from gaprag.stores import versions
from gaprag.stores.bm25 import BM25Index, BM25Settings, Engine
from gaprag.stores.dense import BATCH, DenseIndex, make_client
from gaprag.stores.documents import Document, as_document, corpus_hash, passage_text
from gaprag.stores.embeddings import Embedder, Vectors, default_embedder, embedder_by_name
from gaprag.stores.hybrid import rrf

RetrievalMode = Literal["bm25", "dense", "hybrid"]
MODES: tuple[RetrievalMode, ...] = ("bm25", "dense", "hybrid")
Cleanup = Literal["none", "incremental", "full"]
CLEANUPS: tuple[Cleanup, ...] = ("none", "incremental", "full")
FORMAT_VERSION = 2  # 2: bm25s tokenisation (stemming, stop words per language), bm25/settings.json


def source_of(doc: Document) -> str | None:
    """The source a passage was read from (``metadata["source"]``), if it says."""
    source = doc.get("metadata", {}).get("source")
    return None if source is None else str(source)


def content_hash(doc: Document) -> str:
    """The hash of everything stored for a passage but its id: title, text and metadata."""
    payload = json.dumps(
        [doc["title"], doc["text"], doc.get("metadata", {})],
        sort_keys=True,
        ensure_ascii=False,
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def _passages(docs: Iterable[Document | LCDocument]) -> list[Document]:
    out = [as_document(d) for d in docs]
    ids = [d["id"] for d in out]
    if len(set(ids)) != len(ids):
        raise StoreError("document ids are not unique", hint="give each document its own id")
    return out


def plan_update(
    old: Sequence[Document],
    new: Sequence[Document],
    cleanup: Cleanup = "none",
    sources: Collection[str] | None = None,
) -> tuple[list[Document], IndexingResult]:
    """The passages after indexing ``new`` into ``old``, and what changed.

    A passage with a new id is added; one whose id exists is replaced when its content hash
    differs (updated) and left alone otherwise (skipped). ``cleanup="incremental"`` also
    removes the old passages of every source in ``sources`` (default: the sources of ``new``)
    that ``new`` no longer has; ``"full"`` removes every old passage ``new`` does not have.
    """
    if cleanup not in CLEANUPS:
        raise StoreError(f"unknown clean-up {cleanup!r}", hint=f"use one of {', '.join(CLEANUPS)}")
    incoming = {d["id"]: d for d in new}
    if cleanup == "full":
        drop = {d["id"] for d in old if d["id"] not in incoming}
    elif cleanup == "incremental":
        seen = set(sources) if sources is not None else {source_of(d) for d in new}
        seen.discard(None)
        drop = {d["id"] for d in old if source_of(d) in seen and d["id"] not in incoming}
    else:
        drop = set()
    result = IndexingResult(num_added=0, num_updated=0, num_deleted=len(drop), num_skipped=0)
    merged: list[Document] = []
    known: set[str] = set()
    for doc in old:
        known.add(doc["id"])
        if doc["id"] in drop:
            continue
        fresh = incoming.get(doc["id"])
        if fresh is None:
            merged.append(doc)
        elif content_hash(fresh) == content_hash(doc):
            result["num_skipped"] += 1
            merged.append(doc)
        else:
            result["num_updated"] += 1
            merged.append(fresh)
    for doc in new:
        if doc["id"] not in known:
            result["num_added"] += 1
            merged.append(doc)
    return merged, result


def _bm25_settings(bm25: BM25Settings | None, engine: Engine | None) -> BM25Settings:
    settings = bm25 or BM25Settings()
    if engine is not None and engine != settings.engine:
        settings = BM25Settings(**{**settings.as_dict(), "engine": engine})
    return settings


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
    _lease: versions.Lease | None = None
    #: what the update that made this version did (``Store.index``, ``add``, ``delete``)
    update: IndexingResult | None = None

    # -- building and updating -----------------------------------------------------------
    @classmethod
    def build(
        cls,
        root: str | Path,
        docs: Sequence[Document | LCDocument],
        *,
        bm25_engine: Engine | None = None,
        bm25: BM25Settings | None = None,
        embedder: Embedder | None = None,
        chroma_url: str | None = None,
        progress: bool = True,
        batch_size: int = 64,
    ) -> Store:
        """A store of exactly ``docs`` (gaprag's or LangChain ``Document``s) at ``root``: a new
        store, or a new version replacing the corpus of the store there. ``root`` must be
        missing, empty or a gaprag store."""
        passages = _passages(docs)
        if not passages:
            raise StoreError("cannot build a store from no documents", hint="check the corpus")
        root = Path(root)
        versions.claim(root)
        embedder = embedder or default_embedder()
        settings = _bm25_settings(bm25, bm25_engine)
        with versions.writing(root):
            store = cls._write(
                root, passages, embedder=embedder, bm25=settings, chroma_url=chroma_url,
                progress=progress, batch_size=batch_size,
            )  # fmt: skip
            versions.prune(root, keep=store.version_dir.name)
        return store

    @classmethod
    def index(
        cls,
        root: str | Path,
        docs: Sequence[Document | LCDocument],
        *,
        cleanup: Cleanup = "incremental",
        sources: Collection[str] | None = None,
        roots: Mapping[str, str | Path] | None = None,
        bm25_engine: Engine | None = None,
        bm25: BM25Settings | None = None,
        embedder: Embedder | None = None,
        chroma_url: str | None = None,
        progress: bool = True,
        batch_size: int = 64,
    ) -> Store:
        """Index ``docs`` into the store at ``root`` (``gaprag index``): build it when there is
        none, else update it as :meth:`add` does. The result is in the returned store's
        ``update``. ``roots`` (source -> the folder it was read from) is kept in the store's
        record, so a later run can tell another file with the same relative path from the same
        file (:func:`gaprag.stores.loaders.keep_apart`)."""
        passages = _passages(docs)
        root = Path(root)
        versions.claim(root)
        with versions.writing(root):
            if not cls.exists(root):
                if not passages:
                    raise StoreError(
                        "cannot build a store from no documents", hint="check the corpus"
                    )
                store = cls._write(
                    root, passages, embedder=embedder or default_embedder(),
                    bm25=_bm25_settings(bm25, bm25_engine), chroma_url=chroma_url,
                    progress=progress, batch_size=batch_size,
                )  # fmt: skip
                store.update = IndexingResult(
                    num_added=len(passages), num_updated=0, num_deleted=0, num_skipped=0
                )
            else:
                base = cls.open(root, embedder=embedder)
                base._check_settings(bm25, bm25_engine, chroma_url, embedder)
                store = base._apply(passages, cleanup, sources, progress, batch_size)
                if store is not base:
                    base.close()
            if roots:
                live = {s for d in store.docs if (s := source_of(d)) is not None}
                versions.record_roots(root, {k: str(v) for k, v in roots.items()}, live)
            versions.prune(root, keep=store.version_dir.name)
        return store

    def add(
        self,
        docs: Sequence[Document | LCDocument],
        *,
        cleanup: Cleanup = "none",
        sources: Collection[str] | None = None,
        progress: bool = True,
        batch_size: int = 64,
    ) -> Store:
        """Add ``docs`` (gaprag's or LangChain ``Document``s) to the store and return it at its
        new version; this object keeps reading the version it opened.

        An id already in the store is replaced when its content changed; only new or changed
        texts are embedded. ``cleanup`` as in ``langchain_core.indexing.index``: ``"none"``
        removes nothing, ``"incremental"`` removes the passages of the indexed sources (default:
        the sources of ``docs``) that ``docs`` no longer has, ``"full"`` keeps only ``docs``.
        The counts are in the returned store's ``update``.
        """
        passages = _passages(docs)
        with versions.writing(self.root):
            base = self._latest()
            store = base._apply(passages, cleanup, sources, progress, batch_size)
            if base is not self and store is not base:
                base.close()
            versions.prune(self.root, keep=store.version_dir.name)
        return store

    def delete(self, ids: Iterable[str], *, progress: bool = True) -> Store:
        """Remove the passages with these ids and return the store at its new version. An id
        the store does not have is an error, and nothing is removed."""
        wanted = list(dict.fromkeys(ids))
        with versions.writing(self.root):
            base = self._latest()
            missing = [i for i in wanted if base.get(i) is None]
            if missing:
                shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
                raise StoreError(
                    f"no document with id {shown} in the store at {self.root}",
                    hint="nothing was deleted; ids are as in `gaprag ask --json` evidence",
                )
            drop = set(wanted)
            kept = [d for d in base.docs if d["id"] not in drop]
            if not kept:
                raise StoreError(
                    "deleting these ids would leave the store empty",
                    hint="build a new store instead, or delete the directory",
                )
            result = IndexingResult(
                num_added=0, num_updated=0, num_deleted=len(drop), num_skipped=0
            )
            store = base._rewrite(kept, result, progress=progress, batch_size=64)
            if base is not self:
                base.close()
            versions.prune(self.root, keep=store.version_dir.name)
        return store

    def close(self) -> None:
        """Release this store's version (clean-up may remove it once no reader holds it)."""
        with self._lock:
            self._dense = None
            self._client = None
        if self._lease is not None:
            self._lease.close()

    def _latest(self) -> Store:
        """This store if it is the live version, else the live version opened (lock held)."""
        live = (self.root / versions.CURRENT).read_text().strip()
        if live == self.version_dir.name:
            return self
        return Store.open(self.root, embedder=self._embedder)

    def _check_settings(
        self,
        bm25: BM25Settings | None,
        engine: Engine | None,
        chroma_url: str | None,
        embedder: Embedder | None,
    ) -> None:
        """Refuse an update whose explicit settings differ from the store's own."""
        have = self.manifest
        clash = []
        if engine is not None and engine != have["bm25_engine"]:
            clash.append(f"BM25 engine {have['bm25_engine']}, not {engine}")
        if bm25 is not None and bm25.as_dict() != have["bm25"]:
            clash.append("other BM25 settings")
        if chroma_url is not None and chroma_url != have["chroma"].get("url"):
            clash.append(f"Chroma at {have['chroma'].get('url') or 'the store directory'}")
        if embedder is not None and embedder.name != have["embedder"]:
            clash.append(f"the embedder {have['embedder']}, not {embedder.name}")
        if clash:
            raise StoreError(
                f"the store at {self.root} uses {'; '.join(clash)}",
                hint="index into a new directory to change them",
            )

    def _apply(
        self,
        passages: list[Document],
        cleanup: Cleanup,
        sources: Collection[str] | None,
        progress: bool,
        batch_size: int,
    ) -> Store:
        merged, result = plan_update(self.docs, passages, cleanup, sources)
        if not (result["num_added"] or result["num_updated"] or result["num_deleted"]):
            self.update = result
            return self  # nothing changed: no new version
        if not merged:
            raise StoreError(
                "this update would leave the store empty",
                hint="nothing was changed; build a new store instead",
            )
        return self._rewrite(merged, result, progress=progress, batch_size=batch_size)

    def _rewrite(
        self, docs: list[Document], result: IndexingResult, *, progress: bool, batch_size: int
    ) -> Store:
        store = self._write(
            self.root, docs, embedder=self.embedder,
            bm25=BM25Settings.from_dict(self.manifest["bm25"]),
            chroma_url=self.manifest["chroma"].get("url"), progress=progress,
            batch_size=batch_size, reuse=self, result=result,
        )  # fmt: skip
        store.update = result
        return store

    def vectors(self, doc_ids: Sequence[str]) -> dict[str, Vectors]:
        """The stored vectors of these ids (read from Chroma, never re-embedded)."""
        out: dict[str, Vectors] = {}
        collection = self.dense_index().collection
        for start in range(0, len(doc_ids), BATCH):
            got = collection.get(ids=list(doc_ids[start : start + BATCH]), include=["embeddings"])
            for i, vector in zip(got["ids"], got["embeddings"], strict=True):
                out[i] = np.asarray(vector, dtype=np.float32)
        return out

    @classmethod
    def _write(
        cls,
        root: Path,
        docs: Sequence[Document],
        *,
        embedder: Embedder,
        bm25: BM25Settings,
        chroma_url: str | None,
        progress: bool,
        batch_size: int,
        reuse: Store | None = None,
        result: IndexingResult | None = None,
    ) -> Store:
        """Write ``docs`` as a new version and make it live (the writer lock is held).

        With ``reuse``, a passage whose embedded text is unchanged there keeps its vector.
        """
        building, version = versions.new_names()
        versions.register(root, building, version)
        tmp = root / building
        tmp.mkdir()
        try:
            with (tmp / "docs.jsonl").open("w", encoding="utf-8") as fh:
                for d in docs:
                    fh.write(json.dumps(d, ensure_ascii=False) + "\n")
            (tmp / versions.READERS).touch()
            t0 = time.perf_counter()
            sparse = BM25Index.build([f"{d['title']} {d['text']}" for d in docs], bm25)
            sparse.save(tmp / "bm25")
            bm25_s = time.perf_counter() - t0
            texts = [passage_text(d) for d in docs]
            ids = [d["id"] for d in docs]
            copy = reuse is not None and not chroma_url  # an embedded collection: copied, edited
            if reuse is not None and copy:
                before = {d["id"]: content_hash(d) for d in reuse.docs}
                kept = {d["id"] for d in docs if before.get(d["id"]) == content_hash(d)}
                stale = [i for i in before if i not in kept]
                write = [n for n, i in enumerate(ids) if i not in kept]
            else:
                stale, write = [], list(range(len(docs)))
            known: dict[str, Vectors] = {}
            if reuse is not None:  # a text embedded before keeps its vector
                wanted = {texts[n] for n in write}
                same = [d["id"] for d in reuse.docs if passage_text(d) in wanted]
                stored = reuse.vectors(same)
                known = {passage_text(d): stored[d["id"]] for d in reuse.docs if d["id"] in stored}
            todo = [n for n in write if texts[n] not in known]
            if progress and not quiet():
                what = (
                    f"{len(todo)} new or changed of {len(docs)} passages"
                    if reuse is not None
                    else f"{len(docs)} passages"
                )
                print(
                    f"gaprag: indexing {what} (BM25 + {embedder.name} vectors)...",
                    file=sys.stderr,
                    flush=True,
                )
            t0 = time.perf_counter()
            fresh = dict(
                zip(
                    todo,
                    embedder.embed([texts[n] for n in todo], batch_size=batch_size,
                                   progress=progress) if todo else [],
                    strict=True,
                )
            )  # fmt: skip
            embed_s = time.perf_counter() - t0
            vectors = np.asarray(
                [fresh[n] if n in fresh else known[texts[n]] for n in write], dtype=np.float32
            )
            t0 = time.perf_counter()
            if reuse is not None and copy:
                collection = reuse.manifest["chroma"]["collection"]
                shutil.copytree(reuse.version_dir / "chroma", tmp / "chroma")
                client = make_client(tmp / "chroma")
                DenseIndex.open(client, collection).edit(stale, [ids[n] for n in write], vectors)
            else:
                collection = f"gaprag-{version.removeprefix('v-')}"
                client = (
                    make_client(None, chroma_url) if chroma_url else make_client(tmp / "chroma")
                )
                DenseIndex.create(client, collection, ids, vectors)
            chroma_s = time.perf_counter() - t0
            dim = (
                int(vectors.shape[1]) if len(write) else int(reuse.manifest["dim"] if reuse else 0)
            )
            manifest: dict[str, Any] = {
                "format": FORMAT_VERSION,
                "count": len(docs),
                "corpus_hash": corpus_hash(docs),
                "bm25_engine": bm25.engine,
                "bm25": bm25.as_dict(),
                "embedder": embedder.name,
                "dim": dim,
                "chroma": {"url": chroma_url, "collection": collection},
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "embedded": len(todo),
                "timings_s": {
                    "bm25": round(bm25_s, 3),
                    "embed": round(embed_s, 3),
                    "chroma_add": round(chroma_s, 3),
                },
            }
            if result is not None:
                manifest["update"] = dict(result)
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2))
            del client
            final = root / version
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        versions.fsync_tree(final)  # the new version is on disk before anything points at it
        versions.switch(root, final.name)  # the atomic switch
        return cls.open(root, embedder=embedder)

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
        current = root / versions.CURRENT
        for _ in range(5):  # a version removed between reading CURRENT and leasing it: again
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
            lease = versions.Lease(version_dir)
            if version_dir.is_dir():
                break
            lease.close()
        try:
            manifest = json.loads((version_dir / "manifest.json").read_text())
            with (version_dir / "docs.jsonl").open(encoding="utf-8") as fh:
                docs: list[Document] = [json.loads(line) for line in fh if line.strip()]
        except (OSError, ValueError) as exc:
            lease.close()
            raise StoreError(
                f"the store at {root} is damaged ({exc})", hint="rebuild it with `gaprag index`"
            ) from None
        if manifest.get("format") != FORMAT_VERSION:
            lease.close()
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
            _lease=lease,
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
