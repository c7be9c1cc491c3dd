"""A gaprag store in a Milvus collection: ``milvus://HOST:PORT/COLLECTION``.

One collection holds a corpus: gaprag's passage ids as the primary key (``pk``), the passage as
BM25 and the embedder read it (``text``: title, ``": "``, text), its ``title``, the hash of
everything stored for it (``hash``, :func:`gaprag.stores.store.content_hash`), its metadata as
JSON (``meta``), its ``dense`` vector (gaprag's embedder, cosine) and the ``sparse`` vector the
server's BM25 function makes from ``text`` with its analyzer. What gaprag needs to reopen it
(embedder, dimension, analyzer, the metadata keys its passages have carried) is kept in the
collection's property :data:`RECORD`; a collection without it was made by something else and
is refused.

Writing and hybrid search go through ``langchain-milvus`` (``Milvus.add_embeddings``,
``upsert``, ``similarity_search_with_score`` with an RRF reranker); BM25 alone and dense alone
search one field with pymilvus's ``MilvusClient.search``, which the integration has no mode
for. Every expression sent to the server is built here (:func:`milvus_filter`, :func:`ids_filter`):
metadata keys, string values and ids are quoted as JSON string literals, so none can change an
expression.

An update follows gaprag's own change detection: the stored ``hash`` of each id decides what is
added, updated (``upsert``), left alone or removed (``delete`` by id). Unlike a local store,
which swaps whole versions, the server applies it batch by batch while others read: a reader
sees each passage either before or after its change, and may see some changed and others not
until the update ends. Writers are not serialised by gaprag: run one ``gaprag index`` at a time
per collection.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from langchain_core.documents import Document as LCDocument
from langchain_core.embeddings import Embeddings
from langchain_core.indexing import IndexingResult

from gaprag.accounting import record_retrieval
from gaprag.config import flag, quiet
from gaprag.errors import DependencyError, GapragError, StoreError
from gaprag.operator import StoreAddress, store_address
from gaprag.state.base import Evidence
from gaprag.stores.documents import Document, as_document, passage_text
from gaprag.stores.embeddings import (
    Embedder,
    Vectors,
    as_embedder,
    default_embedder,
    embedder_from_spec,
    embedding_bar,
    spec_of,
)
from gaprag.stores.store import (
    CLEANUPS,
    Cleanup,
    RetrievalMode,
    _evidence,
    checked_mode,
    content_hash,
    source_of,
)

#: the collection property holding gaprag's record of the store
RECORD = "gaprag.store"
FORMAT = 1
PK, TEXT, TITLE, HASH, META, DENSE, SPARSE = (
    "pk",
    "text",
    "title",
    "hash",
    "meta",
    "dense",
    "sparse",
)
OUTPUT = [PK, TEXT, TITLE, META]
#: passages written, read or deleted per request
BATCH = 500
#: the RRF constant of hybrid search (as :func:`gaprag.stores.hybrid.rrf`) and its depth
RRF_K = 60
HYBRID_DEPTH = 20
#: metadata keys kept in the record (a corpus with more is refused)
MAX_KEYS = 1000
MILVUS_EXTRA = 'pip install "gaprag[milvus]"'
#: languages of Milvus's ``stemmer`` filter (its Snowball stemmers)
STEMMERS = frozenset(
    ("arabic", "danish", "dutch", "english", "finnish", "french", "german", "greek", "hungarian",
     "italian", "norwegian", "portuguese", "romanian", "russian", "spanish", "swedish", "tamil",
     "turkish")
)  # fmt: skip


def analyzer_for(language: str) -> dict[str, Any]:
    """The Milvus analyzer closest to bm25s's tokenisation for ``language``: ``english`` is
    Milvus's English analyzer (lower case, stop words, Porter-style stemmer); ``none`` its
    standard analyzer (lower case, no stop words, no stemming); another Snowball language the
    standard tokenizer with lower case and that language's stemmer."""
    lang = language.lower()
    if lang == "english":
        return {"type": "english"}
    if lang == "none":
        return {"type": "standard"}
    if lang in STEMMERS:
        return {
            "tokenizer": "standard",
            "filter": ["lowercase", {"type": "stemmer", "language": lang}],
        }
    raise StoreError(
        f"no Milvus analyzer for the BM25 language {language!r}",
        hint=f"use none or one of {', '.join(sorted(STEMMERS))}",
    )


# -- expressions --------------------------------------------------------------------------
def quoted(value: str) -> str:
    """``value`` as a Milvus string literal: JSON's double-quoted form, whose escapes
    (``\\"``, ``\\\\``, ``\\n``, ``\\uXXXX``) Milvus's expression grammar reads the same way."""
    return json.dumps(value, ensure_ascii=False)


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise StoreError(
                f"filter value {value!r} is not a finite number", hint="fix the filter"
            )
        return repr(value)
    if isinstance(value, str):
        return quoted(value)
    raise StoreError(f"filter value {value!r} is not a string, number or boolean", hint="fix it")


def milvus_filter(where: Mapping[str, Any], exclude: Collection[str] = ()) -> str:
    """A gaprag metadata filter (and ids to leave out) as a Milvus filter expression: each key
    a JSON path into ``meta`` equal to (one of) its value(s), all keys together, and ``pk not
    in [...]``; ``""`` for no condition."""
    clauses = []
    for key, wanted in where.items():
        path = f"{META}[{quoted(str(key))}]"
        options = wanted if isinstance(wanted, list) else [wanted]
        clauses.append("(" + " or ".join(f"{path} == {_literal(v)}" for v in options) + ")")
    if exclude:
        clauses.append(f"{PK} not in [{', '.join(quoted(i) for i in exclude)}]")
    return " and ".join(clauses)


def ids_filter(ids: Iterable[str]) -> str:
    return f"{PK} in [{', '.join(quoted(i) for i in ids)}]"


def sources_filter(sources: Iterable[str]) -> str:
    return " or ".join(f'{META}["source"] == {quoted(s)}' for s in sources)


# -- the embedder as LangChain sees it ----------------------------------------------------
class StoreEmbeddings(Embeddings):
    """gaprag's embedder as LangChain ``Embeddings`` for the integration: the texts a write
    already embedded (``known``) are looked up, any other is embedded."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self.known: dict[str, list[float]] = {}

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        missing = [t for t in dict.fromkeys(texts) if t not in self.known]
        if missing:
            vectors = self.embedder.embed(missing)
            self.known.update(zip(missing, vectors.tolist(), strict=True))
        return [self.known[t] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return [float(x) for x in self.embedder.embed([text])[0]]


#: gRPC keepalive for gaprag's connections: no pings on an idle connection, and one a minute
#: during a call. pymilvus's own (a ping every 10 s, idle or not) breaks a server that keeps
#: gRPC's default ping policy, as Milvus Lite's does: pings closer than 5 minutes apart with no
#: data between them count as strikes, and the third closes the connection ("too_many_pings").
KEEPALIVE: dict[str, int] = {
    "grpc.keepalive_time_ms": 60_000,
    "grpc.keepalive_permit_without_calls": 0,
}


def connection(address: StoreAddress) -> dict[str, Any]:
    """How pymilvus reaches the server: ``http://HOST:PORT`` (``https`` with
    ``GAPRAG_MILVUS_SECURE=1``, as a managed service asks), the token in
    ``GAPRAG_MILVUS_TOKEN`` (``user:password`` or an API key), if any, and :data:`KEEPALIVE`."""
    uri = (
        address.uri.replace("http://", "https://", 1)
        if flag("GAPRAG_MILVUS_SECURE")
        else address.uri
    )
    return {
        "uri": uri,
        "token": os.environ.get("GAPRAG_MILVUS_TOKEN") or "",
        "grpc_options": dict(KEEPALIVE),
    }


def _client(address: StoreAddress) -> Any:
    """A connected ``MilvusClient``; a StoreError naming the server when it cannot be reached."""
    try:
        from pymilvus import MilvusClient
    except ImportError:
        raise DependencyError(
            "a milvus:// store needs pymilvus and langchain-milvus", hint=MILVUS_EXTRA
        ) from None
    _hush_libraries()
    try:
        with _quiet():
            return MilvusClient(**connection(address), timeout=10)
    except Exception as exc:
        raise StoreError(
            f"cannot reach the Milvus server at milvus://{address.host}:{address.port} "
            f"({type(exc).__name__}: {_first_line(exc)})",
            hint="start it or check HOST:PORT (a token: GAPRAG_MILVUS_TOKEN)",
        ) from None


_calls = threading.local()
_hushed: set[int] = set()


def _outside_gaprag(record: logging.LogRecord) -> bool:
    """Whether pymilvus's or the integration's log record is shown: not while gaprag is calling
    them (gaprag's own one-line error says what failed), and never pymilvus's warning that a
    server gave a query iterator no session timestamp (Milvus Lite gives none)."""
    return not getattr(_calls, "depth", 0) and "mvccTs" not in record.getMessage()


def _hush_libraries() -> None:
    """Put :func:`_outside_gaprag` on pymilvus's own log handlers and the integration's logger."""
    handlers = [h for name in ("pymilvus", "pymilvus.milvus_client")
                for h in logging.getLogger(name).handlers]  # fmt: skip
    for target in [*handlers, logging.getLogger("langchain_milvus.vectorstores.milvus")]:
        if id(target) not in _hushed:
            _hushed.add(id(target))
            target.addFilter(_outside_gaprag)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """gaprag is calling the server: the libraries' log records wait for gaprag's error."""
    _calls.depth = getattr(_calls, "depth", 0) + 1
    try:
        yield
    finally:
        _calls.depth -= 1


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "message", "") or exc)
    return text.strip().splitlines()[0][:200] if text.strip() else type(exc).__name__


def _server_error(address: StoreAddress, what: str, exc: BaseException) -> StoreError:
    return StoreError(
        f"the Milvus server at {address} refused to {what}: {_first_line(exc)}",
        hint="check the server and its log; an interrupted `gaprag index` can be run again "
        "(what it wrote is then unchanged and skipped)",
    )


@dataclass
class Change:
    """What an update does to a collection: passages to write, ids to delete, the counts and
    the sources touched."""

    write: list[Document]
    drop: list[str]
    result: IndexingResult
    touched: set[str] = field(default_factory=set)


def plan_changes(
    old: Mapping[str, tuple[str, str | None]],
    new: Sequence[Document],
    cleanup: Cleanup,
    sources: Collection[str] | None,
    keep: Collection[str],
) -> Change:
    """:func:`gaprag.stores.store.plan_update` over stored ``(hash, source)`` by id: the
    passages of ``new`` that are new or whose hash differs are written, the old ones the
    clean-up removes are deleted (never those of the sources in ``keep``)."""
    if cleanup not in CLEANUPS:
        raise StoreError(f"unknown clean-up {cleanup!r}", hint=f"use one of {', '.join(CLEANUPS)}")
    incoming = {d["id"]: d for d in new}
    seen = set(sources) if sources is not None else {source_of(d) for d in new}
    seen.discard(None)
    kept = set(keep)
    drop = [
        i for i, (_, src) in old.items()
        if cleanup != "none" and i not in incoming and src not in kept
        and (cleanup == "full" or src in seen)
    ]  # fmt: skip
    change = Change([], drop, IndexingResult(num_added=0, num_updated=0,
                                             num_deleted=len(drop), num_skipped=0))  # fmt: skip
    change.touched.update(str(old[i][1]) for i in drop)
    for doc in new:
        before = old.get(doc["id"])
        if before is None:
            change.result["num_added"] += 1
        elif before[0] == content_hash(doc):
            change.result["num_skipped"] += 1
            continue
        else:
            change.result["num_updated"] += 1
            change.touched.add(str(before[1]))
        change.touched.add(str(source_of(doc)))
        change.write.append(doc)
    return change


@dataclass
class MilvusStore:
    """A gaprag store in a Milvus collection. Open with :meth:`open`; create or update with
    :meth:`index`. Searches as :class:`gaprag.stores.Store` does (the Retriever protocol)."""

    records_retrievals = True
    takes_filter = True

    address: StoreAddress
    client: Any
    record: dict[str, Any]
    _embedder: Embedder | None = None
    _vs: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    #: what the update that made this object did (``index``, ``delete``)
    update: IndexingResult | None = None
    #: the sources whose passages that update added, updated or removed
    touched: frozenset[str] = frozenset()
    timings: dict[str, float] = field(default_factory=dict)

    # -- opening ------------------------------------------------------------------------
    @classmethod
    def open(cls, address: str | StoreAddress, *, embedder: Embedder | Any = None) -> MilvusStore:
        """The store at ``address``; a StoreError when the server cannot be reached, has no
        such collection, or the collection was not made by gaprag."""
        where = address if isinstance(address, StoreAddress) else store_address(address)
        client = _client(where)
        record = cls._record(client, where)
        if record is None:
            raise StoreError(
                f"no gaprag store at {where}",
                hint=f"build one with: gaprag index CORPUS --store {where}",
            )
        return cls(where, client, record, as_embedder(embedder) if embedder is not None else None)

    @staticmethod
    def _record(client: Any, address: StoreAddress) -> dict[str, Any] | None:
        """The collection's gaprag record; None when there is no such collection."""
        try:
            with _quiet():
                if not client.has_collection(address.collection):
                    return None
                described = client.describe_collection(address.collection)
        except Exception as exc:
            raise StoreError(
                f"cannot reach the Milvus server at milvus://{address.host}:{address.port} "
                f"({type(exc).__name__}: {_first_line(exc)})",
                hint="start it or check HOST:PORT (a token: GAPRAG_MILVUS_TOKEN)",
            ) from None
        raw = (described.get("properties") or {}).get(RECORD)
        names = {f.get("name") for f in described.get("fields", [])}
        try:
            record = json.loads(raw) if raw else None
        except ValueError:
            record = None
        if not isinstance(record, dict) or not {PK, TEXT, TITLE, HASH, META, DENSE} <= names:
            raise StoreError(
                f"the collection at {address} was not made by gaprag (no {RECORD} record or "
                "other fields)",
                hint="name a new collection for gaprag, or search this one through its own "
                "LangChain retriever (build_graph(retriever=...))",
            )
        if record.get("format") != FORMAT:
            raise StoreError(
                f"the collection at {address} has gaprag format {record.get('format')}; this "
                f"gaprag reads format {FORMAT}",
                hint="index it again into a new collection",
            )
        return record

    # -- access ---------------------------------------------------------------------------
    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = embedder_from_spec(
                self.record.get("embedder_spec"), self.record["embedder"]
            )
        return self._embedder

    @property
    def collection(self) -> str:
        return self.address.collection

    def vectorstore(self) -> Any:
        """The collection as a ``langchain_milvus.Milvus`` vector store (dense + BM25)."""
        with self._lock:
            if self._vs is None:
                self._vs = _vectorstore(self.address, self.embedder, self.record["analyzer"])
            return self._vs

    def __len__(self) -> int:
        return self._count("")

    def _count(self, expr: str) -> int:
        try:
            with _quiet():
                rows = self.client.query(self.collection, filter=expr, output_fields=["count(*)"])
        except Exception as exc:
            raise _server_error(self.address, "count passages", exc) from None
        return int(rows[0]["count(*)"]) if rows else 0

    def metadata_keys(self) -> frozenset[str]:
        """Every metadata key a passage written to this collection carried."""
        return frozenset(self.record.get("keys", []))

    def count_matching(self, where: Mapping[str, Any]) -> int:
        """How many passages a metadata filter keeps."""
        return self._count(milvus_filter(where))

    def get(self, doc_id: str) -> Document | None:
        found = self._rows(ids_filter([doc_id]), OUTPUT)
        return _document(found[0]) if found else None

    def _rows(self, expr: str, fields: list[str]) -> list[dict[str, Any]]:
        try:
            with _quiet():
                return list(self.client.query(self.collection, filter=expr, output_fields=fields))
        except Exception as exc:
            raise _server_error(self.address, "read passages", exc) from None

    def source_counts(self, sources: Iterable[str]) -> dict[str, int]:
        """How many passages each of ``sources`` has in the collection."""
        return {s: self._count(sources_filter([s])) for s in sources}

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()

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
        """Top-``k`` passages for ``query``: ``bm25`` the server's BM25 function, ``dense``
        the ``dense`` field, ``hybrid`` (default) both fused by RRF on the server; ``exclude``
        and ``filter`` are conditions of the search itself."""
        asked = mode
        mode = checked_mode(mode)
        expr = milvus_filter(dict(filter or {}), exclude)
        out: list[Evidence] = []
        if query.strip() and k > 0:
            try:
                with _quiet():
                    hits = (
                        self._hybrid(query, k, expr)
                        if mode == "hybrid"
                        else self._one(query, k, expr, mode)
                    )
            except StoreError:
                raise
            except Exception as exc:
                raise _server_error(self.address, f"run a {mode} search", exc) from None
            out = [_evidence(doc, score, mode) for doc, score in hits[:k]]
        record_retrieval(query, [h["id"] for h in out], mode=asked)
        return out

    def _one(self, query: str, k: int, expr: str, mode: str) -> list[tuple[Document, float]]:
        """BM25 alone (the query text to the BM25 function's field) or dense alone."""
        if mode == "bm25":
            data: Any = query
            field_name, params = SPARSE, {"metric_type": "BM25", "params": {}}
        else:
            data = [float(x) for x in self.embedder.embed([query])[0]]
            field_name, params = DENSE, {"metric_type": "COSINE", "params": {}}
        found = self.client.search(
            self.collection, data=[data], anns_field=field_name, search_params=params,
            limit=k, filter=expr, output_fields=OUTPUT,
        )  # fmt: skip
        return [(_document(hit["entity"]), float(hit["distance"])) for hit in found[0]]

    def _hybrid(self, query: str, k: int, expr: str) -> list[tuple[Document, float]]:
        """Both fields searched ``max(k, 20)`` deep and fused by RRF (k=60) on the server,
        through the integration's ``similarity_search_with_score``."""
        from pymilvus import Function, FunctionType

        ranker = Function(
            name="rrf", input_field_names=[], function_type=FunctionType.RERANK,
            params={"reranker": "rrf", "k": RRF_K},
        )  # fmt: skip
        found = self.vectorstore().similarity_search_with_score(
            query, k=k, expr=expr or None, fetch_k=max(k, HYBRID_DEPTH), reranker=ranker
        )
        return [(_from_langchain(doc), float(score)) for doc, score in found]

    def similarity(self, query: str, doc_ids: Sequence[str]) -> np.ndarray[Any, Any]:
        """Cosine similarity of ``query`` to each passage (embedded on the fly)."""
        texts = [passage_text(d) for i in doc_ids if (d := self.get(i)) is not None]
        vecs = self.embedder.embed([query, *texts])
        return np.asarray(vecs[1:] @ vecs[0])

    # -- building and updating -----------------------------------------------------------
    @classmethod
    def index(
        cls,
        address: str | StoreAddress,
        docs: Sequence[Document | LCDocument],
        *,
        cleanup: Cleanup = "incremental",
        sources: Collection[str] | None = None,
        keep: Collection[str] = (),
        roots: Mapping[str, str] | None = None,
        embedder: Embedder | Any = None,
        language: str | None = None,
        analyzer: Mapping[str, Any] | None = None,
        vectors: Mapping[str, Vectors] | None = None,
        progress: bool = True,
        batch_size: int = 64,
    ) -> MilvusStore:
        """Index ``docs`` into the collection at ``address``: create it when there is none
        (BM25 analyzer from ``language``, default english: :func:`analyzer_for`; or Milvus's
        own ``analyzer`` parameters, e.g. ``{"tokenizer": "standard", "filter": ["lowercase",
        {"type": "stemmer", "language": "english"}]}``), else update
        it as :meth:`gaprag.stores.Store.index` does (``cleanup``, ``sources``, ``keep``).
        ``roots`` (source -> the folder it was read from) is kept in the record, as a local
        store keeps it. ``vectors`` (id -> vector): passages whose vectors are known are not
        embedded again.
        The counts are in the returned store's ``update``, the sources changed in ``touched``."""
        passages = [as_document(d) for d in docs]
        ids = [d["id"] for d in passages]
        if len(set(ids)) != len(ids):
            raise StoreError("document ids are not unique", hint="give each document its own id")
        where = address if isinstance(address, StoreAddress) else store_address(address)
        client = _client(where)
        record = cls._record(client, where)
        given = as_embedder(embedder) if embedder is not None else None
        if record is None:
            if not passages:
                raise StoreError("cannot build a store from no documents", hint="check the corpus")
            chosen = given or default_embedder()
            record = {
                "format": FORMAT, "embedder": chosen.name, "embedder_spec": spec_of(chosen),
                "bm25_language": "custom" if analyzer else (language or "english").lower(),
                "analyzer": dict(analyzer) if analyzer else analyzer_for(language or "english"),
                "keys": [],
            }  # fmt: skip
            store = cls(where, client, record, chosen)
            old: dict[str, tuple[str, str | None]] = {}
        else:
            store = cls(where, client, record, given)
            store._check_settings(given, language)
            old = store._stored(passages, cleanup, sources)
        change = plan_changes(old, passages, cleanup, sources, keep)
        if change.drop and not change.write and store._count("") <= len(change.drop):
            raise StoreError(
                "this update would leave the store empty",
                hint="nothing was changed; build a new store instead",
            )
        if roots:
            store.record["roots"] = {**store.record.get("roots", {}), **roots}
        store._apply(change, vectors or {}, progress, batch_size)
        return store

    def _check_settings(self, embedder: Embedder | None, language: str | None) -> None:
        clash = []
        if embedder is not None and embedder.name != self.record["embedder"]:
            clash.append(f"the embedder {self.record['embedder']}, not {embedder.name}")
        if language is not None and language.lower() != self.record.get("bm25_language"):
            clash.append(f"BM25 language {self.record.get('bm25_language')}, not {language}")
        if clash:
            raise StoreError(
                f"the store at {self.address} uses {'; '.join(clash)}",
                hint="index into a new collection to change them",
            )

    def _stored(
        self, new: Sequence[Document], cleanup: Cleanup, sources: Collection[str] | None
    ) -> dict[str, tuple[str, str | None]]:
        """(hash, source) by id of the stored passages an update compares with: the ids of
        ``new``, with clean-up those of the sources indexed, with ``full`` every passage."""
        wanted: list[str] = []
        if cleanup == "full":
            wanted = [""]
        else:
            ids = [d["id"] for d in new]
            wanted = [ids_filter(ids[i : i + BATCH]) for i in range(0, len(ids), BATCH)]
            if cleanup == "incremental":
                seen = sorted(set(sources) if sources is not None else
                              {s for d in new if (s := source_of(d)) is not None})  # fmt: skip
                wanted += [sources_filter(seen[i : i + 50]) for i in range(0, len(seen), 50)]
        out: dict[str, tuple[str, str | None]] = {}
        for expr in wanted:
            for row in self._scan(expr, [PK, HASH, META]):
                source = (row.get(META) or {}).get("source")
                out[row[PK]] = (row[HASH], None if source is None else str(source))
        return out

    def _scan(self, expr: str, fields: list[str]) -> Iterator[dict[str, Any]]:
        try:
            with _quiet():
                iterator = self.client.query_iterator(
                    self.collection, batch_size=1000, filter=expr, output_fields=fields
                )
                try:
                    while rows := iterator.next():
                        yield from rows
                finally:
                    iterator.close()
        except StoreError:
            raise
        except Exception as exc:
            raise _server_error(self.address, "read passages", exc) from None

    def _apply(
        self, change: Change, vectors: Mapping[str, Vectors], progress: bool, batch_size: int
    ) -> None:
        self.update, self.touched = change.result, frozenset(change.touched)
        if not change.write and not change.drop:
            return
        keys = set(self.record.get("keys", []))
        keys.update(k for d in change.write for k in d.get("metadata", {}))
        if len(keys) > MAX_KEYS:
            raise StoreError(
                f"the passages carry {len(keys)} metadata keys (at most {MAX_KEYS})",
                hint="keep per-passage fields under a few keys",
            )
        self.record["keys"] = sorted(keys)
        t0 = time.perf_counter()
        try:
            with _quiet():
                embed_s = self._write(change.write, vectors, progress, batch_size)
                for start in range(0, len(change.drop), BATCH):
                    self.client.delete(
                        self.collection, filter=ids_filter(change.drop[start : start + BATCH])
                    )
                self._save_record()
        except GapragError:  # gaprag's own line: the embedder's endpoint, an analyzer refused
            raise
        except Exception as exc:
            raise _server_error(self.address, "write passages", exc) from None
        self.timings = {"embed": round(embed_s, 3),
                        "milvus": round(time.perf_counter() - t0 - embed_s, 3)}  # fmt: skip

    def _save_record(self) -> None:
        self.client.alter_collection_properties(
            self.collection, properties={RECORD: json.dumps(self.record)}
        )

    def _write(
        self,
        docs: Sequence[Document],
        vectors: Mapping[str, Vectors],
        progress: bool,
        batch_size: int,
    ) -> float:
        """New and changed passages, :data:`BATCH` at a time, each batch's vectors given
        (``vectors``) or embedded just before it is written: the collection's first batch
        through ``add_embeddings`` (which creates it), later ones through ``upsert``. Only one
        batch's vectors are held at a time. The seconds spent embedding."""
        if not docs:
            return 0.0
        todo = len({passage_text(d) for d in docs if d["id"] not in vectors})
        if progress and not quiet():
            print(
                f"gaprag: writing {len(docs)} passages to {self.address} "
                f"(server-side BM25 + {todo} {self.embedder.name} vectors to embed)...",
                file=sys.stderr,
                flush=True,
            )
        embeddings = StoreEmbeddings(self.embedder)
        vs = _vectorstore(self.address, embeddings, self.record["analyzer"], self.record)
        created = self.client.has_collection(self.collection)
        embed_s = 0.0
        with embedding_bar(todo, progress) as bar:
            for start in range(0, len(docs), BATCH):
                batch = docs[start : start + BATCH]
                t0 = time.perf_counter()
                made = self._vectors(batch, vectors, embeddings, batch_size)
                embed_s += time.perf_counter() - t0
                bar.update(made)
                if not self.record.get("dim"):
                    self.record["dim"] = len(embeddings.known[passage_text(batch[0])])
                rows = [_row(d) for d in batch]
                ids = [d["id"] for d in batch]
                if not created:
                    self._create(vs, rows, ids, embeddings)
                    created = True
                else:
                    vs.upsert(ids=ids, documents=rows)
                embeddings.known.clear()
        self._vs = None
        return embed_s

    def _vectors(
        self,
        batch: Sequence[Document],
        vectors: Mapping[str, Vectors],
        embeddings: StoreEmbeddings,
        batch_size: int,
    ) -> int:
        """The vectors of ``batch`` into ``embeddings.known``: given ones kept, the others
        embedded; how many texts were embedded."""
        for d in batch:
            if (given := vectors.get(d["id"])) is not None:
                embeddings.known[passage_text(d)] = [float(x) for x in given]
        todo = list(
            dict.fromkeys(t for d in batch if (t := passage_text(d)) not in embeddings.known)
        )
        if todo:
            made = self.embedder.embed(todo, batch_size=batch_size)
            embeddings.known.update(zip(todo, made.tolist(), strict=True))
        return len(todo)

    def _create(
        self, vs: Any, rows: list[LCDocument], ids: list[str], embeddings: StoreEmbeddings
    ) -> None:
        """The collection made with its first batch, and gaprag's record on it; a collection
        that could not be completed is dropped (no half-made collection is left to refuse)."""
        texts = [r.page_content for r in rows]
        try:
            vs.add_embeddings(
                texts=texts,
                embeddings=embeddings.embed_documents(texts),
                metadatas=[r.metadata for r in rows],
                ids=ids,
            )
            self._save_record()  # the collection is gaprag's from its first batch on
        except Exception as exc:
            with contextlib.suppress(Exception):
                self.client.drop_collection(self.collection)
            text = _first_line(exc)
            if "tokenizer" in text or "analyzer" in text:
                raise StoreError(
                    f"the Milvus server at {self.address} refused the BM25 analyzer "
                    f"{json.dumps(self.record['analyzer'])}: {text}",
                    hint="Milvus Lite has only the standard analyzer: index with "
                    "--bm25-language none (a Milvus server has english and the others)",
                ) from None
            raise

    def delete(self, ids: Iterable[str], *, progress: bool = True) -> MilvusStore:
        """Remove the passages with these ids. An id the store does not have is an error, and
        nothing is removed."""
        wanted = list(dict.fromkeys(ids))
        have: set[str] = set()
        for start in range(0, len(wanted), BATCH):
            have.update(r[PK] for r in self._rows(ids_filter(wanted[start : start + BATCH]), [PK]))
        missing = [i for i in wanted if i not in have]
        if missing:
            shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
            raise StoreError(
                f"no document with id {shown} in the store at {self.address}",
                hint="nothing was deleted; ids are as in `gaprag ask --json` evidence",
            )
        if len(self) <= len(wanted):
            raise StoreError(
                "deleting these ids would leave the store empty",
                hint="build a new store instead, or drop the collection",
            )
        change = Change([], wanted, IndexingResult(num_added=0, num_updated=0,
                                                   num_deleted=len(wanted), num_skipped=0))  # fmt: skip
        self._apply(change, {}, progress, 64)
        return self


def _row(doc: Document) -> LCDocument:
    """A passage as the integration writes it: ``text`` as page content, the rest as fields."""
    metadata = json.loads(json.dumps(doc.get("metadata", {}), ensure_ascii=False, default=str))
    return LCDocument(
        page_content=passage_text(doc),
        metadata={TITLE: doc["title"], HASH: content_hash(doc), META: metadata},
    )


def _document(entity: Mapping[str, Any]) -> Document:
    """A stored row (``pk``, ``text``, ``title``, ``meta``) as gaprag's passage."""
    title = str(entity.get(TITLE) or "")
    text = str(entity.get(TEXT) or "")
    head = f"{title}: "
    doc = Document(
        id=str(entity[PK]), title=title, text=text[len(head) :] if text.startswith(head) else text
    )
    meta = entity.get(META)
    if isinstance(meta, dict) and meta:
        doc["metadata"] = meta
    return doc


def _from_langchain(doc: LCDocument) -> Document:
    return _document({**doc.metadata, TEXT: doc.page_content})


def _vectorstore(
    address: StoreAddress,
    embeddings: Embedder | Embeddings,
    analyzer: dict[str, Any],
    record: Mapping[str, Any] | None = None,
) -> Any:
    """``langchain_milvus.Milvus`` over the collection: ``pk`` ids, ``text`` with the BM25
    function's analyzer, ``title``/``hash``/``meta`` fields, ```dense`` (cosine, the server's
    AUTOINDEX) and ``sparse`` (BM25) with explicit index and search
    parameters (the integration's defaults are refused by some servers)."""
    try:
        from langchain_milvus import BM25BuiltInFunction, Milvus
        from pymilvus import DataType
    except ImportError:
        raise DependencyError(
            "a milvus:// store needs pymilvus and langchain-milvus", hint=MILVUS_EXTRA
        ) from None
    lc = embeddings if isinstance(embeddings, Embeddings) else StoreEmbeddings(embeddings)
    try:
        with _quiet():
            return Milvus(
                embedding_function=lc,
                collection_name=address.collection,
                connection_args=connection(address),
                consistency_level="Strong",
                primary_field=PK,
                text_field=TEXT,
                vector_field=[DENSE, SPARSE],
                builtin_function=BM25BuiltInFunction(
                    input_field_names=TEXT, output_field_names=SPARSE, analyzer_params=analyzer,
                    function_name="gaprag_bm25",
                ),
                index_params=[
                    {"metric_type": "COSINE", "index_type": "AUTOINDEX", "params": {}},
                    {"metric_type": "BM25", "index_type": "SPARSE_INVERTED_INDEX", "params": {}},
                ],
                search_params=[
                    {"metric_type": "COSINE", "params": {}},
                    {"metric_type": "BM25", "params": {}},
                ],
                metadata_schema={
                    TITLE: {"dtype": DataType.VARCHAR, "kwargs": {"max_length": 65_535}},
                    HASH: {"dtype": DataType.VARCHAR, "kwargs": {"max_length": 64}},
                    META: {"dtype": DataType.JSON},
                },
                auto_id=False,
            )  # fmt: skip
    except Exception as exc:
        raise _server_error(address, "open the collection", exc) from None
