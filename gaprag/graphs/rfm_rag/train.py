"""Training data and training for the R-Feedback Model (adapted to gaprag's data;
see docs/methods/rfm_rag.md).

Two sources of labelled ``(question, entities, pool)`` examples:

``paragraphs`` (the default, no LLM needed; the paper's recipe on our data). The bundled
multi-hop sets (``gaprag/data/eval``) give each question its paragraphs and the ids of the
supporting ones:

* ``sufficient`` (y=1): every sentence of every supporting paragraph, shuffled;
* ``partial`` (y=0): the sentences of a non-empty proper subset of the supporting paragraphs,
  plus sentences from distractor paragraphs, to about the same length;
* ``irrelevant`` (y=0): only distractor sentences, the same number as the positive has.

Half the examples are positive, a quarter of each negative kind; the question's entities come
from a capitalised-span heuristic.

``graph_pools``: the pools the graph itself built, read from the traces of ``gaprag eval``
runs of rfm_rag on calibration questions (index >= 60): each judged round's pool (curated
fact sentences, the LLM's entities) and the final pool, labelled ``support`` (every gold
supporting paragraph is behind some pool fact) or ``answer`` (the answer the method would have
given from that pool, recorded at every decision of a ``calibration`` run, scores F1 >= 0.5).
These are the inputs the model sees at run time.

Questions are split into train / validation (early stopping) / calibration (Platt scaling) /
test (the reported held-out metrics), disjoint. No evaluation question is ever used: bundled
sets are read from :data:`~gaprag.datasets.CALIBRATION_START` on
(:func:`~gaprag.datasets.calibration_slice`), and every record, whatever its source, is
matched by id and question text against the bundled sets and refused by
:func:`~gaprag.datasets.check_no_overlap` if it is one of their first questions.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import numpy as np

from gaprag.datasets import CALIBRATION_START, calibration_slice, check_no_overlap
from gaprag.errors import GapragError, InputError
from gaprag.graphs.rfm_rag.features import (
    FEATURE_NAMES,
    LengthUnit,
    coverage_map,
    heuristic_entities,
    relevance_from_vectors,
    split_sentences,
    syntactic_coverage,
)
from gaprag.graphs.rfm_rag.model import (
    METRICS_FILE,
    WEIGHTS_FILE,
    Array,
    RFeedbackMLP,
    fit_platt,
    monotonicity_violations,
)
from gaprag.metrics import f1_score
from gaprag.stores.embeddings import Embedder
from gaprag.traces import iter_traces

Kind = Literal["sufficient", "partial", "irrelevant"]
Source = Literal["paragraphs", "graph_pools"]
PoolLabel = Literal["support", "answer"]
DEFAULT_DATASETS: tuple[str, ...] = ("hotpotqa", "2wikimultihopqa", "musique")
EVAL_RESERVED = CALIBRATION_START
"""Questions 0-59 of every bundled set are reserved for evaluation: never trained on."""
DEFAULT_SKIP_FIRST = EVAL_RESERVED
DEFAULT_MONOTONE: tuple[str, ...] = FEATURE_NAMES
"""The probability is non-decreasing in both features (coverage and relevance)."""
LR = 3e-3
PATIENCE = 10
MAX_EPOCHS = 100
"""Optimiser settings (the paper's are in its missing Appendix A). The monotone model needs
more steps than the unconstrained one to reach its fit: with lr 1e-3 and patience 5 it stopped
early, underfitted, below a plain logistic regression on the same features."""
MIN_STEPS = 2000
"""Without an explicit epoch count, train for at least this many optimiser steps: 100 epochs
of the ~80 pools of a small calibration run are only 200 steps, after which the model has
barely moved and its Platt scaling comes out flat (every probability the same). Early stopping
still ends a run whose validation loss stops falling."""
BATCH_SIZE = 64


def epoch_budget(n_train: int, epochs: int | None = None, batch_size: int = BATCH_SIZE) -> int:
    """The maximum epochs of a training run: ``epochs`` when given, else :data:`MAX_EPOCHS` or
    as many as :data:`MIN_STEPS` optimiser steps take on ``n_train`` examples, whichever is
    more."""
    if epochs is not None:
        return epochs
    batches = max(1, math.ceil(n_train / batch_size))
    return max(MAX_EPOCHS, math.ceil(MIN_STEPS / batches))


CV_FOLDS = 5
ANSWER_F1 = 0.5
"""``answer`` label: the pool is sufficient when the answer given from it has F1 >= this."""


@dataclass
class QuestionMaterial:
    qid: str
    question: str
    entities: list[str]
    support: list[list[str]]  # sentences of each supporting paragraph
    distractors: list[str]  # sentences of non-supporting paragraphs

    @property
    def support_sentences(self) -> list[str]:
        return [s for para in self.support for s in para]


@dataclass
class Sample:
    qid: str
    question: str
    entities: list[str]
    sentences: list[str]
    label: int
    kind: str  # paragraphs: sufficient / partial / irrelevant; graph pools: round1, round2...


@dataclass
class Dataset:
    train: list[Sample]
    val: list[Sample]
    test: list[Sample] = field(default_factory=list)
    cal: list[Sample] = field(default_factory=list)
    """Held-out questions for the Platt calibration (neither trained on nor reported)."""


# -- loading ------------------------------------------------------------------------------
def load_records(name: str, *, skip_first: int = DEFAULT_SKIP_FIRST) -> list[dict[str, Any]]:
    """Records of a bundled eval set (``hotpotqa``...) from index ``skip_first`` on (the
    shared :func:`~gaprag.datasets.calibration_slice`: refused below 60), or of a JSONL
    path after its first ``skip_first`` (its records are checked by content in training)."""
    path = Path(name)
    if path.suffix == ".jsonl" and path.is_file():
        lines = path.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()][skip_first:]
    res = resources.files("gaprag.data") / "eval" / f"{name}.dev.jsonl"
    if not res.is_file():
        raise GapragError(
            f"no bundled multi-hop set {name!r}",
            hint="use hotpotqa, 2wikimultihopqa, musique or a JSONL path",
        )
    text = res.read_text(encoding="utf-8")
    records = [json.loads(line) for line in text.splitlines() if line.strip()]
    if skip_first >= len(records) >= CALIBRATION_START:
        return []
    return calibration_slice(records, start=skip_first, what="R-Feedback training")


def question_material(
    record: dict[str, Any],
    *,
    entity_fn: Callable[[str], list[str]] = heuristic_entities,
    max_distractor_paragraphs: int = 6,
    rng: random.Random | None = None,
) -> QuestionMaterial | None:
    """Supporting and distractor sentences of one record; None if it has < 2 supporting
    paragraphs or no distractors (a partial pool needs both)."""
    supporting = set(record.get("supporting") or [])
    support: list[list[str]] = []
    others: list[list[str]] = []
    for para in record.get("paragraphs") or []:
        sentences = split_sentences(str(para.get("text", "")))
        if not sentences:
            continue
        (support if para.get("id") in supporting else others).append(sentences)
    if len(support) < 2 or not others:
        return None
    if rng is not None and len(others) > max_distractor_paragraphs:
        others = rng.sample(others, max_distractor_paragraphs)
    else:
        others = others[:max_distractor_paragraphs]
    question = str(record["question"])
    return QuestionMaterial(
        qid=str(record.get("id", question)),
        question=question,
        entities=entity_fn(question),
        support=support,
        distractors=[s for para in others for s in para],
    )


def _question_key(text: str) -> str:
    return " ".join(str(text).split()).casefold()


def bundled_indices() -> dict[str, tuple[dict[str, int], dict[str, int]]]:
    """For every bundled set: (id -> index, normalised question text -> first index)."""
    from gaprag.datasets import SUFFIX, bundled, data_dir

    out: dict[str, tuple[dict[str, int], dict[str, int]]] = {}
    for name in bundled():
        lines = (data_dir() / f"{name}{SUFFIX}").read_text(encoding="utf-8").splitlines()
        by_id: dict[str, int] = {}
        by_text: dict[str, int] = {}
        for i, r in enumerate(json.loads(line) for line in lines if line.strip()):
            if r.get("id"):
                by_id.setdefault(str(r["id"]), i)
            if r.get("question"):
                by_text.setdefault(_question_key(r["question"]), i)
        out[name] = (by_id, by_text)
    return out


def refuse_evaluation_questions(records: Sequence[dict[str, Any]]) -> None:
    """Raise :class:`InputError` if any record is one of the reserved questions (index < 60)
    of a bundled set, matched by id or by question text (so a renamed copy is caught too);
    the refusal is the shared one, :func:`gaprag.datasets.check_no_overlap`."""
    indices: dict[str, list[int]] = {}
    for name, (by_id, by_text) in bundled_indices().items():
        for r in records:
            i = by_id.get(str(r.get("id", "")))
            if i is None:
                i = by_text.get(_question_key(r.get("question", "")))
            if i is not None:
                indices.setdefault(name, []).append(i)
    for name, found in indices.items():
        check_no_overlap(found, what=f"R-Feedback training ({name})")


# -- building samples ---------------------------------------------------------------------
def _negative(m: QuestionMaterial, kind: Kind, rng: random.Random) -> list[str]:
    n = len(m.support_sentences)
    if kind == "irrelevant":
        return rng.sample(m.distractors, min(n, len(m.distractors)))
    k = rng.randint(1, len(m.support) - 1)  # a non-empty proper subset of the paragraphs
    kept = [s for para in rng.sample(m.support, k) for s in para]
    target = max(n + rng.choice((-1, 0, 1)), len(kept) + 1)
    fill = rng.sample(m.distractors, min(max(target - len(kept), 1), len(m.distractors)))
    pool = kept + fill
    rng.shuffle(pool)
    return pool


def build_samples(
    materials: Sequence[QuestionMaterial], n: int, rng: random.Random
) -> list[Sample]:
    """``n`` samples (rounded down to even): one positive and one negative per question per
    pass, negatives alternating irrelevant / partial, cycling through the questions."""
    out: list[Sample] = []
    if not materials or n < 2:
        return out
    order = list(materials)
    negative_kinds: tuple[Kind, Kind] = ("irrelevant", "partial")
    turn = 0
    while len(out) + 2 <= n:
        rng.shuffle(order)
        for m in order:
            if len(out) + 2 > n:
                break
            positive = list(m.support_sentences)
            rng.shuffle(positive)
            kind = negative_kinds[turn % 2]
            turn += 1
            out.append(Sample(m.qid, m.question, m.entities, positive, 1, "sufficient"))
            out.append(Sample(m.qid, m.question, m.entities, _negative(m, kind, rng), 0, kind))
    return out


def build_dataset(
    records: Iterable[dict[str, Any]],
    *,
    n_train: int = 10_000,
    n_val: int = 800,
    n_test: int = 800,
    n_cal: int = 800,
    val_fraction: float = 0.15,
    test_fraction: float = 0.15,
    cal_fraction: float = 0.1,
    seed: int = 0,
    entity_fn: Callable[[str], list[str]] = heuristic_entities,
) -> Dataset:
    """Balanced samples from question-disjoint train / validation / calibration / test splits."""
    rng = random.Random(seed)
    materials = [
        m for r in records if (m := question_material(r, entity_fn=entity_fn, rng=rng)) is not None
    ]
    if len(materials) < 3:
        raise GapragError(
            f"only {len(materials)} usable questions (need >= 3 with >= 2 supporting paragraphs)",
            hint="add datasets or lower --skip-first",
        )
    rng.shuffle(materials)
    val_m, cal_m, test_m, train_m = split_by_question(
        materials, val=val_fraction if n_val else 0.0, cal=cal_fraction if n_cal else 0.0,
        test=test_fraction if n_test else 0.0,
    )  # fmt: skip
    return Dataset(
        train=build_samples(train_m, n_train, rng),
        val=build_samples(val_m, n_val, rng),
        test=build_samples(test_m, n_test, rng),
        cal=build_samples(cal_m, n_cal, rng),
    )


def split_by_question(
    items: Sequence[Any], *, val: float, cal: float, test: float
) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
    """(validation, calibration, test, train) parts of an already shuffled list of questions
    (or of per-question groups): at least one question in each part whose fraction is > 0."""
    sizes = [max(1, math.ceil(len(items) * f)) if f > 0 else 0 for f in (val, cal, test)]
    parts: list[list[Any]] = []
    start = 0
    for size in sizes:
        parts.append(list(items[start : start + size]))
        start += size
    return parts[0], parts[1], parts[2], list(items[start:])


# -- features -----------------------------------------------------------------------------
def featurize(
    samples: Sequence[Sample],
    embedder: Embedder,
    *,
    unit: LengthUnit = "sentences",
    progress: bool = True,
    batch_size: int = 256,
) -> Array:
    """``[n, 2]`` features (S_f, G_f), embedding each distinct text once."""
    texts: dict[str, int] = {}
    for s in samples:
        for t in (s.question, *s.sentences):
            texts.setdefault(t, len(texts))
    ordered = list(texts)
    bar: Any = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(ordered) + len(samples), desc="rfm features", unit="item")
    chunks = []
    for start in range(0, len(ordered), batch_size):
        batch = ordered[start : start + batch_size]
        chunks.append(np.asarray(embedder.embed(batch), dtype=np.float64))
        if bar is not None:
            bar.update(len(batch))
    vectors = np.concatenate(chunks) if chunks else np.zeros((0, 1))
    out = np.zeros((len(samples), 2), dtype=np.float64)
    for i, s in enumerate(samples):
        s_f = syntactic_coverage(coverage_map(s.entities, s.sentences, unit))
        rows = [texts[t] for t in s.sentences]
        g_f = relevance_from_vectors(vectors[texts[s.question]], vectors[rows])
        out[i] = (s_f, g_f)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return out


# -- training -----------------------------------------------------------------------------
def auc(scores: Array, labels: Array) -> float:
    """Area under the ROC curve (Mann-Whitney, ties counted half)."""
    pos = scores[labels == 1]
    neg = scores[labels == 0]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    order = np.argsort(np.concatenate([pos, neg]), kind="mergesort")
    ranks = np.empty(len(order))
    values = np.concatenate([pos, neg])[order]
    i = 0
    while i < len(values):  # average ranks over ties
        j = i
        while j + 1 < len(values) and values[j + 1] == values[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return float((ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


@dataclass
class TrainResult:
    model: RFeedbackMLP
    history: list[dict[str, float]]
    best_epoch: int


def train_mlp(
    x_train: Array,
    y_train: Array,
    x_val: Array,
    y_val: Array,
    *,
    epochs: int | None = None,
    batch_size: int = BATCH_SIZE,
    lr: float = LR,
    patience: int = PATIENCE,
    seed: int = 0,
    embedder: str = "",
    hidden: tuple[int, int] = (32, 16),
    monotone: Sequence[str] = DEFAULT_MONOTONE,
    x_cal: Array | None = None,
    y_cal: Array | None = None,
) -> TrainResult:
    """Projected Adam on mean BCE-with-logits (the ``monotone`` features' constraint is
    restored after every step); early stopping on validation loss (best epoch kept) within
    :func:`epoch_budget` epochs; then Platt scaling fitted on ``(x_cal, y_cal)`` when given
    (identity otherwise)."""
    epochs = epoch_budget(len(y_train), epochs, batch_size)
    model = RFeedbackMLP.init(
        (x_train.shape[1], *hidden, 1), seed=seed, embedder=embedder, monotone=monotone
    )
    model.mean = x_train.mean(axis=0)
    model.std = np.where(x_train.std(axis=0) > 1e-8, x_train.std(axis=0), 1.0)
    rng = np.random.default_rng(seed)
    params = [p for layer in model.layers for p in layer]
    m1 = [np.zeros_like(p) for p in params]
    m2 = [np.zeros_like(p) for p in params]
    b1, b2, eps, step = 0.9, 0.999, 1e-8, 0
    history: list[dict[str, float]] = []
    best = (math.inf, 0, [p.copy() for p in params])
    for epoch in range(1, epochs + 1):
        order = rng.permutation(len(y_train))
        losses = []
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            loss, grads = model.gradients(x_train[idx], y_train[idx])
            losses.append(loss * len(idx))
            step += 1
            flat = [g for pair in grads for g in pair]
            for k, (p, g) in enumerate(zip(params, flat, strict=True)):
                m1[k] = b1 * m1[k] + (1 - b1) * g
                m2[k] = b2 * m2[k] + (1 - b2) * g * g
                p -= lr * (m1[k] / (1 - b1**step)) / (np.sqrt(m2[k] / (1 - b2**step)) + eps)
            model.project()
        val_loss = model.loss(x_val, y_val, calibrated=False) if len(y_val) else float("nan")
        val_acc = (
            float(np.mean((model.raw_logits(x_val) >= 0) == y_val)) if len(y_val) else float("nan")
        )
        history.append(
            {"epoch": epoch, "train_loss": round(sum(losses) / len(y_train), 5),
             "val_loss": round(val_loss, 5), "val_accuracy": round(val_acc, 4)}
        )  # fmt: skip
        if len(y_val) == 0 or val_loss < best[0] - 1e-5:
            best = (val_loss, epoch, [p.copy() for p in params])
        elif epoch - best[1] >= patience:
            break
    for p, saved in zip(params, best[2], strict=True):
        p[...] = saved
    if x_cal is not None and y_cal is not None and len(y_cal):
        model.calibration = fit_platt(model.raw_logits(x_cal), y_cal)
    return TrainResult(model, history, best[1] or len(history))


def cross_validate(
    xy: dict[str, tuple[Array, Array]],
    splits: dict[str, list[Sample]],
    *,
    folds: int = CV_FOLDS,
    epochs: int | None = None,
    seed: int = 0,
    monotone: Sequence[str] = DEFAULT_MONOTONE,
) -> dict[str, Any]:
    """Question-grouped k-fold AUC over every example of every split (a steadier estimate than
    one test split of ~40 questions): the model as configured, the same network without the
    monotone constraint, and each feature alone (the relevance-only baseline is ``g_f``).
    In each fold a sixth of the training questions is held out for early stopping."""
    if folds < 2:
        return {}
    x = np.concatenate([xy[k][0] for k in splits])
    y = np.concatenate([xy[k][1] for k in splits])
    qids = np.asarray([s.qid for k in splits for s in splits[k]])
    questions = np.unique(qids)
    if len(questions) < 2 * folds:
        return {}
    np.random.default_rng(seed).shuffle(questions)
    out: dict[str, list[float]] = {"model": [], "unconstrained": [], "s_f": [], "g_f": []}
    for part in np.array_split(questions, folds):
        test = np.isin(qids, part)
        rest = questions[~np.isin(questions, part)]
        val = np.isin(qids, rest[: max(1, len(rest) // 6)])
        train = ~test & ~val
        if len(np.unique(y[test])) < 2:
            continue
        for name, mono in (("model", monotone), ("unconstrained", ())):
            fit = train_mlp(x[train], y[train], x[val], y[val], epochs=epochs, seed=seed,
                            monotone=mono).model  # fmt: skip
            out[name].append(auc(fit.probs(x[test]), y[test]))
        out["s_f"].append(auc(x[test][:, 0], y[test]))
        out["g_f"].append(auc(x[test][:, 1], y[test]))
    return {
        "folds": folds,
        "grouped_by": "question",
        **{f"auc_{k}": {"mean": _finite_mean(v), "per_fold": [round(a, 4) for a in v]}
           for k, v in out.items() if v},
    }  # fmt: skip


def calibration_error(p: Array, y: Array, bins: int = 10) -> float:
    """Expected calibration error: the mean |predicted - observed| rate over equal-width
    probability bins, weighted by the bins' sizes."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(p, edges[1:-1]), 0, bins - 1)
    total = 0.0
    for b in range(bins):
        mask = which == b
        if mask.any():
            total += float(mask.sum()) * abs(float(p[mask].mean()) - float(y[mask].mean()))
    return total / len(p)


def evaluate(model: RFeedbackMLP, x: Array, y: Array, kinds: Sequence[str] = ()) -> dict[str, Any]:
    """Held-out metrics: accuracy and positive rate at the model's threshold, AUC against the
    single-feature baselines, calibration (loss, Brier, ECE) and monotonicity on the data."""
    if len(y) == 0:
        return {}
    p = model.probs(x)
    pred = p >= model.threshold
    out: dict[str, Any] = {
        "n": len(y),
        "positive_rate": round(float(np.mean(y)), 4),
        "accuracy": round(float(np.mean(pred == y)), 4),
        "auc": round(auc(p, y), 4),
        "loss": round(model.loss(x, y), 4),
        "brier": round(float(np.mean((p - y) ** 2)), 4),
        "ece": round(calibration_error(p, y), 4),
        "mean_prob": round(float(np.mean(p)), 4),
        "positive_rate_predicted": round(float(np.mean(pred)), 4),
        "auc_s_f_only": round(auc(x[:, 0], y), 4),
        "auc_g_f_only": round(auc(x[:, 1], y), 4),
        "monotonicity_violations": {
            f: monotonicity_violations(model, x, f) for f in model.features
        },
    }
    if kinds:
        arr = np.asarray(kinds)
        out["accuracy_by_kind"] = {
            k: round(float(np.mean(pred[arr == k] == y[arr == k])), 4) for k in sorted(set(kinds))
        }
    return out


def _xy(samples: Sequence[Sample], embedder: Embedder, progress: bool) -> tuple[Array, Array]:
    x = featurize(samples, embedder, progress=progress)
    return x, np.asarray([s.label for s in samples], dtype=np.float64)


# -- graph pools: what the graph built, read from `gaprag eval` traces ------------------------
def graph_traces(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    """The usable rfm_rag traces (of rfm_rag or a variant of it, finished, with the graph's
    output) under the given run folders (``gaprag eval --out``), trace folders or files."""
    return [
        t
        for t in iter_traces(paths)
        if t.get("base_method", t.get("method")) == "rfm_rag"
        and not t.get("error")
        and isinstance(t.get("extra"), dict)
    ]


def pool_snapshots(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """Each judged round's pool and the final pool of one traced question:
    ``{round, sentences, passages, answer}``; the final pool only when it differs from the
    last judged one (a loop stopped by the judge answers from that same pool)."""
    question = str(trace.get("input", ""))
    answers_by_round = {
        d.get("round"): d.get("answer")
        for d in trace.get("decisions") or []
        if isinstance(d, dict) and d.get("node") == "feedback_classifier"
    }
    out: list[dict[str, Any]] = []
    for rec in trace.get("trace") or []:
        if isinstance(rec, dict) and rec.get("node") == "feedback_classifier" and "pool" in rec:
            out.append({
                "round": int(rec.get("round", 0)),
                "sentences": [str(t) for t in rec["pool"]],
                "passages": [str(i) for i in rec.get("pool_passages") or []],
                "answer": answers_by_round.get(rec.get("round")),
            })  # fmt: skip
    pool = [
        e for e in trace["extra"].get("evidence_pool") or []
        if isinstance(e, dict) and e.get("question", question) == question
    ]  # fmt: skip
    final = {
        "round": int(trace.get("iterations") or 0),
        "sentences": [str(e.get("text", "")) for e in pool],
        "passages": sorted({str(i) for e in pool for i in e.get("source_passage_ids") or []}),
        "answer": trace.get("prediction"),
    }
    if not out or out[-1]["sentences"] != final["sentences"]:
        out.append(final)
    return out


def graph_pool_samples(
    paths: Sequence[str | Path], *, label: PoolLabel = "support", answer_f1: float = ANSWER_F1
) -> list[Sample]:
    """Labelled samples from the pools rfm_rag runs built (see the module docstring). Refuses
    any traced question that is an evaluation question (index < 60 of a bundled set)."""
    traces = graph_traces(paths)
    refuse_evaluation_questions(
        [{"id": t.get("id", ""), "question": t.get("input", "")} for t in traces]
    )
    samples: list[Sample] = []
    for t in traces:
        qid = f"{t.get('dataset', '')}/{t.get('id', '')}"
        entities = [str(e) for e in t["extra"].get("entities") or []]
        gold = {str(i) for i in t.get("supporting") or []}
        for snap in pool_snapshots(t):
            if label == "support":
                if not gold:
                    continue
                y = int(gold <= set(snap["passages"]))
            else:
                if snap["answer"] is None:
                    continue
                y = int(f1_score(str(snap["answer"]), t.get("answers") or []) >= answer_f1)
            samples.append(Sample(qid, str(t.get("input", "")), entities, snap["sentences"], y,
                                  f"round{snap['round']}"))  # fmt: skip
    return samples


def graph_pool_dataset(
    samples: Sequence[Sample],
    *,
    val_fraction: float = 0.15,
    cal_fraction: float = 0.15,
    test_fraction: float = 0.2,
    seed: int = 0,
) -> Dataset:
    """Question-disjoint splits of graph-pool samples (all of a question's rounds together)."""
    by_q: dict[str, list[Sample]] = {}
    for s in samples:
        by_q.setdefault(s.qid, []).append(s)
    groups = list(by_q.values())
    if len(groups) < 4:
        raise GapragError(
            f"only {len(groups)} traced questions with usable pools (need >= 4)",
            hint="run `gaprag eval --methods rfm_rag --offset 60 --set calibration=true` on more "
            "questions",
        )
    random.Random(seed).shuffle(groups)
    val, cal, test, train = split_by_question(
        groups, val=val_fraction, cal=cal_fraction, test=test_fraction
    )

    def flat(parts: list[list[Sample]]) -> list[Sample]:
        return [s for g in parts for s in g]

    return Dataset(train=flat(train), val=flat(val), test=flat(test), cal=flat(cal))


def run_training(
    out_dir: str | Path,
    embedder: Embedder,
    *,
    source: Source = "paragraphs",
    datasets: Sequence[str] = DEFAULT_DATASETS,
    runs: Sequence[str | Path] = (),
    label: PoolLabel = "support",
    skip_first: int = DEFAULT_SKIP_FIRST,
    epochs: int | None = None,
    seed: int = 0,
    n_train: int = 10_000,
    n_val: int = 800,
    n_test: int = 800,
    n_cal: int = 800,
    monotone: Sequence[str] = DEFAULT_MONOTONE,
    cv_folds: int = CV_FOLDS,
    progress: bool = True,
) -> dict[str, Any]:
    """Build the data from ``source``, train, calibrate, evaluate on the held-out test
    questions, write weights + metrics."""
    start = time.perf_counter()
    per_set: dict[str, int] = {}
    if source == "graph_pools":
        if not runs:
            raise InputError("graph_pools needs the traces of rfm_rag runs", hint="--runs DIR")
        data = graph_pool_dataset(graph_pool_samples(runs, label=label), seed=seed)
        data_info: dict[str, Any] = {
            "source": "graph_pools",
            "runs": [str(r) for r in runs],
            "label": label,
            "entities": "the LLM's (Prompt 2), as recorded in the traces",
            "pools": "the graph's curated fact pools, one per judged round plus the final one",
        }
    else:
        records: list[dict[str, Any]] = []
        for name in datasets:
            recs = load_records(name, skip_first=skip_first)
            per_set[name] = len(recs)
            records.extend(recs)
        refuse_evaluation_questions(records)
        data = build_dataset(
            records, n_train=n_train, n_val=n_val, n_test=n_test, n_cal=n_cal, seed=seed
        )
        data_info = {
            "source": "paragraphs",
            "datasets": list(datasets),
            "skip_first": skip_first,
            "note": f"only questions at index >= {skip_first} of each bundled set are used; "
            "evaluation reports on the first questions",
            "questions_after_skip": per_set,
            "entities": "heuristic capitalised spans of the question (no LLM at training time)",
            "pools": "raw sentences of the gold supporting / distractor paragraphs",
        }
    splits = {"train": data.train, "val": data.val, "cal": data.cal, "test": data.test}
    data_info["questions"] = {k: len({s.qid for s in v}) for k, v in splits.items()}
    if source == "graph_pools":
        # the traced questions no weight was fitted to (Platt and test splits): `gaprag
        # calibrate --rf-weights` replays only these to set the stop threshold
        data_info["heldout"] = sorted({s.qid for s in (*data.cal, *data.test)})
    data_info["samples"] = {k: len(v) for k, v in splits.items()}
    xy = {k: _xy(v, embedder, progress) for k, v in splits.items()}
    result = train_mlp(
        *xy["train"], *xy["val"], epochs=epochs, seed=seed, embedder=embedder.name,
        monotone=monotone, x_cal=xy["cal"][0], y_cal=xy["cal"][1],
    )  # fmt: skip
    model = result.model
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save(out / WEIGHTS_FILE)
    metrics: dict[str, Any] = {
        "embedder": embedder.name,
        "features": list(model.features),
        "monotone": list(model.monotone),
        "sizes": list(model.sizes),
        "parameters": model.n_params,
        "threshold": model.threshold,
        "calibration": {
            "method": "platt",
            "split": "cal",
            "a": round(model.calibration[0], 6),
            "b": round(model.calibration[1], 6),
        },
        "data": data_info,
        "training": {
            "optimizer": "adam (projected: monotone weights clipped to >= 0 after each step)",
            "lr": LR,
            "batch_size": BATCH_SIZE,
            "max_epochs": epoch_budget(len(xy["train"][1]), epochs),
            "max_epochs_rule": "--epochs"
            if epochs is not None
            else f"at least {MAX_EPOCHS} epochs and {MIN_STEPS} optimiser steps",
            "early_stopping": f"validation loss, patience {PATIENCE}, best epoch kept",
            "best_epoch": result.best_epoch,
            "epochs_run": len(result.history),
            "seed": seed,
            "history": result.history,
        },
        **{k: evaluate(model, *xy[k], [s.kind for s in v]) for k, v in splits.items()},
        "cross_validation": cross_validate(
            xy, splits, folds=cv_folds, epochs=epochs, seed=seed, monotone=monotone
        ),
        "wall_s": round(time.perf_counter() - start, 1),
    }
    metrics["warnings"] = training_warnings(model, xy, metrics["test"])
    metrics = finite(metrics)
    (out / METRICS_FILE).write_text(json.dumps(metrics, indent=1) + "\n", encoding="utf-8")
    return metrics


FLAT_SPREAD = 0.05
"""A calibrated model whose probabilities over the held-out pools span less than this says the
same thing of every pool."""
WEAK_AUC = 0.55


def training_warnings(
    model: RFeedbackMLP, xy: Mapping[str, tuple[Array, Array]], test: Mapping[str, Any]
) -> list[str]:
    """What makes a trained model unfit to ship, in words: probabilities that are nearly the
    same for every held-out pool, or a test AUC near chance."""
    out: list[str] = []
    held = [xy[k][0] for k in ("cal", "test") if len(xy[k][1])]
    if held:
        p = model.probs(np.concatenate(held))
        lo, hi = float(p.min()), float(p.max())
        if hi - lo < FLAT_SPREAD:
            out.append(
                f"the calibrated probability is nearly constant ({lo:.2f}-{hi:.2f} over the "
                "held-out pools): the model found no signal; do not ship it"
            )
    score = test.get("auc")
    if isinstance(score, float) and math.isfinite(score) and score < WEAK_AUC:
        out.append(
            f"test AUC {score:.2f}: the model does not rank sufficient pools above the others"
        )
    return out


def _finite_mean(values: Sequence[float]) -> float:
    """The mean of the finite values (a fold whose test part has one class has no AUC)."""
    kept = [v for v in values if math.isfinite(v)]
    return round(float(np.mean(kept)), 4) if kept else float("nan")


def finite(obj: Any) -> Any:
    """``obj`` with every NaN or infinite float as None (an AUC of a one-class split, say), so
    the metrics are strict JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj
