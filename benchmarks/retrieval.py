"""Retrieval benchmark: index build time, resident memory and query latency (p50, p95).

Engines: BM25 (bm25s and rank_bm25), Chroma (embedded, HNSW cosine) and hybrid (bm25s + Chroma
fused by reciprocal rank). Passages are the bundled datasets' paragraphs, repeated with a
distinguishing suffix up to the target size ("the padded corpus"). Chroma is built from vectors
derived from real MiniLM embeddings (a sample embedded here, or with ``--embed-sample 0`` the
demo corpus's shipped vectors) plus small noise for the repeats, so build and search times
exclude embedding. Query latency for Chroma and hybrid excludes the query embedding, reported
as ``embed_query_ms``. Memory: the process's resident set (VmRSS) grown while building each
index, and the peak (VmHWM); run one engine per process (``--engines``) for clean numbers.

    python benchmarks/retrieval.py [--sizes 1000,10000,100000] [--queries 200]
    python benchmarks/retrieval.py --sizes 1000000 --engines bm25s --embed-sample 0
    python benchmarks/retrieval.py --recall          # BM25 recall@5 on the bundled dev sets

``--recall``: for each bundled dev set, BM25 over that set's own paragraph union, one query per
question (the question text), recall@5 of the supporting paragraphs, questions 60-259 only
(questions 0-49 are kept for evaluation and never used to choose anything).

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from gaprag.stores.bm25 import BM25Index
from gaprag.stores.dense import BATCH, DenseIndex, make_client
from gaprag.stores.hybrid import rrf

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "gaprag" / "data" / "eval"
DEMO_VECTORS = ROOT / "gaprag" / "data" / "demo" / "minilm_vectors.npz"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def rss_mb() -> tuple[float, float]:
    """(current, peak) resident memory of this process in MiB, from /proc (Linux)."""
    cur = peak = 0.0
    with contextlib.suppress(OSError), open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                cur = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
    return round(cur, 1), round(peak, 1)


def corpus_and_questions() -> tuple[list[str], list[str]]:
    texts: dict[str, str] = {}
    questions: list[str] = []
    for path in sorted(DATA.glob("*.jsonl")):
        for line in path.open(encoding="utf-8"):
            rec = json.loads(line)
            questions.append(rec["question"])
            for p in rec.get("paragraphs", []):
                texts.setdefault(p["id"], f"{p['title']} {p['text']}")
    return list(texts.values()), questions


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def timed(fn: Any, queries: list[Any]) -> dict[str, float]:
    """Wall-clock latency percentiles, and the process CPU time per query (robust to other
    jobs sharing the cores: a busy machine stretches wall time, not CPU time)."""
    lat, cpu = [], []
    for q in queries:
        c = time.process_time()
        t = time.perf_counter()
        fn(q)
        lat.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
    return {
        "query_p50_ms": round(pct(lat, 50), 3),
        "query_p95_ms": round(pct(lat, 95), 3),
        "query_mean_ms": round(statistics.fmean(lat), 3),
        "query_cpu_p50_ms": round(pct(cpu, 50), 3),
    }


def padded(base: list[str], n: int) -> list[str]:
    return [
        base[i % len(base)] + ("" if i < len(base) else f" variant{i // len(base)}")
        for i in range(n)
    ]


def vectors(real: Any, n: int, rng: np.random.Generator) -> Any:
    """``n`` unit vectors: the real ones repeated with noise, made in chunks to bound memory."""
    out = np.empty((n, real.shape[1]), dtype=np.float32)
    for start in range(0, n, 100_000):
        rows = np.arange(start, min(n, start + 100_000))
        chunk = real[rows % len(real)] + 0.05 * rng.standard_normal(
            (len(rows), real.shape[1]), dtype=np.float32
        )
        chunk /= np.linalg.norm(chunk, axis=1, keepdims=True)
        out[rows] = chunk
    return out


def build_chroma(
    client: Any, name: str, ids: list[str], vecs: Any, budget_s: float
) -> tuple[DenseIndex, dict[str, Any]]:
    """What ``DenseIndex.create`` does (same batches), with progress and a time budget."""
    col = client.create_collection(name, embedding_function=None, metadata={"hnsw:space": "cosine"})
    t0, c0 = time.perf_counter(), time.process_time()
    added = 0
    last_log = t0
    for start in range(0, len(ids), BATCH):
        col.add(ids=ids[start : start + BATCH], embeddings=vecs[start : start + BATCH].tolist())
        added = min(len(ids), start + BATCH)
        now = time.perf_counter()
        if now - last_log > 60 or added == len(ids):
            last_log = now
            log(
                f"chroma {added}/{len(ids)} in {now - t0:.0f}s "
                f"({added / (now - t0):.0f}/s), rss {rss_mb()[0]} MiB"
            )
        if now - t0 > budget_s and added < len(ids):
            break
    elapsed = time.perf_counter() - t0
    info: dict[str, Any] = {
        "added": added,
        "build_s": round(elapsed, 3),
        "build_cpu_s": round(time.process_time() - c0, 3),
    }
    if added < len(ids):
        rate = added / elapsed
        info.update(
            complete=False,
            rate_per_s=round(rate, 1),
            extrapolated_build_s=round(len(ids) / rate, 0),
            note="stopped at the time budget; extrapolated linearly (HNSW inserts slow down "
            "as the graph grows, so the real time is likely longer)",
        )
    return DenseIndex(col), info


def bench_size(
    n: int,
    engines: list[str],
    base: list[str],
    real: Any,
    queries: list[str],
    qvecs: Any,
    rng: np.random.Generator,
    chroma_budget_s: float,
) -> dict[str, dict[str, Any]]:
    texts = padded(base, n)
    out: dict[str, dict[str, Any]] = {}
    indexes: dict[str, BM25Index] = {}
    for engine in ("bm25s", "rank_bm25"):
        if engine not in engines:
            continue
        before = rss_mb()[0]
        t, c = time.perf_counter(), time.process_time()
        index = BM25Index.build(texts, engine)  # type: ignore[arg-type]
        build, build_cpu = time.perf_counter() - t, time.process_time() - c
        after, peak = rss_mb()
        index.search(queries[0], 10)  # first query: loads compiled code, not counted
        sample = queries if engine == "bm25s" or n <= 10000 else queries[:50]  # O(N) per query
        out[engine] = {
            "build_s": round(build, 3),
            "build_cpu_s": round(build_cpu, 3),
            "rss_growth_mib": round(after - before, 1),
            "peak_rss_mib": peak,
            **timed(lambda s, ix=index: ix.search(s, 10), sample),
        }
        log(f"{engine} {n}: {out[engine]}")
        indexes[engine] = index
    if "chroma" not in engines:
        return out
    ids = [f"p{i}" for i in range(n)]
    vecs = vectors(real, n, rng)
    tmp = Path(tempfile.mkdtemp(prefix="gaprag-bench-"))
    try:
        client = make_client(tmp / "chroma")
        before = rss_mb()[0]
        dense, info = build_chroma(client, f"bench-{n}", ids, vecs, chroma_budget_s)
        after, peak = rss_mb()
        disk = sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file())
        out["chroma"] = {
            **info,
            "rss_growth_mib": round(after - before, 1),
            "peak_rss_mib": peak,
            "disk_mib": round(disk / 2**20, 1),
            **timed(lambda v: dense.search(v, 10), list(qvecs)),
        }
        log(f"chroma {n}: {out['chroma']}")
        if "bm25s" in indexes and info["added"] == n:
            sparse_index = indexes["bm25s"]

            def hybrid(i: int) -> None:
                sparse = [ids[r] for r, _ in sparse_index.search(queries[i], 20)]
                near = [d for d, _ in dense.search(qvecs[i], 20)]
                rrf([sparse, near])

            out["hybrid"] = {
                "build_s": round(out["bm25s"]["build_s"] + info["build_s"], 3),
                **timed(hybrid, list(range(len(queries)))),
            }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def recall(first: int, last: int, k: int) -> dict[str, Any]:
    """BM25 (default settings) recall@k per bundled dev set, questions ``first``..``last``."""
    out: dict[str, Any] = {}
    for path in sorted(DATA.glob("*.jsonl")):
        recs = [json.loads(line) for line in path.open(encoding="utf-8")]
        paras: dict[str, str] = {}
        for rec in recs:
            for p in rec.get("paragraphs", []):
                paras.setdefault(p["id"], f"{p['title']} {p['text']}")
        pids = list(paras)
        index = BM25Index.build(list(paras.values()))
        scores = []
        for rec in recs[first : last + 1]:
            gold = set(rec.get("supporting") or [])
            if not gold:
                continue
            top = {pids[r] for r, _ in index.search(rec["question"], k)}
            scores.append(len(gold & top) / len(gold))
        if scores:
            out[path.name.split(".")[0]] = {
                "questions": len(scores),
                "paragraphs": len(pids),
                f"recall@{k}": round(statistics.fmean(scores), 4),
            }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--engines", default="bm25s,rank_bm25,chroma")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument(
        "--embed-sample",
        type=int,
        default=1000,
        help="passages to embed for real vectors; 0 = use the demo corpus's shipped vectors",
    )
    ap.add_argument("--chroma-budget-s", type=float, default=1e9)
    ap.add_argument("--recall", action="store_true", help="BM25 recall@5 on the dev sets")
    args = ap.parse_args()
    if args.recall:
        print(json.dumps({"bm25_recall@5_questions_60_259": recall(60, 259, 5)}))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    engines = args.engines.split(",")
    base, questions = corpus_and_questions()
    rng = np.random.default_rng(0)
    queries = [
        questions[i]
        for i in rng.choice(len(questions), size=min(args.queries, len(questions)), replace=False)
    ]

    result: dict[str, Any] = {}
    real = qvecs = None
    if "chroma" in engines:
        from gaprag.stores.embeddings import default_embedder

        embedder = default_embedder()
        embedder.embed(["warm up"])
        t = time.perf_counter()
        qvecs = embedder.embed(queries, batch_size=1)
        embed_query_ms = (time.perf_counter() - t) * 1000 / len(queries)
        embedding: dict[str, Any] = {
            "model": embedder.name,
            "embed_query_ms": round(embed_query_ms, 2),
        }
        if args.embed_sample > 0:
            sample = base[: args.embed_sample]
            t = time.perf_counter()
            real = embedder.embed(sample, batch_size=64)
            embedding.update(
                passages=len(sample),
                passages_per_s=round(len(sample) / (time.perf_counter() - t), 1),
            )
        else:
            real = np.load(DEMO_VECTORS)["vectors"].astype(np.float32)
            embedding["passage_vectors"] = "shipped demo-corpus vectors"
        result["embedding"] = embedding
        log(f"embedding: {embedding}")

    for n in sizes:
        for key, value in bench_size(
            n, engines, base, real, queries, qvecs, rng, args.chroma_budget_s
        ).items():
            result.setdefault(key, {})[str(n)] = value
    print(json.dumps(result))


if __name__ == "__main__":
    main()
