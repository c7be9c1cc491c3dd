"""Retrieval benchmark: index build time and query latency (p50, p95) at 1k, 10k and 100k passages.

Engines: BM25 (bm25s and rank_bm25), Chroma (embedded, HNSW cosine) and hybrid (bm25s + Chroma
fused by reciprocal rank). Passages are the bundled datasets' paragraphs, repeated with a
distinguishing suffix up to the target size. Embedding is measured separately on a real sample
(MiniLM, passages/s); Chroma is built from vectors derived from those real embeddings (plus small
noise for the repeats), so build and search times exclude embedding. Query latency for Chroma
and hybrid excludes the query embedding, which is reported as ``embed_query_ms``.

    python benchmarks/retrieval.py [--sizes 1000,10000,100000] [--queries 200]

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
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
from gaprag.stores.dense import DenseIndex, make_client
from gaprag.stores.embeddings import default_embedder
from gaprag.stores.hybrid import rrf

DATA = Path(__file__).resolve().parent.parent / "gaprag" / "data" / "eval"


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
    lat = []
    for q in queries:
        t = time.perf_counter()
        fn(q)
        lat.append((time.perf_counter() - t) * 1000)
    return {
        "query_p50_ms": round(pct(lat, 50), 3),
        "query_p95_ms": round(pct(lat, 95), 3),
        "query_mean_ms": round(statistics.fmean(lat), 3),
    }


def bench_size(
    n: int, base: list[str], real: Any, queries: list[str], qvecs: Any, rng: np.random.Generator
) -> dict[str, dict[str, float]]:
    texts = [
        base[i % len(base)] + ("" if i < len(base) else f" variant{i // len(base)}")
        for i in range(n)
    ]
    vecs = real[np.arange(n) % len(real)] + 0.05 * rng.standard_normal((n, real.shape[1])).astype(
        np.float32
    )
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    ids = [f"p{i}" for i in range(n)]
    out: dict[str, dict[str, float]] = {}
    indexes: dict[str, BM25Index] = {}
    for engine in ("bm25s", "rank_bm25"):
        t = time.perf_counter()
        index = BM25Index.build(texts, engine)  # type: ignore[arg-type]
        build = time.perf_counter() - t
        sample = (
            queries if engine == "bm25s" or n <= 10000 else queries[:50]
        )  # rank_bm25 is O(N) per query
        out[engine] = {
            "build_s": round(build, 3),
            **timed(lambda s, ix=index: ix.search(s, 10), sample),
        }
        indexes[engine] = index
    bm25s_index = indexes["bm25s"]
    tmp = Path(tempfile.mkdtemp(prefix="gaprag-bench-"))
    try:
        client = make_client(tmp / "chroma")
        t = time.perf_counter()
        dense = DenseIndex.create(client, f"bench-{n}", ids, vecs)
        build = time.perf_counter() - t
        out["chroma"] = {
            "build_s": round(build, 3),
            **timed(lambda v: dense.search(v, 10), list(qvecs)),
        }

        def hybrid(i: int) -> None:
            sparse = [ids[r] for r, _ in bm25s_index.search(queries[i], 20)]
            near = [d for d, _ in dense.search(qvecs[i], 20)]
            rrf([sparse, near])

        out["hybrid"] = {
            "build_s": round(out["bm25s"]["build_s"] + build, 3),
            **timed(hybrid, list(range(len(queries)))),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--embed-sample", type=int, default=1000)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    base, questions = corpus_and_questions()
    rng = np.random.default_rng(0)
    queries = [
        questions[i]
        for i in rng.choice(len(questions), size=min(args.queries, len(questions)), replace=False)
    ]

    embedder = default_embedder()
    embedder.embed(["warm up"])
    sample = base[: args.embed_sample]
    t = time.perf_counter()
    real = embedder.embed(sample, batch_size=64)
    embed_s = time.perf_counter() - t
    t = time.perf_counter()
    qvecs = embedder.embed(queries, batch_size=1)
    embed_query_ms = (time.perf_counter() - t) * 1000 / len(queries)
    embedding = {
        "model": embedder.name,
        "passages": len(sample),
        "passages_per_s": round(len(sample) / embed_s, 1),
        "embed_query_ms": round(embed_query_ms, 2),
    }
    print(f"embedding: {embedding}", file=sys.stderr, flush=True)

    result: dict[str, Any] = {
        "bm25s": {},
        "rank_bm25": {},
        "chroma": {},
        "hybrid": {},
        "embedding": embedding,
    }
    for n in sizes:
        for key, value in bench_size(n, base, real, queries, qvecs, rng).items():
            result[key][str(n)] = value
            print(f"{key} {n}: {value}", file=sys.stderr, flush=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
