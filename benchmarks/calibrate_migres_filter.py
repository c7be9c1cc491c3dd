"""Calibrate the threshold delta of MIGRES's knowledge filter on held-out questions.

Held-out data: questions from index 60 on (``--start``, at least 60) of the bundled multi-hop
dev files (HotpotQA, 2WikiMultiHopQA, MuSiQue). Questions 0-49 are the reported evaluation
questions and 50-59 a buffer: the script refuses any overlap (``calibration_slice`` in
gaprag/datasets.py) before it loads a model, and its corpus holds only the paragraphs of
held-out questions.

What it simulates is round 1 of the graph, per question: BM25 top-``n_retrieve`` (50) over
the held-out paragraphs of the dataset (the evaluation's corpus is likewise the dataset's
paragraph union), the real knowledge filter (``filter.knowledge_filter``: passage level, then
sentence level) at each delta of a grid, and the extractor's display cap (the ``top_k`` = 5
best snippets of at least 5 words). For each delta it reports

* ``gold_shown``: share of gold-supporting paragraphs that reach the extractor;
* ``all_gold_shown``: share of questions whose gold paragraphs all reach it;
* ``answer_shown``: share of questions (whose answer string occurs in a gold paragraph) where
  the shown snippet text still contains the answer (sentence-level cuts included);
* ``shown`` / ``shown_words``: snippets and words shown per question; ``empty``: share of
  questions where nothing clears delta (the LLM-knowledge fallback would run).

The recommended delta is the **largest delta that loses at most ``--max-loss`` (5%) of the
gold the display cap alone would show** (``gold_shown`` at no threshold). The cap already
bounds what the extractor reads, so the threshold should drop only what is clearly
irrelevant: a gold passage lost costs the small model a round or the answer, a distractor
shown costs some tokens that extraction and verification filter. For reference it also prints
the former objective (the delta maximising F1 of "score >= delta" over each question's own
paragraphs, gold against distractors) and the paper's rule (the largest delta for which at
least 80% of questions keep a passage).

    nice -n 19 python benchmarks/calibrate_migres_filter.py --limit 40   # MiniLM cosine
    python benchmarks/calibrate_migres_filter.py --reranker PATH         # a local CrossEncoder
    python benchmarks/calibrate_migres_filter.py --embedder hashing      # a model-free dry run

``--out FILE`` writes the result as JSON (benchmarks/results_migres_calibration.json holds the
committed run); the last line printed is the same JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gaprag.datasets import CALIBRATION_START, calibration_slice
from gaprag.errors import GapragError
from gaprag.graphs.migres.filter import (
    DEFAULT_EMBEDDING_DELTA,
    CrossEncoderScorer,
    EmbeddingScorer,
    ScoreDoc,
    Scorer,
    knowledge_filter,
)
from gaprag.state.base import Evidence
from gaprag.stores.bm25 import BM25Index
from gaprag.stores.embeddings import HashingEmbedder, default_embedder

DATA = Path(__file__).resolve().parent.parent / "gaprag" / "data" / "eval"
DATASETS = ("hotpotqa.dev.jsonl", "2wikimultihopqa.dev.jsonl", "musique.dev.jsonl")
GRID = [round(0.20 + 0.01 * i, 2) for i in range(41)]  # 0.20 .. 0.60 (cosine)
NO_THRESHOLD = float("-inf")


class CachedScorer:
    """Memoises (query, title, text) -> score, so the grid re-uses every score."""

    def __init__(self, inner: Scorer) -> None:
        self.inner = inner
        self.name = inner.name
        self.cache: dict[tuple[str, str, str], float] = {}

    def score(self, query: str, docs: Sequence[ScoreDoc]) -> list[float]:
        keys = [(query, d["title"], d["text"]) for d in docs]
        todo = [i for i, k in enumerate(keys) if k not in self.cache]
        if todo:
            fresh = self.inner.score(query, [docs[i] for i in todo])
            for i, s in zip(todo, fresh, strict=True):
                self.cache[keys[i]] = s
        return [self.cache[k] for k in keys]


def held_out(path: Path, start: int, limit: int | None = None) -> list[dict[str, Any]]:
    """Questions ``start`` .. ``start + limit - 1`` of a file; refuses the reported questions."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return calibration_slice(rows, start, limit, what=f"calibration on {path.name}")


def corpus(rows: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    """The paragraph union of ``rows`` (held-out questions only), de-duplicated by id."""
    seen: dict[str, dict[str, str]] = {}
    for row in rows:
        for p in row["paragraphs"]:
            seen.setdefault(
                p["id"], {"id": p["id"], "title": p.get("title", ""), "text": p["text"]}
            )
    return list(seen.values())


def _answer_in_gold(row: dict[str, Any]) -> list[str]:
    """The answer strings worth looking for: not yes/no, and present in a gold paragraph."""
    gold = set(row.get("supporting") or [])
    texts = " ".join(p["text"].lower() for p in row["paragraphs"] if p["id"] in gold)
    answers = [str(a).strip().lower() for a in row.get("answers") or []]
    return [a for a in answers if len(a) > 1 and a not in ("yes", "no") and a in texts]


def shown_at(
    candidates: list[Evidence], question: str, scorer: Scorer, delta: float, top_k: int,
    min_words: int, passage_scores: list[float],
) -> list[Any]:  # fmt: skip
    """The snippets the extractor would see in round 1 at ``delta``."""
    order = sorted(range(len(candidates)), key=lambda i: -passage_scores[i])
    above = [candidates[i] for i in order if passage_scores[i] >= delta][: 2 * top_k]
    snippets, _ = knowledge_filter(
        above, [question], scorer, delta=delta, seen_counts={}, sentence_filter=True
    )
    return [s for s in snippets if len(s["text"].split()) >= min_words][:top_k]


def simulate(
    rows: list[dict[str, Any]], docs: list[dict[str, str]], scorer: Scorer, *, n_retrieve: int,
    top_k: int, min_words: int,
) -> list[dict[str, Any]]:  # fmt: skip
    """Per question: gold ids, BM25 recall, and per delta what reaches the extractor."""
    index = BM25Index.build([f"{d['title']} {d['text']}" for d in docs])
    out = []
    for row in rows:
        hits = index.search(row["question"], n_retrieve)
        candidates = [
            Evidence(id=docs[r]["id"], title=docs[r]["title"], text=docs[r]["text"],
                     source="bm25", score=s, round=1)
            for r, s in hits
        ]  # fmt: skip
        score_docs = [ScoreDoc(id="", title=c["title"], text=c["text"]) for c in candidates]
        passage_scores = scorer.score(row["question"], score_docs)
        gold = set(row.get("supporting") or [])
        answers = _answer_in_gold(row)
        per_delta = {}
        for delta in [NO_THRESHOLD, *GRID]:
            shown = shown_at(
                candidates, row["question"], scorer, delta, top_k, min_words, passage_scores
            )
            text = " ".join(s["text"] for s in shown).lower()
            per_delta[delta] = {
                "gold": len(gold & {s["id"] for s in shown}),
                "answer": any(a in text for a in answers) if answers else None,
                "shown": len(shown),
                "words": len(text.split()),
                "empty": not any(s >= delta for s in passage_scores),
            }
        out.append({
            "gold": len(gold), "bm25_gold": len(gold & {c["id"] for c in candidates}),
            "has_answer": bool(answers), "per_delta": per_delta,
        })  # fmt: skip
    return out


def summarise(sim: list[dict[str, Any]], delta: float) -> dict[str, Any]:
    rows = [q["per_delta"][delta] for q in sim]
    gold = sum(q["gold"] for q in sim)
    with_answer = [r["answer"] for r in rows if r["answer"] is not None]
    return {
        "delta": None if delta == NO_THRESHOLD else delta,
        "gold_shown": round(sum(r["gold"] for r in rows) / max(1, gold), 4),
        "all_gold_shown": round(
            sum(r["gold"] == q["gold"] for r, q in zip(rows, sim, strict=True)) / len(sim), 4
        ),
        "answer_shown": round(sum(with_answer) / max(1, len(with_answer)), 4),
        "shown": round(sum(r["shown"] for r in rows) / len(sim), 3),
        "shown_words": round(sum(r["words"] for r in rows) / len(sim), 1),
        "empty": round(sum(r["empty"] for r in rows) / len(sim), 4),
    }


def recommend(table: list[dict[str, Any]], max_loss: float) -> dict[str, Any]:
    """The largest delta whose gold_shown is within ``max_loss`` of the uncut display's."""
    base = table[0]["gold_shown"]
    ok = [r for r in table[1:] if r["gold_shown"] >= (1 - max_loss) * base]
    return max(ok, key=lambda r: r["delta"]) if ok else table[1]


# -- the former objective, for reference -----------------------------------------------------
def pairwise(rows: list[dict[str, Any]], scorer: Scorer) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per question: (scores, gold labels) over its own paragraphs."""
    out = []
    for row in rows:
        paragraphs = row["paragraphs"]
        docs = [ScoreDoc(id="", title=p.get("title", ""), text=p["text"]) for p in paragraphs]
        gold = set(row.get("supporting") or [])
        labels = np.array([p["id"] in gold for p in paragraphs], dtype=bool)
        out.append((np.asarray(scorer.score(row["question"], docs), dtype=float), labels))
    return out


def prf(scores: np.ndarray, labels: np.ndarray, delta: float) -> dict[str, float]:
    kept = scores >= delta
    tp = float(np.sum(kept & labels))
    precision = tp / max(1.0, float(np.sum(kept)))
    recall = tp / max(1.0, float(np.sum(labels)))
    f1 = 0.0 if tp == 0 else 2 * precision * recall / (precision + recall)
    return {"delta": round(delta, 4), "f1": round(f1, 4), "precision": round(precision, 4),
            "recall": round(recall, 4)}  # fmt: skip


def best_f1(per_q: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, float]:
    scores = np.concatenate([s for s, _ in per_q])
    labels = np.concatenate([g for _, g in per_q])
    best: dict[str, float] = {"f1": -1.0}
    for delta in np.unique(scores):
        cur = prf(scores, labels, float(delta))
        if cur["f1"] > best["f1"]:
            best = cur
    return best


def coverage_delta(top_scores: list[float], target: float = 0.8) -> float:
    """The paper's rule: the largest delta with >= target of questions keeping a passage
    (``top_scores``: each question's best paragraph score)."""
    tops = np.sort(np.asarray(top_scores))[::-1]
    k = max(1, int(np.ceil(target * len(tops))))
    return round(float(tops[k - 1]), 4)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--start", type=int, default=CALIBRATION_START,
        help=f"first held-out question index (>= {CALIBRATION_START}; 0-49 are the evaluation's)",
    )  # fmt: skip
    ap.add_argument("--limit", type=int, default=40, help="held-out questions per dataset")
    ap.add_argument(
        "--reranker", default="", help="path of a local sentence-transformers CrossEncoder"
    )
    ap.add_argument("--embedder", choices=["minilm", "hashing"], default="minilm")
    ap.add_argument("--datasets", default=",".join(DATASETS), help="files under gaprag/data/eval")
    ap.add_argument("--n-retrieve", type=int, default=50, help="BM25 candidates per question")
    ap.add_argument("--top-k", type=int, default=5, help="snippets shown to the extractor")
    ap.add_argument(
        "--max-loss", type=float, default=0.05, help="share of shown gold delta may lose"
    )
    ap.add_argument("--out", help="also write the result JSON here")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.datasets.split(",") if n.strip()]
    try:  # refuse an overlap with the reported questions before loading any model
        sets = {n: (held_out(DATA / n, args.start, args.limit), held_out(DATA / n, args.start))
                for n in names}  # fmt: skip
    except GapragError as exc:
        print(f"error: {exc} ({exc.hint})", file=sys.stderr)
        return 2

    inner: Scorer
    if args.reranker:
        inner = CrossEncoderScorer(args.reranker)
    elif args.embedder == "hashing":
        inner = EmbeddingScorer(HashingEmbedder())
    else:
        inner = EmbeddingScorer(default_embedder())
    scorer = CachedScorer(inner)
    start, cpu = time.perf_counter(), time.process_time()
    everything: list[dict[str, Any]] = []
    pairs: list[tuple[np.ndarray, np.ndarray]] = []
    per_dataset: dict[str, Any] = {}
    for name, (rows, all_held_out) in sets.items():
        sim = simulate(
            rows, corpus(all_held_out), scorer, n_retrieve=args.n_retrieve, top_k=args.top_k,
            min_words=5,
        )  # fmt: skip
        everything += sim
        pairs += pairwise(rows, scorer)
        table = [summarise(sim, d) for d in [NO_THRESHOLD, *GRID]]
        per_dataset[name] = {
            "questions": len(rows),
            "bm25_gold_recall": round(
                sum(q["bm25_gold"] for q in sim) / max(1, sum(q["gold"] for q in sim)), 4
            ),
            "no_threshold": table[0],
            "recommended": recommend(table, args.max_loss),
        }
        print(f"{name}: {per_dataset[name]}", file=sys.stderr)
    table = [summarise(everything, d) for d in [NO_THRESHOLD, *GRID]]
    rec = recommend(table, args.max_loss)
    default = DEFAULT_EMBEDDING_DELTA
    result = {
        "scorer": scorer.name,
        "held_out": f"questions {args.start}..{args.start + args.limit - 1} of each dataset; "
        f"corpus: the paragraphs of questions from {args.start} on",
        "datasets": names,
        "questions": len(everything),
        "setting": {
            "n_retrieve": args.n_retrieve,
            "top_k": args.top_k,
            "min_words": 5,
            "query": "the question (round 1)",
            "max_loss": args.max_loss,
        },
        "bm25_gold_recall": round(
            sum(q["bm25_gold"] for q in everything) / max(1, sum(q["gold"] for q in everything)), 4
        ),
        "recommended": rec,
        "no_threshold": table[0],
        "at_current_default": next((r for r in table if r["delta"] == round(default, 2)), None),
        "grid": table[1:],
        "reference": {
            "f1_best_own_paragraphs": best_f1(pairs),
            "coverage80_delta": coverage_delta([float(np.max(s)) for s, _ in pairs if len(s)]),
        },
        "per_dataset": per_dataset,
        "wall_s": round(time.perf_counter() - start, 1),
        "cpu_s": round(time.process_time() - cpu, 1),
    }
    text = json.dumps(result)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
