"""How well the R-Feedback model, and relevance alone, rank the pools rfm_rag itself built.

Reads the traces of ``gaprag eval`` runs of rfm_rag (each judged round records its pool: the
fact sentences, with the question's entities; calibration runs also record the answer that
round would have given) and labels every pool twice:

``complete``
    The pool holds a sentence matching each gold supporting fact. A pool sentence matches a
    gold sentence when their token F1 over content words (SQuAD normalisation, English
    function words of bm25s's list removed: :func:`content_f1`) is >= :data:`MATCH_F1`,
    against the gold sentence alone or prefixed by its paragraph's title (a condensed fact
    names its subject where the source sentence says "He").
    The gold sentences: HotpotQA and 2WikiMultihopQA ``supporting_facts`` ``[title, i]``,
    sentence ``i`` of that paragraph as :func:`.features.split_sentences` splits it; MuSiQue
    (paragraph-level labels) one fact per ``question_decomposition`` step, the sentences of
    its supporting paragraph that contain the step's answer (all of its sentences when none
    does).
``answer``
    The answer the method would have given from that pool (recorded at every decision of a
    ``calibration=true`` run; the final pool's is the run's prediction) scores F1 >=
    :data:`~.examples.ANSWER_F1`. Only traces whose every judged round carries its answer
    are labelled.

Each pool is scored by the R-Feedback weights (their calibrated ``p``) and by G_f alone, with
the weights' embedder, as the graph computes them (:func:`.features.featurize`). AUCs come
with 95% bootstrap intervals that resample questions (a question's rounds stay together).
Identical pools of the same question (two runs that built the same pool) count once.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gaprag.datasets import CALIBRATION_START
from gaprag.graphs.rfm_rag.feedback_model.features import Array, featurize, split_sentences
from gaprag.graphs.rfm_rag.feedback_model.model import RFeedbackMLP
from gaprag.metrics import accuracy, f1_score, normalize_answer, tokens
from gaprag.stores.embeddings import Embedder, embedder_by_name
from lab.rfm.examples import (
    ANSWER_F1,
    Sample,
    bundled_indices,
    graph_traces,
    pool_snapshots,
)
from lab.rfm.train import auc

MATCH_F1 = 0.5
"""A pool sentence matches a gold supporting sentence at token F1 >= this."""
LABELS: tuple[str, str] = ("complete", "answer")
SCORES: tuple[str, str, str] = ("mlp", "relevance", "coverage")
"""The R-Feedback model's p, G_f alone and S_f alone."""
BOOTSTRAP = 2000


@dataclass
class AuditPool:
    """One pool the graph judged (or answered from), with its labels."""

    dataset: str
    qid: str
    index: int | None  # the question's index in its bundled set
    round: int
    judged: bool
    sample: Sample
    complete: int | None
    answer_ok: int | None

    @property
    def group(self) -> str:
        if self.index is None:
            return "other"
        return "calibration" if self.index >= CALIBRATION_START else "evaluation"


def bundled_records() -> dict[tuple[str, str], tuple[int, dict[str, Any]]]:
    """(dataset, id) -> (index, record) for every bundled multi-hop set."""
    from gaprag.datasets import SUFFIX, data_dir

    out: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}
    for name in bundled_indices():
        lines = (data_dir() / f"{name}{SUFFIX}").read_text(encoding="utf-8").splitlines()
        for i, r in enumerate(json.loads(line) for line in lines if line.strip()):
            out.setdefault((name, str(r.get("id", ""))), (i, r))
    return out


def gold_facts(record: Mapping[str, Any]) -> list[list[str]]:
    """The gold supporting facts of a bundled record, each as the texts a pool sentence may
    match (see the module docstring); [] when the record has no sentence-level support."""
    meta = record.get("meta") or {}
    paragraphs = list(record.get("paragraphs") or [])
    by_title = {str(p.get("title", "")): str(p.get("text", "")) for p in paragraphs}
    facts: list[list[str]] = []
    if meta.get("supporting_facts"):
        for title, i in meta["supporting_facts"]:
            sentences = split_sentences(by_title.get(str(title), ""))
            if sentences:
                gold = sentences[min(int(i), len(sentences) - 1)]
                facts.append([gold, f"{title} {gold}"])
        return facts
    for step in meta.get("question_decomposition") or []:
        idx = step.get("paragraph_support_idx")
        if not isinstance(idx, int) or not 0 <= idx < len(paragraphs):
            continue
        title = str(paragraphs[idx].get("title", ""))
        sentences = split_sentences(str(paragraphs[idx].get("text", "")))
        hits = [s for s in sentences if accuracy(s, [str(step.get("answer", ""))])]
        facts.append([t for s in (hits or sentences) for t in (s, f"{title} {s}")])
    return facts


def content_tokens(text: str) -> Counter[str]:
    """SQuAD-normalised tokens of ``text`` without English function words (bm25s's list)."""
    from bm25s.stopwords import STOPWORDS_EN

    return Counter(t for t in tokens(normalize_answer(text)) if t not in STOPWORDS_EN)


def content_f1(a: str, b: str) -> float:
    """Token F1 of two sentences over their content words."""
    ta, tb = content_tokens(a), content_tokens(b)
    same = sum((ta & tb).values())
    if same == 0:
        return 0.0
    precision, recall = same / sum(ta.values()), same / sum(tb.values())
    return 2 * precision * recall / (precision + recall)


def matches(sentence: str, fact: Sequence[str], min_f1: float = MATCH_F1) -> bool:
    return max((content_f1(sentence, g) for g in fact), default=0.0) >= min_f1


def is_complete(
    sentences: Sequence[str], facts: Sequence[Sequence[str]], min_f1: float = MATCH_F1
) -> bool:
    """Every gold fact is matched by some pool sentence."""
    return all(any(matches(s, fact, min_f1) for s in sentences) for fact in facts)


def trace_pools(
    trace: Mapping[str, Any],
    record: tuple[int, dict[str, Any]] | None,
    min_f1: float = MATCH_F1,
) -> list[AuditPool]:
    """The labelled pools of one traced question: every judged round, then the final pool."""
    dataset, qid = str(trace.get("dataset", "")), str(trace.get("id", ""))
    facts = gold_facts(record[1]) if record else []
    golds = trace.get("answers") or []
    snaps = pool_snapshots(dict(trace))
    n_judged = sum(
        1
        for r in trace.get("trace") or []
        if isinstance(r, dict) and r.get("node") == "feedback_classifier" and "pool" in r
    )  # pool_snapshots lists the judged rounds first, then the final pool if it differs
    with_answers = all(s["answer"] is not None for s in snaps)
    entities = [str(e) for e in (trace.get("extra") or {}).get("entities") or []]
    out: list[AuditPool] = []
    for i, snap in enumerate(snaps):
        judged = i < n_judged
        sample = Sample(qid, str(trace.get("input", "")), entities, snap["sentences"], 0, "")
        answer_ok = int(f1_score(str(snap["answer"]), golds) >= ANSWER_F1) if with_answers else None
        complete = int(is_complete(snap["sentences"], facts, min_f1)) if facts else None
        index = record[0] if record else None
        out.append(
            AuditPool(dataset, qid, index, snap["round"], judged, sample, complete, answer_ok)
        )
    return out


def collect_pools(paths: Sequence[str | Path], min_f1: float = MATCH_F1) -> list[AuditPool]:
    """The labelled pools of every rfm_rag trace under ``paths`` (run folders, trace folders
    or files), identical pools of one question once."""
    records = bundled_records()
    seen: set[tuple[str, str, tuple[str, ...]]] = set()
    out: list[AuditPool] = []
    for trace in graph_traces(paths):
        key = (str(trace.get("dataset", "")), str(trace.get("id", "")))
        for pool in trace_pools(trace, records.get(key), min_f1):
            ident = (pool.dataset, pool.qid, tuple(pool.sample.sentences))
            if ident in seen or not pool.sample.sentences:
                continue
            seen.add(ident)
            out.append(pool)
    return out


def score_pools(pools: Sequence[AuditPool], weights: RFeedbackMLP, embedder: Embedder) -> Array:
    """``[n, 3]``: the weights' calibrated p, G_f and S_f of each pool."""
    if not pools:
        return np.zeros((0, 3))
    x = featurize([p.sample for p in pools], embedder, progress=False)
    return np.column_stack([weights.probs(x), x[:, 1], x[:, 0]])


def bootstrap_aucs(
    scores: Array, labels: Array, groups: Sequence[str], *, n: int = BOOTSTRAP, seed: int = 0
) -> dict[str, Any]:
    """AUC of each score column, and of the first minus the second, with 95% percentile
    intervals from ``n`` resamples of the groups (questions)."""
    point = [auc(scores[:, j], labels) for j in range(scores.shape[1])]
    names = np.asarray(groups)
    unique = np.unique(names)
    rows = {g: np.flatnonzero(names == g) for g in unique}
    rng = np.random.default_rng(seed)
    draws: list[list[float]] = []
    for _ in range(n):
        idx = np.concatenate([rows[g] for g in rng.choice(unique, size=len(unique))])
        y = labels[idx]
        if y.min() == y.max():
            continue
        draws.append([auc(scores[idx, j], y) for j in range(scores.shape[1])])
    arr = np.asarray(draws) if draws else np.full((1, scores.shape[1]), np.nan)

    def interval(values: Array) -> list[float]:
        return [
            round(float(np.percentile(values, 2.5)), 3),
            round(float(np.percentile(values, 97.5)), 3),
        ]

    out: dict[str, Any] = {}
    for j, name in enumerate(SCORES[: scores.shape[1]]):
        out[name] = {"auc": round(point[j], 3), "ci95": interval(arr[:, j])}
    out["mlp_minus_relevance"] = {
        "auc": round(point[0] - point[1], 3),
        "ci95": interval(arr[:, 0] - arr[:, 1]),
    }
    out["bootstrap"] = {"resamples": len(draws), "unit": "question"}
    return out


def label_report(
    pools: Sequence[AuditPool], scores: Array, label: str, *, n: int = BOOTSTRAP, seed: int = 0
) -> dict[str, Any] | None:
    """Counts and AUCs of one label over ``pools`` (those that have it)."""
    keep = [i for i, p in enumerate(pools) if _label(p, label) is not None]
    if not keep:
        return None
    y = np.asarray([_label(pools[i], label) for i in keep], dtype=np.float64)
    questions = [f"{pools[i].dataset}/{pools[i].qid}" for i in keep]
    out: dict[str, Any] = {
        "pools": len(keep),
        "questions": len(set(questions)),
        "positive": int(y.sum()),
        "negative": int(len(y) - y.sum()),
    }
    if 0 < y.sum() < len(y):
        out.update(bootstrap_aucs(scores[keep], y, questions, n=n, seed=seed))
    return out


def _label(pool: AuditPool, label: str) -> int | None:
    return pool.complete if label == "complete" else pool.answer_ok


def audit(
    paths: Sequence[str | Path],
    weights: str | Path | None = None,
    *,
    include_final: bool = False,
    min_f1: float = MATCH_F1,
    n: int = BOOTSTRAP,
    seed: int = 0,
) -> dict[str, Any]:
    """The report: per question group (calibration questions 60+, evaluation questions, all)
    and label, the pools' counts and the AUCs of the R-Feedback p, G_f and S_f."""
    model = RFeedbackMLP.load(weights)
    embedder = embedder_by_name(model.embedder)
    pools = [p for p in collect_pools(paths, min_f1) if p.judged or include_final]
    scores = score_pools(pools, model, embedder)
    report: dict[str, Any] = {
        "runs": [str(p) for p in paths],
        "weights": str(weights or "shipped"),
        "embedder": model.embedder,
        "pools": "judged rounds and final pools" if include_final else "judged rounds",
        "match_rule": f"content-word token F1 >= {min_f1} with the gold sentence "
        "(or title + sentence)",
        "answer_rule": f"the round's recorded answer scores F1 >= {ANSWER_F1}",
        "groups": {},
    }
    for group in ("calibration", "evaluation", "all"):
        idx = [i for i, p in enumerate(pools) if group == "all" or p.group == group]
        if not idx:
            continue
        chosen = [pools[i] for i in idx]
        report["groups"][group] = {
            label: label_report(chosen, scores[idx], label, n=n, seed=seed) for label in LABELS
        }
    return report
