"""The (question, answer, chunk) pair store: RAG-EF's feedback database.

One SQLite file holds every pair, whatever its provenance: ``expert`` (feedback written by a
person or a strong model), ``synthetic`` (Q&A generated from corpus chunks), ``oracle`` (the test
set itself, an upper bound), and ``generated`` / ``historical`` (missing_knowledge). The source is
metadata only: it never changes a score.

Storage
    SQLite in WAL mode with ``synchronous=FULL``: an ``add`` that has returned is on disk and
    survives a crash of the process; several processes may write at once (writers queue on
    SQLite's lock, nothing is lost). Vectors are float32 blobs. A chunk is embedded once, keyed
    by the hash of its whitespace-normalised text, and shared by every pair that cites it; a
    question is embedded once, when its pair is first inserted.

Ranking (RAG-EF, Eq. 2)
    ``s_i = sim(q, q_i)^γ · sim(q, c_i)^(1-γ)``, each factor clipped at 0 first (so a negative
    cosine never gives NaN; ``0^0 = 1``). ``γ = 1`` is question-only matching, ``γ = 0``
    chunk-only. Ties break by the arithmetic mean of the factors, then newer first, then id.
    ``mode="bm25"`` uses BM25 scores from two indexes (questions, chunks) as the factors; the
    geometric form is scale-invariant, so raw BM25 scores need no normalisation.

Usage::

    store = PairStore.open("feedback.sqlite")            # created if missing
    pid = store.add("Who wrote Hamlet?", "Shakespeare", "Hamlet is a tragedy by ...")
    for pair, score in store.search("author of Hamlet", k=5):
        print(pair["question"], pair["answer"], score)
"""

from __future__ import annotations

import builtins
import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import numpy as np
import numpy.typing as npt
from typing_extensions import TypedDict  # pydantic needs it for JSON schemas on 3.11

from gaprag.accounting import record_retrieval
from gaprag.errors import InputError, StoreError
from gaprag.state.base import Evidence
from gaprag.stores.bm25 import tokenize
from gaprag.stores.embeddings import Embedder, Vectors, default_embedder, embedder_by_name
from gaprag.stores.store import RetrievalMode

SOURCES: tuple[str, ...] = ("expert", "synthetic", "oracle", "generated", "historical", "human")
PairMode = Literal["dense", "bm25"]
PAIR_MODES: tuple[PairMode, ...] = ("dense", "bm25")
Scoring = Literal["geometric", "arithmetic"]
SCORINGS: tuple[Scoring, ...] = ("geometric", "arithmetic")
SCHEMA_VERSION = 1
T = TypeVar("T")
_BATCH = 256


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS chunks(
hash TEXT PRIMARY KEY, text TEXT NOT NULL, vec BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS pairs(
id TEXT PRIMARY KEY, question TEXT NOT NULL, answer TEXT NOT NULL,
chunk_hash TEXT NOT NULL REFERENCES chunks(hash), chunk_id TEXT NOT NULL,
source TEXT NOT NULL, created REAL NOT NULL, qvec BLOB NOT NULL,
meta TEXT NOT NULL DEFAULT '{}');
CREATE INDEX IF NOT EXISTS pairs_source ON pairs(source);
CREATE INDEX IF NOT EXISTS pairs_chunk ON pairs(chunk_hash);
CREATE TABLE IF NOT EXISTS processed(
job TEXT NOT NULL, key TEXT NOT NULL, created REAL NOT NULL,
PRIMARY KEY(job, key));
"""


class QAPair(TypedDict):
    id: str
    question: str
    answer: str
    chunk: str
    chunk_id: str
    source: str
    created: float


class ScoredPair(QAPair):
    """A ranked pair with the two factors of Eq. 2 and the combined score."""

    sim_q: float
    sim_c: float
    score: float
    rank: int


class ScoredChunk(TypedDict):
    chunk_id: str
    text: str
    score: float


def normalize_text(text: str) -> str:
    """Whitespace-collapsed text (the key for chunk identity)."""
    return " ".join(text.split())


def chunk_hash(text: str) -> str:
    return hashlib.sha1(normalize_text(text).encode("utf-8")).hexdigest()


def default_chunk_id(text: str) -> str:
    return "c_" + chunk_hash(text)[:16]


def pair_id(question: str, answer: str, chunk: str) -> str:
    """Deterministic id: the same (question, answer, chunk) triple always gets the same id."""
    key = "\x1f".join(
        [normalize_text(question).lower(), normalize_text(answer).lower(), chunk_hash(chunk)]
    )
    return "p_" + hashlib.sha1(key.encode("utf-8")).hexdigest()[:20]


def combine(
    sim_q: npt.NDArray[np.float64],
    sim_c: npt.NDArray[np.float64],
    *,
    gamma: float,
    scoring: Scoring = "geometric",
    clip_min: float = 0.0,
) -> npt.NDArray[np.float64]:
    """Eq. 2 (geometric) or its arithmetic variant over clipped factors; never NaN."""
    if not 0.0 <= gamma <= 1.0:
        raise InputError(f"gamma must be in [0, 1], got {gamma}", hint="e.g. gamma=0.5")
    q = np.maximum(np.asarray(sim_q, dtype=np.float64), clip_min)
    c = np.maximum(np.asarray(sim_c, dtype=np.float64), clip_min)
    if scoring == "arithmetic":
        return np.asarray(gamma * q + (1.0 - gamma) * c)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.power(q, gamma) * np.power(c, 1.0 - gamma)  # numpy: 0.0 ** 0 == 1.0
    return np.asarray(np.nan_to_num(out, nan=0.0, posinf=0.0, neginf=0.0), dtype=np.float64)


def _pair_mode(mode: str) -> PairMode:
    if mode == "dense":
        return "dense"
    if mode == "bm25":
        return "bm25"
    raise InputError(f"unknown pair search mode {mode!r}", hint="use dense or bm25")


def _blob(vec: npt.NDArray[Any]) -> bytes:
    return np.asarray(vec, dtype=np.float32).tobytes()


def _minmax(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    if x.size == 0:
        return x
    lo, hi = float(x.min()), float(x.max())
    return np.zeros_like(x) if hi <= lo else (x - lo) / (hi - lo)


@dataclass
class _Cache:
    """Vectors and ranking metadata, mirrored from SQLite and refreshed incrementally."""

    version: int = -1
    epoch: int = -1
    pair_rowid: int = 0
    chunk_rowid: int = 0
    ids: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    created: list[float] = field(default_factory=list)
    chunk_row: list[int] = field(default_factory=list)  # pair -> row in chunk arrays
    qvecs: list[Vectors] = field(default_factory=list)  # batches, stacked lazily
    chunk_hashes: list[str] = field(default_factory=list)
    chunk_index: dict[str, int] = field(default_factory=dict)
    cvecs: list[Vectors] = field(default_factory=list)
    Q: Vectors | None = None
    C: Vectors | None = None
    bm25: tuple[int, Any, Any] | None = None  # (version, question index, chunk index)

    def matrices(self, dim: int) -> tuple[Vectors, Vectors]:
        if self.Q is None or len(self.qvecs) > 1:
            self.Q = np.vstack(self.qvecs) if self.qvecs else np.zeros((0, dim), np.float32)
            self.qvecs = [self.Q]
        if self.C is None or len(self.cvecs) > 1:
            self.C = np.vstack(self.cvecs) if self.cvecs else np.zeros((0, dim), np.float32)
            self.cvecs = [self.C]
        return self.Q, self.C


class PairStore:
    """A durable, multi-process-safe store of (question, answer, chunk) pairs. See the module doc."""

    # its retriever view and the nodes that rank it record each search
    records_retrievals: ClassVar[bool] = True

    def __init__(self, path: Path, conn: sqlite3.Connection, embedder: Embedder) -> None:
        self.path = path
        self._conn = conn
        self.embedder = embedder
        self._lock = threading.RLock()
        self._cache = _Cache()

    # -- opening --------------------------------------------------------------------------
    @classmethod
    def open(
        cls, path: str | Path, *, embedder: Embedder | None = None, create: bool = True
    ) -> PairStore:
        """Open (or create) the store at ``path``. ``embedder`` defaults to the one the store
        was created with, else :func:`gaprag.stores.default_embedder`. ``create=False``: open
        only an existing pair store; no file is created, and a file that is not a pair store
        (another store's SQLite database, anything else) is refused before anything is
        written to it."""
        path = Path(path).expanduser()
        if path.is_dir():
            raise StoreError(
                f"{path} is a folder, not a pair store file",
                hint="give a file path such as feedback.sqlite",
            )
        if not create and not path.is_file():
            raise StoreError(
                f"there is no pair store at {path}",
                hint="name an existing pair store (`gaprag feedback add`, `gaprag kb qa-pairs`)",
            )
        try:
            if create:
                path.parent.mkdir(parents=True, exist_ok=True)
            target = str(path) if create else f"{path.absolute().as_uri()}?mode=rw"
            conn = sqlite3.connect(
                target, timeout=60.0, isolation_level=None, check_same_thread=False, uri=not create
            )

            def setup() -> dict[str, str]:
                if not create:
                    cls._check_schema(conn, path)
                conn.execute("PRAGMA busy_timeout=60000")
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=FULL")
                conn.execute("PRAGMA foreign_keys=ON")
                cls._create_schema(conn)
                return dict(conn.execute("SELECT key, value FROM meta").fetchall())

            try:
                meta = _retry_busy(setup, "open", path)
            except BaseException:
                conn.close()
                raise
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"cannot open the pair store {path} ({exc})",
                hint="check the path; a damaged file can be moved aside and rebuilt",
            ) from None
        if int(meta.get("schema", SCHEMA_VERSION)) != SCHEMA_VERSION:
            raise StoreError(
                f"the pair store {path} has an unknown schema", hint="use a newer gaprag"
            )
        if embedder is None:
            embedder = embedder_by_name(meta["embedder"]) if "embedder" in meta else None
        embedder = embedder or default_embedder()
        if "embedder" not in meta:
            with _transaction(conn, immediate=True):
                conn.execute(
                    "INSERT OR IGNORE INTO meta(key, value) VALUES ('embedder', ?), ('dim', ?)",
                    (embedder.name, str(embedder.dim)),
                )
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        if meta["embedder"] != embedder.name:
            raise StoreError(
                f"the pair store {path} was built with embedder {meta['embedder']!r}, "
                f"not {embedder.name!r}",
                hint="open it with the same embedder, or build a new store",
            )
        return cls(path, conn, embedder)

    @staticmethod
    def _check_schema(conn: sqlite3.Connection, path: Path) -> None:
        """A StoreError unless ``conn`` holds a pair store's tables and schema version (read
        only: nothing is written)."""
        try:
            tables = {
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
            marked = {"meta", "pairs", "chunks"} <= tables and conn.execute(
                "SELECT value FROM meta WHERE key = 'schema'"
            ).fetchone()
        except sqlite3.DatabaseError:  # not SQLite at all
            marked = None
        if not marked:
            raise StoreError(
                f"{path} is not a gaprag pair store", hint="name a pair store file (*.sqlite)"
            )

    @staticmethod
    def _create_schema(conn: sqlite3.Connection) -> None:
        with _transaction(conn, immediate=True):
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(
                "INSERT OR IGNORE INTO meta(key, value) VALUES "
                "('schema', ?), ('version', '0'), ('epoch', '0')",
                (str(SCHEMA_VERSION),),
            )

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> PairStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing --------------------------------------------------------------------------
    def add(
        self,
        question: str,
        answer: str,
        chunk: str,
        *,
        source: str = "expert",
        chunk_id: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> str:
        """Insert one pair (or update the source of an identical one); durable on return."""
        return self._write(
            [(question, answer, chunk)], source=source, chunk_ids=[chunk_id], meta=meta
        )[0]

    def add_many(
        self,
        items: Iterable[tuple[str, str, str]],
        *,
        source: str,
        progress: bool = False,
        chunk_ids: Sequence[str | None] | None = None,
    ) -> list[str]:
        """Insert many ``(question, answer, chunk)`` triples, embedding in batches."""
        triples = list(items)
        ids_for_chunks = list(chunk_ids) if chunk_ids is not None else [None] * len(triples)
        if len(ids_for_chunks) != len(triples):
            raise InputError("chunk_ids must have one entry per item", hint="or leave it out")
        out: list[str] = []
        bar: Any = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=len(triples), desc=f"pairs ({source})", unit="pair")
        try:
            for start in range(0, len(triples), _BATCH):
                batch = triples[start : start + _BATCH]
                out.extend(
                    self._write(
                        batch, source=source, chunk_ids=ids_for_chunks[start : start + _BATCH]
                    )
                )
                if bar is not None:
                    bar.update(len(batch))
        finally:
            if bar is not None:
                bar.close()
        return out

    def _write(
        self,
        triples: Sequence[tuple[str, str, str]],
        *,
        source: str,
        chunk_ids: Sequence[str | None],
        meta: dict[str, Any] | None = None,
    ) -> list[str]:
        source = (source or "").strip()
        if not source:
            raise InputError("the pair source label is empty", hint="e.g. source='expert'")
        rows = []
        for n, (q, a, c) in enumerate(triples):
            q, a, c = (str(x or "").strip() for x in (q, a, c))
            if not q or not a or not c:
                missing = [
                    name for name, v in (("question", q), ("answer", a), ("chunk", c)) if not v
                ]
                raise InputError(
                    f"pair {n + 1}: {', '.join(missing)} is empty",
                    hint="a pair needs a question, an answer and a supporting chunk",
                )
            h = chunk_hash(c)
            rows.append((pair_id(q, a, c), q, a, c, h, chunk_ids[n] or default_chunk_id(c)))
        # embed only what the store does not have yet (outside the write lock)
        with self._lock:
            have_pairs = self._existing("pairs", "id", [r[0] for r in rows])
            have_chunks = self._existing("chunks", "hash", [r[4] for r in rows])
        new_q = {r[0]: r[1] for r in rows if r[0] not in have_pairs}
        new_c = {r[4]: normalize_text(r[3]) for r in rows if r[4] not in have_chunks}
        qvec = dict(zip(new_q, self._embed(list(new_q.values())), strict=True))
        cvec = dict(zip(new_c, self._embed(list(new_c.values())), strict=True))
        now = time.time()
        meta_json = json.dumps(meta or {}, ensure_ascii=False, default=str)
        with self._lock, _transaction(self._conn, immediate=True) as conn:
            bump_epoch = False
            for hsh, text in new_c.items():
                conn.execute(
                    "INSERT OR IGNORE INTO chunks(hash, text, vec) VALUES (?, ?, ?)",
                    (hsh, text, _blob(cvec[hsh])),
                )
            for pid, q, a, _c, hsh, cid in rows:
                old = conn.execute("SELECT source FROM pairs WHERE id = ?", (pid,)).fetchone()
                if old is None:
                    vec = qvec.get(pid)
                    if vec is None:  # removed by another process since we looked
                        vec = self._embed([q])[0]
                    conn.execute(
                        "INSERT INTO pairs(id, question, answer, chunk_hash, chunk_id, source, "
                        "created, qvec, meta) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (pid, q, a, hsh, cid, source, now, _blob(vec), meta_json),
                    )
                elif old[0] != source:
                    conn.execute("UPDATE pairs SET source = ? WHERE id = ?", (source, pid))
                    bump_epoch = True
            conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'version'")
            if bump_epoch:
                conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'epoch'")
        return [r[0] for r in rows]

    def _existing(self, table: str, column: str, keys: Sequence[str]) -> set[str]:
        found: set[str] = set()
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), 500):
            part = unique[start : start + 500]
            marks = ",".join("?" * len(part))
            found.update(
                r[0]
                for r in self._conn.execute(
                    f"SELECT {column} FROM {table} WHERE {column} IN ({marks})", part
                )
            )
        return found

    def _embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.embedder.dim), dtype=np.float32)
        vecs = np.asarray(self.embedder.embed(list(texts)), dtype=np.float32)
        if vecs.shape != (len(texts), self.embedder.dim):
            raise StoreError(
                f"embedder {self.embedder.name} returned shape {vecs.shape}",
                hint="the embedder must return one row of `dim` floats per text",
            )
        return vecs

    def remove(self, pair_id: str) -> bool:
        """Delete one pair (and its chunk, if no other pair cites it). True if it existed."""
        with self._lock, _transaction(self._conn, immediate=True) as conn:
            row = conn.execute("SELECT chunk_hash FROM pairs WHERE id = ?", (pair_id,)).fetchone()
            if row is None:
                return False
            conn.execute("DELETE FROM pairs WHERE id = ?", (pair_id,))
            conn.execute(
                "DELETE FROM chunks WHERE hash = ? AND NOT EXISTS "
                "(SELECT 1 FROM pairs WHERE chunk_hash = ?)",
                (row[0], row[0]),
            )
            conn.execute("UPDATE meta SET value = value + 1 WHERE key IN ('version', 'epoch')")
        return True

    # -- resumable jobs -------------------------------------------------------------------
    def mark_processed(self, job: str, keys: Iterable[str]) -> None:
        """Record that ``keys`` (e.g. chunk hashes) are done for ``job`` (e.g. synthesis)."""
        now = time.time()
        with self._lock, _transaction(self._conn, immediate=True) as conn:
            conn.executemany(
                "INSERT OR IGNORE INTO processed(job, key, created) VALUES (?, ?, ?)",
                [(job, k, now) for k in keys],
            )

    def processed(self, job: str) -> set[str]:
        with self._lock:
            return {
                r[0] for r in self._conn.execute("SELECT key FROM processed WHERE job = ?", (job,))
            }

    # -- reading --------------------------------------------------------------------------
    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM pairs").fetchone()[0])

    def count(self, *, source: str | None = None) -> int:
        if source is None:
            return len(self)
        with self._lock:
            sql = "SELECT COUNT(*) FROM pairs WHERE source = ?"
            return int(self._conn.execute(sql, (source,)).fetchone()[0])

    def metadata(self, *, source: str | None = None) -> dict[str, dict[str, Any]]:
        """The ``meta`` each pair was written with (``add(..., meta=)``), by pair id."""
        sql = "SELECT id, meta FROM pairs" + (" WHERE source = ?" if source else "")
        with self._lock:
            rows = self._conn.execute(sql, (source,) if source else ()).fetchall()
        return {str(pid): dict(json.loads(text or "{}")) for pid, text in rows}

    def chunk_count(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0])

    _SELECT = (
        "SELECT p.id, p.question, p.answer, c.text, p.chunk_id, p.source, p.created "
        "FROM pairs p JOIN chunks c ON c.hash = p.chunk_hash"
    )

    @staticmethod
    def _pair(row: Sequence[Any]) -> QAPair:
        return QAPair(
            id=row[0],
            question=row[1],
            answer=row[2],
            chunk=row[3],
            chunk_id=row[4],
            source=row[5],
            created=float(row[6]),
        )

    def list(self, *, source: str | None = None) -> list[QAPair]:
        """Every pair (optionally of one source), oldest first."""
        with self._lock:
            if source is None:
                rows = self._conn.execute(self._SELECT + " ORDER BY p.rowid").fetchall()
            else:
                rows = self._conn.execute(
                    self._SELECT + " WHERE p.source = ? ORDER BY p.rowid", (source,)
                ).fetchall()
        return [self._pair(r) for r in rows]

    def __iter__(self) -> Iterator[QAPair]:
        return iter(self.list())

    def get(self, pair_id: str) -> QAPair | None:
        with self._lock:
            row = self._conn.execute(self._SELECT + " WHERE p.id = ?", (pair_id,)).fetchone()
        return None if row is None else self._pair(row)

    def _get_many(self, ids: Sequence[str]) -> dict[str, QAPair]:
        out: dict[str, QAPair] = {}
        for start in range(0, len(ids), 500):
            part = list(ids[start : start + 500])
            marks = ",".join("?" * len(part))
            with self._lock:
                rows = self._conn.execute(self._SELECT + f" WHERE p.id IN ({marks})", part)
                out.update((r[0], self._pair(r)) for r in rows.fetchall())
        return out

    def sample_answers(self, n: int, *, seed: int) -> builtins.list[str]:
        """``n`` answers of pairs drawn at random (reproducibly for a seed) from the store."""
        with self._lock:
            self._refresh()
            ids = list(self._cache.ids)
        if not ids or n <= 0:
            return []
        rng = np.random.default_rng(seed)
        picks = [ids[int(i)] for i in rng.integers(0, len(ids), size=n)]
        found = self._get_many(list(dict.fromkeys(picks)))
        return [found[p]["answer"] for p in picks if p in found]

    # -- the in-memory mirror ---------------------------------------------------------------
    def _refresh(self) -> _Cache:
        """Bring the vector mirror up to date with the file (other processes included)."""
        cache = self._cache
        with _transaction(self._conn) as conn:  # one consistent snapshot
            meta = dict(
                conn.execute("SELECT key, value FROM meta WHERE key IN ('version', 'epoch')")
            )
            version, epoch = int(meta["version"]), int(meta["epoch"])
            if version == cache.version and epoch == cache.epoch:
                return cache
            if epoch != cache.epoch:
                cache = self._cache = _Cache()
            crow = conn.execute(
                "SELECT rowid, hash, vec FROM chunks WHERE rowid > ? ORDER BY rowid",
                (cache.chunk_rowid,),
            ).fetchall()
            prow = conn.execute(
                "SELECT rowid, id, chunk_hash, source, created, qvec FROM pairs "
                "WHERE rowid > ? ORDER BY rowid",
                (cache.pair_rowid,),
            ).fetchall()
        dim = self.embedder.dim
        if crow:
            for _, hsh, _ in crow:
                cache.chunk_index[hsh] = len(cache.chunk_hashes)
                cache.chunk_hashes.append(hsh)
            cache.cvecs.append(
                np.frombuffer(b"".join(r[2] for r in crow), np.float32).reshape(-1, dim)
            )
            cache.chunk_rowid = int(crow[-1][0])
            cache.C = None
        if prow:
            for _, pid, hsh, src, created, _ in prow:
                cache.ids.append(pid)
                cache.sources.append(src)
                cache.created.append(float(created))
                cache.chunk_row.append(cache.chunk_index[hsh])
            cache.qvecs.append(
                np.frombuffer(b"".join(r[5] for r in prow), np.float32).reshape(-1, dim)
            )
            cache.pair_rowid = int(prow[-1][0])
            cache.Q = None
        cache.version, cache.epoch = version, epoch
        return cache

    def _bm25(self, cache: _Cache) -> tuple[Any, Any]:
        if cache.bm25 is None or cache.bm25[0] != cache.version:
            import bm25s

            with self._lock:
                qtext = dict(self._conn.execute("SELECT id, question FROM pairs").fetchall())
                ctext = dict(self._conn.execute("SELECT hash, text FROM chunks").fetchall())
            qi: Any = bm25s.BM25()
            qi.index([tokenize(qtext.get(i, "")) for i in cache.ids] or [[]], show_progress=False)
            ci: Any = bm25s.BM25()
            ci.index(
                [tokenize(ctext.get(h, "")) for h in cache.chunk_hashes] or [[]],
                show_progress=False,
            )
            cache.bm25 = (cache.version, qi, ci)
        return cache.bm25[1], cache.bm25[2]

    def _similarities(
        self, query: str, mode: PairMode, cache: _Cache
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """(sim to every pair question, sim to every unique chunk), in cache order."""
        n_pairs, n_chunks = len(cache.ids), len(cache.chunk_hashes)
        if mode == "bm25":
            qi, ci = self._bm25(cache)
            tokens = tokenize(query)
            if not tokens:
                return np.zeros(n_pairs), np.zeros(n_chunks)
            sq = np.asarray(qi.get_scores(tokens), dtype=np.float64)[:n_pairs]
            sc = np.asarray(ci.get_scores(tokens), dtype=np.float64)[:n_chunks]
            return sq, sc
        if mode != "dense":
            raise InputError(f"unknown pair search mode {mode!r}", hint="use dense or bm25")
        e = self._embed([query])[0].astype(np.float64)
        Q, C = cache.matrices(self.embedder.dim)
        return Q.astype(np.float64) @ e, C.astype(np.float64) @ e

    def rank(
        self,
        query: str,
        k: int = 5,
        *,
        gamma: float = 0.5,
        sources: Collection[str] | None = None,
        mode: str = "dense",
        scoring: str = "geometric",
        clip_min: float = 0.0,
    ) -> builtins.list[ScoredPair]:
        """Top-``k`` pairs by Eq. 2, with both factors; see :meth:`search`."""
        pair_mode = _pair_mode(mode)
        if scoring not in SCORINGS:
            raise InputError(f"unknown scoring {scoring!r}", hint="use geometric or arithmetic")
        with self._lock:
            cache = self._refresh()
            if not cache.ids or k <= 0:
                return []
            sq, sc_chunks = self._similarities(query, pair_mode, cache)
            rows = np.asarray(cache.chunk_row, dtype=np.int64)
            sc = sc_chunks[rows]
            if scoring == "arithmetic" and pair_mode == "bm25":  # scale-dependent: normalise
                sq, sc = _minmax(sq), _minmax(sc)
            scores = combine(sq, sc, gamma=gamma, scoring=scoring, clip_min=clip_min)
            mask = np.ones(len(cache.ids), dtype=bool)
            if sources is not None:
                allowed = set(sources)
                mask = np.fromiter((s in allowed for s in cache.sources), bool, len(cache.ids))
            cand = np.flatnonzero(mask)
            if cand.size == 0:
                return []
            if cand.size > k:  # keep everything tied with the k-th score, then sort exactly
                kth = np.partition(scores[cand], cand.size - k)[cand.size - k]
                cand = cand[scores[cand] >= kth]
            mean = 0.5 * (np.maximum(sq, clip_min) + np.maximum(sc, clip_min))
            created = np.asarray(cache.created)
            order = sorted(
                cand.tolist(),
                key=lambda i: (-scores[i], -mean[i], -created[i], cache.ids[i]),
            )[:k]
            chosen = [(cache.ids[i], float(sq[i]), float(sc[i]), float(scores[i])) for i in order]
        found = self._get_many([c[0] for c in chosen])
        out: list[ScoredPair] = []
        for pid, fq, fc, s in chosen:
            pair = found.get(pid)
            if pair is None:  # removed between ranking and fetching
                continue
            out.append(ScoredPair(**pair, sim_q=fq, sim_c=fc, score=s, rank=len(out) + 1))
        return out

    def search(
        self,
        query: str,
        k: int = 5,
        *,
        gamma: float = 0.5,
        sources: Collection[str] | None = None,
        mode: str = "dense",
    ) -> builtins.list[tuple[QAPair, float]]:
        """Top-``k`` pairs by Eq. 2: ``sim(q,q_i)^γ · sim(q,c_i)^(1-γ)`` (factors clipped at 0).

        ``gamma=1.0`` ranks by question similarity alone, ``0.0`` by chunk similarity alone.
        ``sources`` restricts the pool (e.g. ``{"synthetic", "expert"}``); ``mode`` is
        ``"dense"`` (embedding dot products) or ``"bm25"`` (BM25 scores as the factors).
        """
        hits = self.rank(query, k, gamma=gamma, sources=sources, mode=mode)
        return [
            (
                QAPair(
                    id=h["id"],
                    question=h["question"],
                    answer=h["answer"],
                    chunk=h["chunk"],
                    chunk_id=h["chunk_id"],
                    source=h["source"],
                    created=h["created"],
                ),
                h["score"],
            )
            for h in hits
        ]

    def search_chunks(
        self,
        query: str,
        k: int = 5,
        *,
        sources: Collection[str] | None = None,
        mode: str = "dense",
    ) -> builtins.list[ScoredChunk]:
        """Standard RAG over the store's unique chunks (Eq. 1): top-``k`` by ``sim(q, c)``."""
        with self._lock:
            cache = self._refresh()
            if not cache.chunk_hashes or k <= 0:
                return []
            _, sc = self._similarities(query, _pair_mode(mode), cache)
            allowed_rows = set(range(len(cache.chunk_hashes)))
            if sources is not None:
                allowed = set(sources)
                allowed_rows = {
                    cache.chunk_row[i] for i, s in enumerate(cache.sources) if s in allowed
                }
            order = sorted(allowed_rows, key=lambda r: (-sc[r], cache.chunk_hashes[r]))[:k]
            hashes = [(cache.chunk_hashes[r], float(sc[r])) for r in order]
            out: list[ScoredChunk] = []
            for hsh, score in hashes:
                row = self._conn.execute(
                    "SELECT c.text, p.chunk_id FROM chunks c JOIN pairs p ON p.chunk_hash = c.hash "
                    "WHERE c.hash = ? ORDER BY p.rowid LIMIT 1",
                    (hsh,),
                ).fetchone()
                if row is not None:
                    out.append(ScoredChunk(chunk_id=row[1], text=row[0], score=score))
        return out

    def as_retriever(self, *, gamma: float = 0.5, source_label: str = "feedback") -> PairRetriever:
        """This store as a :class:`gaprag.stores.retriever.Retriever` (one Evidence per pair)."""
        return PairRetriever(self, gamma=gamma, source_label=source_label)


class PairRetriever:
    """Pairs as evidence: text ``"Q: ...\\nA: ..."`` (the chunk is not included), id = pair id."""

    records_retrievals = True

    def __init__(
        self,
        store: PairStore,
        *,
        gamma: float = 0.5,
        source_label: str = "feedback",
        sources: Collection[str] | None = None,
    ) -> None:
        self.store = store
        self.gamma = gamma
        self.source_label = source_label
        self.sources = sources

    def search(
        self,
        query: str,
        k: int = 5,
        *,
        mode: RetrievalMode | None = None,
        exclude: Collection[str] = (),
    ) -> list[Evidence]:
        pair_mode = "bm25" if mode == "bm25" else "dense"
        hits = self.store.search(
            query, k + len(exclude), gamma=self.gamma, sources=self.sources, mode=pair_mode
        )
        out = [
            Evidence(
                id=p["id"],
                title=p["question"],
                text=f"Q: {p['question']}\nA: {p['answer']}",
                source=self.source_label,
                score=round(s, 6),
                round=0,
            )
            for p, s in hits
            if p["id"] not in exclude
        ][:k]
        record_retrieval(query, [e["id"] for e in out], mode=mode)
        return out


#: How long a writer keeps waiting for SQLite's lock, in total, before giving up.
LOCK_WAIT_S = 300.0


def _busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _retry_busy(action: Callable[[], T], what: str, path: object = "") -> T:
    """Run ``action``, retrying while SQLite says the database is locked or busy.

    ``busy_timeout`` already makes SQLite wait; some steps (switching to WAL, WAL recovery
    after a crash) report SQLITE_BUSY without waiting, so the wait is repeated here, with
    backoff, for up to :data:`LOCK_WAIT_S` seconds. Writers never see "database is locked".
    """
    deadline = time.monotonic() + LOCK_WAIT_S
    delay = 0.02
    while True:
        try:
            return action()
        except sqlite3.OperationalError as exc:
            if not _busy(exc):
                raise
            if time.monotonic() > deadline:
                raise StoreError(
                    f"the pair store{f' {path}' if path else ''} stayed locked for "
                    f"{LOCK_WAIT_S:.0f} s ({what})",
                    hint="another process holds a long write lock on it; retry later",
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.5)


@contextmanager
def _transaction(
    conn: sqlite3.Connection, *, immediate: bool = False
) -> Iterator[sqlite3.Connection]:
    """BEGIN (IMMEDIATE for writes, so writers queue instead of failing) ... COMMIT/ROLLBACK."""
    _retry_busy(lambda: conn.execute("BEGIN IMMEDIATE" if immediate else "BEGIN"), "begin")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
