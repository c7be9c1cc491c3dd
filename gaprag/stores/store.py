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

import bisect
import contextlib
import hashlib
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from copy import deepcopy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, overload

import numpy as np
from langchain_core.documents import Document as LCDocument
from langchain_core.indexing import IndexingResult

from gaprag.accounting import record_retrieval
from gaprag.config import quiet
from gaprag.errors import StoreError
from gaprag.state.base import Evidence
from gaprag.stores import versions
from gaprag.stores.bm25 import MMAP as BM25_MMAP
from gaprag.stores.bm25 import BM25Index, BM25Settings, Engine, checked_mmap
from gaprag.stores.dense import BATCH, DenseIndex, make_client
from gaprag.stores.documents import Document, as_document, corpus_hash, passage_text
from gaprag.stores.embeddings import (
    ENCODE_CHUNK,
    Embedder,
    Vectors,
    as_embedder,
    default_embedder,
    embedder_from_spec,
    embedding_bar,
    spec_of,
)
from gaprag.stores.filters import chroma_metadata, chroma_where, matches
from gaprag.stores.hybrid import rrf

RetrievalMode = Literal["bm25", "dense", "hybrid"]
MODES: tuple[RetrievalMode, ...] = ("bm25", "dense", "hybrid")


def checked_mode(mode: str | None) -> RetrievalMode:
    """A search's retrieval mode (``hybrid`` when none is given), or a StoreError naming the
    modes there are."""
    for known in MODES:
        if (mode or "hybrid") == known:
            return known
    raise StoreError(f"unknown retrieval mode {mode!r}", hint=f"use one of {', '.join(MODES)}")


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
    keep: Collection[str] = (),
    touched: set[str] | None = None,
) -> tuple[list[Document], IndexingResult]:
    """The passages after indexing ``new`` into ``old``, and what changed.

    A passage with a new id is added; one whose id exists is replaced when its content hash
    differs (updated) and left alone otherwise (skipped). ``cleanup="incremental"`` also
    removes the old passages of every source in ``sources`` (default: the sources of ``new``)
    that ``new`` no longer has; ``"full"`` removes every old passage ``new`` does not have.
    The passages of the sources in ``keep`` (files that could not be read this time) are never
    removed, whatever the clean-up. ``touched`` collects the sources of the passages added,
    updated or removed.
    """
    if cleanup not in CLEANUPS:
        raise StoreError(f"unknown clean-up {cleanup!r}", hint=f"use one of {', '.join(CLEANUPS)}")
    incoming = {d["id"]: d for d in new}
    kept = set(keep)
    if cleanup == "none":
        drop: set[str] = set()
    else:
        seen = set(sources) if sources is not None else {source_of(d) for d in new}
        seen.discard(None)
        drop = {
            d["id"] for d in old
            if d["id"] not in incoming and source_of(d) not in kept
            and (cleanup == "full" or source_of(d) in seen)
        }  # fmt: skip
    changed = touched if touched is not None else set()
    result = IndexingResult(num_added=0, num_updated=0, num_deleted=len(drop), num_skipped=0)
    merged: list[Document] = []
    known: set[str] = set()
    for doc in old:
        known.add(doc["id"])
        fresh = incoming.get(doc["id"])
        if doc["id"] in drop:
            changed.add(str(source_of(doc)))
        elif fresh is None:
            merged.append(doc)
        elif content_hash(fresh) == content_hash(doc):
            result["num_skipped"] += 1
            merged.append(doc)
        else:
            result["num_updated"] += 1
            changed.update({str(source_of(doc)), str(source_of(fresh))})
            merged.append(fresh)
    for doc in new:
        if doc["id"] not in known:
            result["num_added"] += 1
            changed.add(str(source_of(doc)))
            merged.append(doc)
    return merged, result


def _bm25_settings(bm25: BM25Settings | None, engine: Engine | None) -> BM25Settings:
    settings = bm25 or BM25Settings()
    if engine is not None and engine != settings.engine:
        settings = BM25Settings(**{**settings.as_dict(), "engine": engine})
    return settings


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
    _keys: frozenset[str] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _lease: versions.Lease | None = None
    #: what the update that made this version did (``Store.index``, ``add``, ``delete``)
    update: IndexingResult | None = None
    #: the sources whose passages that update added, updated or removed
    touched: frozenset[str] = frozenset()

    # -- building and updating -----------------------------------------------------------
    @classmethod
    def build(
        cls,
        root: str | Path,
        docs: Sequence[Document | LCDocument],
        *,
        bm25_engine: Engine | None = None,
        bm25: BM25Settings | None = None,
        embedder: Embedder | Any = None,
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
        embedder = as_embedder(embedder) if embedder is not None else default_embedder()
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
        keep: Collection[str] = (),
        roots: Mapping[str, str | Path] | None = None,
        bm25_engine: Engine | None = None,
        bm25: BM25Settings | None = None,
        embedder: Embedder | Any = None,
        chroma_url: str | None = None,
        progress: bool = True,
        batch_size: int = 64,
    ) -> Store:
        """Index ``docs`` into the store at ``root`` (``gaprag index``): build it when there is
        none, else update it as :meth:`add` does (``keep``: sources whose passages stay, as
        there). The result is in the returned store's ``update`` and ``touched``. ``roots`` (source -> the folder it was read from) is kept in the store's
        record, so a later run can tell another file with the same relative path from the same
        file (:func:`gaprag.stores.loaders.keep_apart`)."""
        passages = _passages(docs)
        root = Path(root)
        embedder = as_embedder(embedder) if embedder is not None else None
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
                store.touched = frozenset(str(source_of(d)) for d in passages)
            else:
                base = cls.open(root, embedder=embedder)
                base._check_settings(bm25, bm25_engine, chroma_url, embedder)
                store = base._apply(passages, (cleanup, sources, keep), progress, batch_size)
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
        keep: Collection[str] = (),
        progress: bool = True,
        batch_size: int = 64,
    ) -> Store:
        """Add ``docs`` (gaprag's or LangChain ``Document``s) to the store and return it at its
        new version; this object keeps reading the version it opened.

        An id already in the store is replaced when its content changed; only new or changed
        texts are embedded. ``cleanup`` as in ``langchain_core.indexing.index``: ``"none"``
        removes nothing, ``"incremental"`` removes the passages of the indexed sources (default:
        the sources of ``docs``) that ``docs`` no longer has, ``"full"`` keeps only ``docs``;
        the passages of the sources in ``keep`` (files that could not be read this time) stay
        whatever the clean-up. The counts are in the returned store's ``update``, the sources
        changed in its ``touched``.
        """
        passages = _passages(docs)
        with versions.writing(self.root):
            base = self._latest()
            store = base._apply(passages, (cleanup, sources, keep), progress, batch_size)
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
        return Store.open(self.root, embedder=self._embedder, bm25_mmap=self.bm25.mmap)

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
        how: tuple[Cleanup, Collection[str] | None, Collection[str]],
        progress: bool,
        batch_size: int,
    ) -> Store:
        """``passages`` indexed into this version; ``how``: clean-up, sources and sources
        kept, as :func:`plan_update` takes them."""
        cleanup, sources, keep = how
        touched: set[str] = set()
        merged, result = plan_update(self.docs, passages, cleanup, sources, keep, touched)
        if not (result["num_added"] or result["num_updated"] or result["num_deleted"]):
            self.update, self.touched = result, frozenset()
            return self  # nothing changed: no new version
        if not merged:
            raise StoreError(
                "this update would leave the store empty",
                hint="nothing was changed; build a new store instead",
            )
        store = self._rewrite(merged, result, progress=progress, batch_size=batch_size)
        store.touched = frozenset(touched)
        return store

    def _rewrite(
        self, docs: list[Document], result: IndexingResult, *, progress: bool, batch_size: int
    ) -> Store:
        store = self._write(
            self.root, docs, embedder=self.embedder,
            bm25=BM25Settings.from_dict(self.manifest["bm25"]),
            chroma_url=self.manifest["chroma"].get("url"), progress=progress,
            batch_size=batch_size, reuse=self, result=result, bm25_mmap=self.bm25.mmap,
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
        bm25_mmap: bool = BM25_MMAP,
    ) -> Store:
        """Write ``docs`` as a new version, make it live (the writer lock is held) and open it
        (``bm25_mmap`` as :meth:`open` takes it).

        With ``reuse``, a passage whose embedded text is unchanged there keeps its vector.
        """
        building, version = versions.new_names()
        versions.register(root, building, version)
        tmp = root / building
        tmp.mkdir()
        try:
            exact = True  # every passage reads back from docs.jsonl as it is
            with (tmp / "docs.jsonl").open("w", encoding="utf-8") as fh:
                for d in docs:
                    line = json.dumps(d, ensure_ascii=False, default=str)
                    exact = exact and json.loads(line) == d
                    fh.write(line + "\n")
            (tmp / versions.READERS).touch()
            t0 = time.perf_counter()
            BM25Index.build((f"{d['title']} {d['text']}" for d in docs), bm25).save(tmp / "bm25")
            timings = {"bm25": round(time.perf_counter() - t0, 3)}
            dense = _DenseWrite(docs, embedder, reuse, copy=reuse is not None and not chroma_url)
            collection = dense.save(tmp, version, chroma_url, (progress, batch_size), timings)
            manifest: dict[str, Any] = {
                "format": FORMAT_VERSION,
                "count": len(docs),
                "corpus_hash": corpus_hash(docs),
                "bm25_engine": bm25.engine,
                "bm25": bm25.as_dict(),
                "embedder": embedder.name,
                "embedder_spec": spec_of(embedder),
                "dim": dense.dim(),
                "chroma": {"url": chroma_url, "collection": collection},
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "embedded": len(dense.todo),
                "timings_s": timings,
            }
            if result is not None:
                manifest["update"] = dict(result)
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2))
            final = root / version
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        versions.fsync_tree(final)  # the new version is on disk before anything points at it
        versions.switch(root, final.name)  # the atomic switch
        return cls._open(root, embedder, (final.name, docs) if exact else None, bm25_mmap=bm25_mmap)

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
    def open(
        cls, root: str | Path, *, embedder: Embedder | Any = None, bm25_mmap: bool = BM25_MMAP
    ) -> Store:
        """The store's live version; ``embedder`` (a gaprag Embedder or LangChain Embeddings)
        replaces the one its manifest records. ``bm25_mmap`` memory-maps the BM25 score arrays
        (the default) rather than reading them into memory (:meth:`BM25Index.load`)."""
        return cls._open(root, embedder, None, bm25_mmap=bm25_mmap)

    @classmethod
    def _open(
        cls,
        root: str | Path,
        embedder: Any,
        written: tuple[str, Sequence[Document]] | None,
        *,
        bm25_mmap: bool = BM25_MMAP,
    ) -> Store:
        """:meth:`open`; ``written``: the version just written and its passages, which read
        back from its docs.jsonl as they are, so they are copied (their strings shared)
        rather than read again."""
        checked_mmap(bm25_mmap)
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
            if written is not None and version_dir.name == written[0]:
                docs: list[Document] = deepcopy(list(written[1]))
            else:
                with (version_dir / "docs.jsonl").open(encoding="utf-8") as fh:
                    docs = [json.loads(line) for line in fh if line.strip()]
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
        try:
            bm25 = BM25Index.load(version_dir / "bm25", len(docs), mmap=bm25_mmap)
        except StoreError:
            lease.close()
            raise
        store = cls(
            root=root,
            version_dir=version_dir,
            manifest=manifest,
            docs=docs,
            bm25=bm25,
            _embedder=as_embedder(embedder) if embedder is not None else None,
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

    def metadata_keys(self) -> frozenset[str]:
        """Every metadata key a passage of this store carries."""
        if self._keys is None:
            self._keys = frozenset(k for d in self.docs for k in d.get("metadata", {}))
        return self._keys

    def count_matching(self, where: Mapping[str, Any]) -> int:
        """How many passages a metadata filter keeps (:func:`gaprag.stores.filters.matches`)."""
        return sum(1 for d in self.docs if matches(d.get("metadata"), where))

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
        mode = checked_mode(mode)
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
        for doc_id, score in ranked if k > 0 else ():
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


class _Metadatas(Sequence[dict[str, Any] | None]):
    """The Chroma metadata of ``docs``' passages, made as Chroma asks for each batch."""

    def __init__(self, docs: Sequence[Document], rows: Sequence[int] | None = None) -> None:
        self.docs, self.rows = docs, rows

    def __len__(self) -> int:
        return len(self.docs) if self.rows is None else len(self.rows)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any] | None: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any] | None]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        row = index if self.rows is None else self.rows[index]
        return chroma_metadata(self.docs[row].get("metadata"))


class _DenseWrite:
    """The dense side of a new version: which passages get a vector written (all, or with
    ``copy`` the previous version's collection edited: only new and changed ones), which
    texts are embedded (those no passage of the previous version had), and the collection.

    Vectors go to Chroma as they are made, in order, :data:`~gaprag.stores.dense.BATCH` at a
    time with their metadata; texts are made from the passages as they are embedded,
    :data:`ENCODE_CHUNK` at a time. No list of every text, vector or metadata is held."""

    def __init__(
        self, docs: Sequence[Document], embedder: Embedder, reuse: Store | None, *, copy: bool
    ) -> None:
        self.docs, self.embedder, self.reuse, self.copy = docs, embedder, reuse, copy
        self.ids = [d["id"] for d in docs]
        self.stale: list[str] = []
        self.write: Sequence[int] = range(len(docs))
        if reuse is not None and copy:
            before = {d["id"]: content_hash(d) for d in reuse.docs}
            kept = {d["id"] for d in docs if before.get(d["id"]) == content_hash(d)}
            self.stale = [i for i in before if i not in kept]
            self.write = [n for n, i in enumerate(self.ids) if i not in kept]
        self.known: dict[str, Vectors] = {}
        if reuse is not None:  # a text embedded before keeps its vector
            wanted = {passage_text(docs[n]) for n in self.write}
            stored = reuse.vectors([d["id"] for d in reuse.docs if passage_text(d) in wanted])
            self.known = {passage_text(d): stored[d["id"]] for d in reuse.docs if d["id"] in stored}
        #: positions in ``write`` of the passages whose text is embedded
        self.todo = (
            [p for p, n in enumerate(self.write) if passage_text(docs[n]) not in self.known]
            if self.known
            else list(range(len(self.write)))
        )
        self.width = 0  # the vectors' dimension, once one is made
        self.embed_s = 0.0

    def save(
        self,
        tmp: Path,
        version: str,
        chroma_url: str | None,
        run: tuple[bool, int],
        timings: dict[str, float],
    ) -> str:
        """Embed what is to be embedded and write the vectors to Chroma (``run``: progress,
        the embedder's batch size); the collection's name."""
        t0 = time.perf_counter()
        if self.reuse is not None and self.copy:
            collection = str(self.reuse.manifest["chroma"]["collection"])
            shutil.copytree(self.reuse.version_dir / "chroma", tmp / "chroma")
            client = make_client(tmp / "chroma")
            index = DenseIndex.open(client, collection)
            index.edit(self.stale, [], np.zeros((0, 0), dtype=np.float32))
            metadatas = _Metadatas(self.docs, self.write)
        else:
            collection = f"gaprag-{version.removeprefix('v-')}"
            client = make_client(None, chroma_url) if chroma_url else make_client(tmp / "chroma")
            index = DenseIndex.create(client, collection, [], np.zeros((0, 0), dtype=np.float32))
            metadatas = _Metadatas(self.docs)
        try:
            for start, vectors in self._batches(*run):
                end = start + len(vectors)
                ids = [self.ids[n] for n in self.write[start:end]]
                index.add(ids, vectors, metadatas[start:end])
        except BaseException:
            if chroma_url:  # a server keeps no half-written collection
                with contextlib.suppress(Exception):
                    client.delete_collection(collection)
            raise
        timings["embed"] = round(self.embed_s, 3)
        timings["chroma_add"] = round(time.perf_counter() - t0 - self.embed_s, 3)
        return collection

    def _batches(self, progress: bool, batch_size: int) -> Iterator[tuple[int, Vectors]]:
        """(first position in ``write``, vectors) of the rows written, in order,
        :data:`~gaprag.stores.dense.BATCH` at a time: a kept text's vector, or its vector
        embedded with the next :data:`ENCODE_CHUNK` texts to embed, under one bar."""
        self._announce(progress)
        made: dict[int, Vectors] = {}
        rows: list[Vectors] = []
        with embedding_bar(len(self.todo), progress) as bar:
            for pos, n in enumerate(self.write):
                if (
                    self.known
                    and (vector := self.known.get(passage_text(self.docs[n]))) is not None
                ):
                    rows.append(vector)
                else:
                    if pos not in made:
                        made = self._embed(pos, batch_size)
                        bar.update(len(made))
                    rows.append(made.pop(pos))
                if len(rows) == BATCH or pos == len(self.write) - 1:
                    yield pos + 1 - len(rows), np.asarray(rows, dtype=np.float32)
                    rows = []

    def _embed(self, pos: int, batch_size: int) -> dict[int, Vectors]:
        """The vectors of the next :data:`ENCODE_CHUNK` texts to embed from ``pos`` on."""
        t0 = time.perf_counter()
        first = bisect.bisect_left(self.todo, pos)
        chunk = self.todo[first : first + ENCODE_CHUNK]
        texts = [passage_text(self.docs[self.write[p]]) for p in chunk]
        vectors = self.embedder.embed(texts, batch_size=batch_size)
        self.width = int(vectors.shape[1])
        self.embed_s += time.perf_counter() - t0
        return dict(zip(chunk, vectors, strict=True))

    def _announce(self, progress: bool) -> None:
        if progress and not quiet():
            what = (
                f"{len(self.todo)} new or changed of {len(self.docs)} passages"
                if self.reuse is not None
                else f"{len(self.docs)} passages"
            )
            print(
                f"gaprag: indexing {what} (BM25 + {self.embedder.name} vectors)...",
                file=sys.stderr,
                flush=True,
            )

    def dim(self) -> int:
        if self.width:
            return self.width
        if self.known:
            return len(next(iter(self.known.values())))
        return int(self.reuse.manifest["dim"]) if self.reuse is not None else 0
