"""Training data and training for the R-Feedback Model (adapted to gaprag's data;
see docs/methods/rfm_rag.md).

The bundled multi-hop sets (``gaprag/data/eval``) give each question its paragraphs and the
ids of the supporting ones. From them we build labelled ``(question, pool)`` examples:

* ``sufficient`` (y=1): every sentence of every supporting paragraph, shuffled;
* ``partial`` (y=0): the sentences of a non-empty proper subset of the supporting paragraphs,
  plus sentences from distractor paragraphs, to about the same length;
* ``irrelevant`` (y=0): only distractor sentences, the same number as the positive has.

Half the examples are positive, a quarter of each negative kind. Questions are split into
train / validation (early stopping) / test (the reported held-out metrics), disjoint.
The first ``skip_first`` questions of every set are never used: evaluation reports on them.
Training refuses outright any record that is one of the first :data:`EVAL_RESERVED` questions
of a bundled set (matched by id or question text, so a copied JSONL is caught too).
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import numpy as np

from gaprag.errors import GapragError, InputError
from gaprag.graphs.rfm_rag.features import (
    LengthUnit,
    coverage_map,
    heuristic_entities,
    relevance_from_vectors,
    split_sentences,
    syntactic_coverage,
)
from gaprag.graphs.rfm_rag.model import METRICS_FILE, WEIGHTS_FILE, Array, RFeedbackMLP
from gaprag.stores.embeddings import Embedder

Kind = Literal["sufficient", "partial", "irrelevant"]
DEFAULT_DATASETS: tuple[str, ...] = ("hotpotqa", "2wikimultihopqa", "musique")
EVAL_RESERVED = 60
"""Questions 0-59 of every bundled set are reserved for evaluation: never trained on."""
DEFAULT_SKIP_FIRST = EVAL_RESERVED


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
    kind: Kind


@dataclass
class Dataset:
    train: list[Sample]
    val: list[Sample]
    test: list[Sample] = field(default_factory=list)


# -- loading ------------------------------------------------------------------------------
def load_records(name: str, *, skip_first: int = DEFAULT_SKIP_FIRST) -> list[dict[str, Any]]:
    """Records of a bundled eval set (``hotpotqa``...) or a JSONL path, after ``skip_first``."""
    path = Path(name)
    if path.suffix == ".jsonl" and path.is_file():
        text = path.read_text(encoding="utf-8")
    else:
        res = resources.files("gaprag.data") / "eval" / f"{name}.dev.jsonl"
        if not res.is_file():
            raise GapragError(
                f"no bundled multi-hop set {name!r}",
                hint="use hotpotqa, 2wikimultihopqa, musique or a JSONL path",
            )
        text = res.read_text(encoding="utf-8")
    records = [json.loads(line) for line in text.splitlines() if line.strip()]
    return records[skip_first:]


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


def reserved_questions() -> tuple[set[str], set[str]]:
    """(ids, normalised question texts) of the evaluation questions: the first
    :data:`EVAL_RESERVED` records of every bundled set.

    A local check: ``gaprag.eval.datasets`` has no shared guard for this yet.
    """
    from gaprag.eval.datasets import SUFFIX, bundled, data_dir

    ids: set[str] = set()
    texts: set[str] = set()
    for name in bundled():
        lines = (data_dir() / f"{name}{SUFFIX}").read_text(encoding="utf-8").splitlines()
        records = [json.loads(line) for line in lines if line.strip()][:EVAL_RESERVED]
        ids.update(str(r.get("id", "")) for r in records if r.get("id"))
        texts.update(_question_key(r["question"]) for r in records if r.get("question"))
    return ids, texts


def refuse_evaluation_questions(records: Sequence[dict[str, Any]]) -> None:
    """Raise if any record is an evaluation question (index < 60 of a bundled set)."""
    ids, texts = reserved_questions()
    hits = [
        r for r in records
        if str(r.get("id", "")) in ids or _question_key(r.get("question", "")) in texts
    ]  # fmt: skip
    if hits:
        raise InputError(
            f"refusing to train on {len(hits)} evaluation question(s) "
            f"(e.g. {str(hits[0].get('id') or hits[0].get('question'))[:60]!r}): questions 0-"
            f"{EVAL_RESERVED - 1} of every bundled set are reserved for evaluation",
            hint=f"use --skip-first {EVAL_RESERVED} or more, and no copy of those questions",
        )


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
    val_fraction: float = 0.15,
    test_fraction: float = 0.15,
    seed: int = 0,
    entity_fn: Callable[[str], list[str]] = heuristic_entities,
) -> Dataset:
    """Balanced samples from question-disjoint train / validation / test splits."""
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
    n_val_q = max(1, math.ceil(len(materials) * val_fraction)) if n_val else 0
    n_test_q = max(1, math.ceil(len(materials) * test_fraction)) if n_test else 0
    val_m = materials[:n_val_q]
    test_m = materials[n_val_q : n_val_q + n_test_q]
    train_m = materials[n_val_q + n_test_q :]
    return Dataset(
        train=build_samples(train_m, n_train, rng),
        val=build_samples(val_m, n_val, rng),
        test=build_samples(test_m, n_test, rng),
    )


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
    epochs: int = 50,
    batch_size: int = 64,
    lr: float = 1e-3,
    patience: int = 5,
    seed: int = 0,
    embedder: str = "",
    hidden: tuple[int, int] = (32, 16),
) -> TrainResult:
    """Adam on mean BCE-with-logits; early stopping on validation loss (best epoch kept)."""
    model = RFeedbackMLP.init((x_train.shape[1], *hidden, 1), seed=seed, embedder=embedder)
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
        val_loss = model.loss(x_val, y_val) if len(y_val) else float("nan")
        val_acc = (
            float(np.mean((model.probs(x_val) >= 0.5) == y_val)) if len(y_val) else float("nan")
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
    return TrainResult(model, history, best[1] or len(history))


def evaluate(model: RFeedbackMLP, x: Array, y: Array, kinds: Sequence[str] = ()) -> dict[str, Any]:
    if len(y) == 0:
        return {}
    p = model.probs(x)
    pred = p >= model.threshold
    out: dict[str, Any] = {
        "n": len(y),
        "accuracy": round(float(np.mean(pred == y)), 4),
        "auc": round(auc(p, y), 4),
        "loss": round(model.loss(x, y), 4),
        "positive_rate_predicted": round(float(np.mean(pred)), 4),
        "auc_s_f_only": round(auc(x[:, 0], y), 4),
        "auc_g_f_only": round(auc(x[:, 1], y), 4),
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


def run_training(
    out_dir: str | Path,
    embedder: Embedder,
    *,
    datasets: Sequence[str] = DEFAULT_DATASETS,
    skip_first: int = DEFAULT_SKIP_FIRST,
    epochs: int = 50,
    seed: int = 0,
    n_train: int = 10_000,
    n_val: int = 800,
    n_test: int = 800,
    progress: bool = True,
) -> dict[str, Any]:
    """Build the data, train, evaluate on the held-out test questions, write weights + metrics."""
    start = time.perf_counter()
    records: list[dict[str, Any]] = []
    per_set: dict[str, int] = {}
    for name in datasets:
        recs = load_records(name, skip_first=skip_first)
        per_set[name] = len(recs)
        records.extend(recs)
    refuse_evaluation_questions(records)
    data = build_dataset(records, n_train=n_train, n_val=n_val, n_test=n_test, seed=seed)
    x_tr, y_tr = _xy(data.train, embedder, progress)
    x_va, y_va = _xy(data.val, embedder, progress)
    x_te, y_te = _xy(data.test, embedder, progress)
    result = train_mlp(x_tr, y_tr, x_va, y_va, epochs=epochs, seed=seed, embedder=embedder.name)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    result.model.save(out / WEIGHTS_FILE)
    metrics: dict[str, Any] = {
        "embedder": embedder.name,
        "features": list(result.model.features),
        "sizes": list(result.model.sizes),
        "parameters": result.model.n_params,
        "threshold": result.model.threshold,
        "data": {
            "datasets": list(datasets),
            "skip_first": skip_first,
            "note": f"only questions at index >= {skip_first} of each bundled set are used; "
            "evaluation reports on the first questions",
            "questions_after_skip": per_set,
            "questions": {
                "train": len({s.qid for s in data.train}),
                "val": len({s.qid for s in data.val}),
                "test": len({s.qid for s in data.test}),
            },
            "samples": {"train": len(data.train), "val": len(data.val), "test": len(data.test)},
            "entities": "heuristic capitalised spans of the question (no LLM at training time)",
        },
        "training": {
            "optimizer": "adam",
            "lr": 1e-3,
            "batch_size": 64,
            "max_epochs": epochs,
            "early_stopping": "validation loss, patience 5, best epoch kept",
            "best_epoch": result.best_epoch,
            "epochs_run": len(result.history),
            "seed": seed,
            "history": result.history,
        },
        "train": evaluate(result.model, x_tr, y_tr, [s.kind for s in data.train]),
        "val": evaluate(result.model, x_va, y_va, [s.kind for s in data.val]),
        "test": evaluate(result.model, x_te, y_te, [s.kind for s in data.test]),
        "wall_s": round(time.perf_counter() - start, 1),
    }
    (out / METRICS_FILE).write_text(json.dumps(metrics, indent=1) + "\n", encoding="utf-8")
    return metrics
