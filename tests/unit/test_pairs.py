"""PairStore: Eq. 2 ranking, idempotent upserts, durability and concurrent writers."""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import signal
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from gaprag.errors import InputError, StoreError
from gaprag.stores import HashingEmbedder
from gaprag.stores.embeddings import Vectors
from gaprag.stores.pairs import PairStore, chunk_hash, combine, pair_id


class TableEmbedder:
    """Hand-set vectors: each text maps to a fixed (not necessarily normalised) vector."""

    def __init__(self, table: dict[str, Sequence[float]], dim: int = 3) -> None:
        self.table = table
        self.dim = dim
        self.name = f"table-{dim}"
        self.calls: list[str] = []

    def embed(
        self, texts: Sequence[str], *, batch_size: int = 64, progress: bool = False
    ) -> Vectors:
        self.calls.extend(texts)
        return np.asarray([self.table[t] for t in texts], dtype=np.float32).reshape(-1, self.dim)


class CountingEmbedder(HashingEmbedder):
    def __init__(self) -> None:
        super().__init__(64)
        self.seen: list[str] = []

    def embed(
        self, texts: Sequence[str], *, batch_size: int = 64, progress: bool = False
    ) -> Vectors:
        self.seen.extend(texts)
        return super().embed(texts)


def hashing_store(path: Path) -> PairStore:
    return PairStore.open(path, embedder=HashingEmbedder(64))


# -- Eq. 2 -----------------------------------------------------------------------------------
def _hand_store(tmp_path: Path) -> tuple[PairStore, dict[str, list[float]]]:
    v = {
        "query": [1.0, 0.0, 0.0],
        "q1": [0.8, 0.6, 0.0],
        "c1": [0.6, 0.0, 0.8],
        "q2": [0.3, 0.95, 0.0],
        "c2": [0.9, 0.1, 0.4],
        "q3": [-0.5, 0.5, 0.7],  # negative factor
        "c3": [0.99, 0.1, 0.0],
    }
    store = PairStore.open(tmp_path / "hand.sqlite", embedder=TableEmbedder(v))
    for i in (1, 2, 3):
        store.add(f"q{i}", f"a{i}", f"c{i}", source="synthetic")
    return store, v


def test_eq2_is_exact_for_gamma_half_and_point_three(tmp_path: Path) -> None:
    store, v = _hand_store(tmp_path)
    q = np.asarray(v["query"], dtype=np.float32).astype(np.float64)

    def dot(name: str) -> float:
        return float(np.asarray(v[name], dtype=np.float32).astype(np.float64) @ q)

    for gamma in (0.5, 0.3):
        got = {p["question"]: s for p, s in store.search("query", 5, gamma=gamma)}
        for i in (1, 2):
            want = dot(f"q{i}") ** gamma * dot(f"c{i}") ** (1 - gamma)
            assert abs(got[f"q{i}"] - want) < 1e-9
    hits = store.rank("query", 5, scoring="arithmetic")
    by_q = {h["question"]: h for h in hits}
    assert abs(by_q["q2"]["score"] - (0.5 * dot("q2") + 0.5 * dot("c2"))) < 1e-9


def test_negative_factor_scores_zero_not_nan_and_ranks_last(tmp_path: Path) -> None:
    store, _ = _hand_store(tmp_path)
    hits = store.rank("query", 5)
    assert [h["question"] for h in hits][-1] == "q3"
    assert hits[-1]["score"] == 0.0 and hits[-1]["sim_q"] < 0
    assert all(not math.isnan(h["score"]) for h in hits)
    assert [h["rank"] for h in hits] == [1, 2, 3]


def test_gamma_limits_match_single_factor_orderings(tmp_path: Path) -> None:
    store = hashing_store(tmp_path / "s.sqlite")
    store.add("capital of France", "Paris", "Berlin is a large city in Germany.")
    store.add("largest city in Germany", "Berlin", "Paris is the capital of France.")
    store.add("who painted the Mona Lisa", "Leonardo", "The Mona Lisa hangs in the Louvre.")
    query = "what is the capital of France"
    by_q = store.rank(query, 3, gamma=1.0)
    by_c = store.rank(query, 3, gamma=0.0)
    assert [h["id"] for h in by_q] == [
        h["id"] for h in sorted(by_q, key=lambda h: (-max(h["sim_q"], 0), -max(h["sim_c"], 0)))
    ]
    assert by_q[0]["question"] == "capital of France"
    assert by_c[0]["chunk"] == "Paris is the capital of France."
    assert all(abs(h["score"] - max(h["sim_c"], 0.0)) < 1e-9 for h in by_c)


def test_geometric_ranking_is_scale_invariant_and_arithmetic_is_not() -> None:
    rng = np.random.default_rng(0)
    sq, sc = rng.random(50) * 12, rng.random(50) * 3
    base = np.argsort(-combine(sq, sc, gamma=0.5))[:5]
    assert list(np.argsort(-combine(sq * 7.3, sc, gamma=0.5))[:5]) == list(base)
    with pytest.raises(InputError):
        combine(sq, sc, gamma=1.5)


def test_top_k_size_order_and_determinism(tmp_path: Path) -> None:
    store = hashing_store(tmp_path / "s.sqlite")
    assert store.search("anything", 5) == []
    for i in range(3):
        store.add(f"question number {i} about rivers", f"ans{i}", f"chunk {i} on rivers")
    assert len(store.search("rivers", 5)) == 3
    for i in range(3, 9):
        store.add(f"question number {i} about rivers", f"ans{i}", f"chunk {i} on rivers")
    hits = store.search("rivers question", 5)
    assert len(hits) == 5
    scores = [s for _, s in hits]
    assert scores == sorted(scores, reverse=True)
    again = store.search("rivers question", 5)
    assert [p["id"] for p, _ in again] == [p["id"] for p, _ in hits]


def test_ties_break_newer_first_then_id(tmp_path: Path) -> None:
    store = hashing_store(tmp_path / "s.sqlite")
    chunk = "The Nile is the longest river in Africa."
    old = store.add("longest river in Africa", "Nile", chunk)
    new = store.add("longest river in Africa", "The Nile", chunk)  # same q and c: tied factors
    hits = store.rank("longest river in Africa", 2)
    assert hits[0]["score"] == hits[1]["score"]
    assert [h["id"] for h in hits] == [new, old]


def test_provenance_is_ignored_by_scoring_and_sources_filter(tmp_path: Path) -> None:
    store = hashing_store(tmp_path / "s.sqlite")
    store.add(
        "who wrote Hamlet", "Shakespeare", "Hamlet was written by Shakespeare.", source="synthetic"
    )
    store.add(
        "who wrote Hamlet", "W. Shakespeare", "Hamlet was written by Shakespeare.", source="expert"
    )
    hits = store.search("who wrote Hamlet", 2)
    assert hits[0][1] == hits[1][1]
    only = store.search("who wrote Hamlet", 5, sources={"synthetic"})
    assert [p["source"] for p, _ in only] == ["synthetic"]
    assert store.search("who wrote Hamlet", 5, sources={"oracle"}) == []


def test_bm25_mode_unrelated_pair_scores_exactly_zero(tmp_path: Path) -> None:
    store = hashing_store(tmp_path / "s.sqlite")
    store.add("Aladin stage name management consultant", "Aladin Fateh", "Aladin is a magician.")
    store.add("volcano eruption Iceland", "Eyjafjallajokull", "Iceland has many volcanoes.")
    hits = dict((p["question"], s) for p, s in store.search("Aladin consultant", 5, mode="bm25"))
    assert hits["volcano eruption Iceland"] == 0.0
    assert hits["Aladin stage name management consultant"] > 0.0
    with pytest.raises(InputError):
        store.search("x", mode="sparse")


# -- writes --------------------------------------------------------------------------------
def test_idempotent_insert_and_chunk_embedded_once(tmp_path: Path) -> None:
    emb = CountingEmbedder()
    store = PairStore.open(tmp_path / "s.sqlite", embedder=emb)
    chunk = "Paris is the capital of France."
    a = store.add("capital of France?", "Paris", chunk)
    b = store.add("capital of France?", "Paris", chunk)
    assert a == b == pair_id("capital of France?", "Paris", chunk) and len(store) == 1
    store.add("largest French city?", "Paris", "  Paris is the capital\nof France. ")  # same chunk
    assert len(store) == 2 and store.chunk_count() == 1
    assert emb.seen.count(chunk) == 1  # chunk text embedded once for both pairs
    assert emb.seen.count("capital of France?") == 1
    ids = {p["chunk_id"] for p in store.list()}
    assert len(ids) == 1 and ids.pop() == "c_" + chunk_hash(chunk)[:16]


def test_upsert_updates_source_and_custom_chunk_id(tmp_path: Path) -> None:
    store = hashing_store(tmp_path / "s.sqlite")
    pid = store.add("q?", "a", "chunk text", source="synthetic", chunk_id="doc-7")
    assert store.search("q", 1, sources={"synthetic"})[0][0]["id"] == pid
    assert store.add("q?", "a", "chunk text", source="expert") == pid
    pair = store.get(pid)
    assert pair is not None and pair["source"] == "expert" and pair["chunk_id"] == "doc-7"
    assert store.search("q", 1, sources={"synthetic"}) == []  # cache saw the source change
    assert [p["id"] for p in store.list(source="expert")] == [pid]


def test_remove_and_bad_input(tmp_path: Path) -> None:
    store = hashing_store(tmp_path / "s.sqlite")
    pid = store.add("q?", "a", "only chunk")
    keep = store.add("other?", "b", "other chunk")
    assert store.remove(pid) is True and store.remove(pid) is False
    assert len(store) == 1 and store.chunk_count() == 1  # orphaned chunk removed too
    assert [p["id"] for p, _ in store.search("q", 5)] == [keep]
    with pytest.raises(InputError, match="answer"):
        store.add("q?", "  ", "c")
    with pytest.raises(InputError):
        store.add("q?", "a", "c", source="")


def test_add_many_and_retriever_evidence(tmp_path: Path) -> None:
    store = hashing_store(tmp_path / "s.sqlite")
    ids = store.add_many(
        [
            ("who wrote Hamlet", "Shakespeare", "Hamlet chunk"),
            ("capital of Peru", "Lima", "Peru chunk"),
        ],
        source="synthetic",
    )
    assert len(ids) == 2 and len(store.list(source="synthetic")) == 2
    ev = store.as_retriever(source_label="feedback").search("who wrote Hamlet", 1)
    assert ev[0]["id"] == ids[0] and ev[0]["source"] == "feedback"
    assert ev[0]["text"] == "Q: who wrote Hamlet\nA: Shakespeare"
    assert store.as_retriever().search("who wrote Hamlet", 2, exclude={ids[0]})[0]["id"] == ids[1]


def test_search_chunks_is_standard_rag_over_unique_chunks(tmp_path: Path) -> None:
    store = hashing_store(tmp_path / "s.sqlite")
    store.add("a?", "1", "rivers of Europe Danube")
    store.add("b?", "2", "rivers of Europe Danube")
    store.add("c?", "3", "mountains of Asia")
    hits = store.search_chunks("Danube rivers Europe", 5)
    assert [h["text"] for h in hits] == ["rivers of Europe Danube", "mountains of Asia"]


def test_sample_answers_reproducible(tmp_path: Path) -> None:
    store = hashing_store(tmp_path / "s.sqlite")
    for i in range(20):
        store.add(f"q{i}?", f"answer {i}", f"chunk {i}")
    assert store.sample_answers(5, seed=3) == store.sample_answers(5, seed=3)
    assert len(store.sample_answers(5, seed=3)) == 5


# -- durability and concurrency --------------------------------------------------------------
def test_wal_and_full_sync_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    store = hashing_store(path)
    pid = store.add("q?", "a", "c")
    mode = store._conn.execute("PRAGMA journal_mode").fetchone()[0]
    sync = store._conn.execute("PRAGMA synchronous").fetchone()[0]
    assert mode == "wal" and sync == 2  # FULL
    before = store.search("q", 1)
    store.close()
    again = PairStore.open(path)  # embedder recovered from the file's metadata
    assert again.embedder.name == "hashing-64"
    assert again.search("q", 1) == before and again.get(pid) is not None
    with pytest.raises(StoreError, match="embedder"):
        PairStore.open(path, embedder=HashingEmbedder(32))


def test_other_instance_sees_new_pairs(tmp_path: Path) -> None:
    a = hashing_store(tmp_path / "s.sqlite")
    b = hashing_store(tmp_path / "s.sqlite")
    a.add("first?", "1", "first chunk")
    assert len(b.search("first", 5)) == 1  # b builds its mirror
    a.add("second?", "2", "second chunk")
    assert {p["question"] for p, _ in b.search("second", 5)} == {"first?", "second?"}


def _writer(path: str, worker: int, n: int) -> None:
    store = PairStore.open(path, embedder=HashingEmbedder(64))
    for i in range(n):
        # every worker also cites one shared chunk, so chunk inserts race too
        chunk = "shared chunk text" if i % 2 else f"chunk {worker}-{i}"
        store.add(f"worker {worker} question {i}?", f"answer {worker}-{i}", chunk)
    store.close()


def _add_then_die(path: str) -> None:
    store = PairStore.open(path, embedder=HashingEmbedder(64))
    store.add("acknowledged?", "yes", "durable chunk")
    os.kill(os.getpid(), signal.SIGKILL)  # no close, no clean shutdown


def test_concurrent_writer_processes_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.sqlite")
    hashing_store(Path(path)).close()
    ctx = mp.get_context("fork")
    workers, n = 4, 30
    procs = [ctx.Process(target=_writer, args=(path, w, n)) for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    store = hashing_store(Path(path))
    assert len(store) == workers * n
    assert store.chunk_count() == workers * n // 2 + 1
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_acknowledged_insert_survives_a_killed_process(tmp_path: Path) -> None:
    path = str(tmp_path / "crash.sqlite")
    proc = mp.get_context("fork").Process(target=_add_then_die, args=(path,))
    proc.start()
    proc.join(60)
    assert proc.exitcode == -signal.SIGKILL
    store = hashing_store(Path(path))
    assert [p["question"] for p in store.list()] == ["acknowledged?"]
