"""Calibrate the default threshold delta of MIGRES's knowledge filter.

Held-out data: the questions from index 60 on (``--start``, at least 60) of each bundled
multi-hop dev file (HotpotQA and 2WikiMultiHopQA). Questions 0-49 are the reported evaluation
questions and 50-59 a buffer: the script refuses any overlap (``calibration_slice`` in
gaprag/eval/datasets.py). Each question comes with about 10 paragraphs, 2-4 of them gold
supporting facts and the rest distractors. Every (question, paragraph) pair is scored with the
filter's scorer, and delta is the threshold that maximises the F1 of "score >= delta" against
"paragraph is gold-supporting". For reference the script also reports the paper's rule (the
largest delta for which at least 80% of questions keep a paragraph) and the precision/recall
at the current default.

    python benchmarks/calibrate_migres_filter.py                    # MiniLM cosine (default)
    python benchmarks/calibrate_migres_filter.py --reranker PATH    # a local CrossEncoder
    python benchmarks/calibrate_migres_filter.py --embedder hashing # a model-free dry run

Write the chosen value into ``DEFAULT_EMBEDDING_DELTA`` in gaprag/graphs/migres/filter.py (or
pass ``--set migres.delta=...`` for a cross-encoder). The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from gaprag.errors import GapragError
from gaprag.eval.datasets import CALIBRATION_START, calibration_slice
from gaprag.graphs.migres.filter import (
    DEFAULT_EMBEDDING_DELTA,
    CrossEncoderScorer,
    EmbeddingScorer,
    ScoreDoc,
    Scorer,
)
from gaprag.stores.embeddings import HashingEmbedder, default_embedder

DATA = Path(__file__).resolve().parent.parent / "gaprag" / "data" / "eval"
DATASETS = ("hotpotqa.dev.jsonl", "2wikimultihopqa.dev.jsonl")


def held_out(path: Path, start: int, limit: int | None = None) -> list[dict[str, Any]]:
    """Questions ``start`` .. ``start + limit - 1`` of a file; refuses the reported questions."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return calibration_slice(rows, start, limit, what=f"calibration on {path.name}")


def score_pairs(scorer: Scorer, rows: list[dict[str, Any]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per question: (scores, gold labels) over its paragraphs."""
    out = []
    for row in rows:
        paragraphs = row["paragraphs"]
        docs = [ScoreDoc(id="", title=p.get("title", ""), text=p["text"]) for p in paragraphs]
        gold = set(row.get("supporting") or [])
        labels = np.array([p["id"] in gold for p in paragraphs], dtype=bool)
        out.append((np.asarray(scorer.score(row["question"], docs), dtype=float), labels))
    return out


def prf(
    scores: np.ndarray, labels: np.ndarray, delta: float, questions: int = 1
) -> dict[str, float]:
    kept = scores >= delta
    tp = float(np.sum(kept & labels))
    precision = tp / max(1.0, float(np.sum(kept)))
    recall = tp / max(1.0, float(np.sum(labels)))
    f1 = 0.0 if tp == 0 else 2 * precision * recall / (precision + recall)
    return {
        "delta": round(delta, 4),
        "f1": round(f1, 4),
        "precision": round(precision, 4),
        "recall": round(recall, 4),
        "kept_per_question": round(float(np.sum(kept)) / max(1, questions), 3),
    }


def best_f1(per_q: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, float]:
    scores = np.concatenate([s for s, _ in per_q])
    labels = np.concatenate([g for _, g in per_q])
    best: dict[str, float] = {"f1": -1.0}
    for delta in np.unique(scores):
        cur = prf(scores, labels, float(delta), len(per_q))
        if cur["f1"] > best["f1"]:
            best = cur
    return best


def coverage_delta(per_q: list[tuple[np.ndarray, np.ndarray]], target: float = 0.8) -> float:
    """The paper's rule: the largest delta with >= target of questions keeping a paragraph."""
    tops = np.sort([float(np.max(s)) for s, _ in per_q if len(s)])[::-1]
    k = max(1, int(np.ceil(target * len(tops))))
    return round(float(tops[k - 1]), 4)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--start",
        type=int,
        default=CALIBRATION_START,
        help=f"first held-out question index (>= {CALIBRATION_START}; 0-49 are the evaluation's)",
    )
    ap.add_argument("--limit", type=int, help="at most this many held-out questions per dataset")
    ap.add_argument(
        "--reranker", default="", help="path of a local sentence-transformers CrossEncoder"
    )
    ap.add_argument("--embedder", choices=["minilm", "hashing"], default="minilm")
    ap.add_argument("--datasets", default=",".join(DATASETS), help="files under gaprag/data/eval")
    args = ap.parse_args(argv)
    try:
        for name in args.datasets.split(","):  # refuse an overlap before loading any model
            held_out(DATA / name.strip(), args.start, args.limit)
    except GapragError as exc:
        print(f"error: {exc} ({exc.hint})", file=sys.stderr)
        return 2

    scorer: Scorer
    if args.reranker:
        scorer = CrossEncoderScorer(args.reranker)
    elif args.embedder == "hashing":
        scorer = EmbeddingScorer(HashingEmbedder())
    else:
        scorer = EmbeddingScorer(default_embedder())
    start = time.perf_counter()
    per_dataset: dict[str, Any] = {}
    everything: list[tuple[np.ndarray, np.ndarray]] = []
    for name in args.datasets.split(","):
        rows = held_out(DATA / name.strip(), args.start, args.limit)
        per_q = score_pairs(scorer, rows)
        everything += per_q
        per_dataset[name] = {
            "questions": len(rows), "best": best_f1(per_q), "coverage80_delta": coverage_delta(per_q),
        }  # fmt: skip
        print(f"{name}: {per_dataset[name]}", file=sys.stderr)
    scores = np.concatenate([s for s, _ in everything])
    labels = np.concatenate([g for _, g in everything])
    result = {
        "scorer": scorer.name,
        "held_out": f"questions from index {args.start} on"
        + (f" (at most {args.limit})" if args.limit else "")
        + " of each dataset",
        "questions": len(everything),
        "pairs": len(scores),
        "gold_share": round(float(np.mean(labels)), 4),
        "best": best_f1(everything),
        "coverage80_delta": coverage_delta(everything),
        "at_current_default": (
            None if args.reranker else prf(scores, labels, DEFAULT_EMBEDDING_DELTA, len(everything))
        ),
        "per_dataset": per_dataset,
        "wall_s": round(time.perf_counter() - start, 2),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
