"""Fitting the R-Feedback Model on labelled examples (:mod:`.examples`): projected Adam with
early stopping, Platt calibration on held-out questions, the held-out metrics, and the
weights and metrics files ``python -m lab rfm train`` writes (see docs/methods/rfm_rag.md).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from gaprag.errors import InputError
from gaprag.graphs.rfm_rag.feedback_model.features import FEATURE_NAMES, Array, featurize
from gaprag.graphs.rfm_rag.feedback_model.model import (
    METRICS_FILE,
    WEIGHTS_FILE,
    RFeedbackMLP,
    fit_platt,
    monotonicity_violations,
)
from gaprag.stores.embeddings import Embedder
from lab.rfm.examples import (
    DEFAULT_DATASETS,
    DEFAULT_SKIP_FIRST,
    FeedbackSplits,
    PoolLabel,
    Sample,
    build_splits,
    graph_pool_samples,
    graph_pool_splits,
    load_records,
    refuse_evaluation_questions,
)

Source = Literal["paragraphs", "graph_pools"]
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
            {
                "epoch": epoch,
                "train_loss": round(sum(losses) / len(y_train), 5),
                "val_loss": round(val_loss, 5),
                "val_accuracy": round(val_acc, 4),
            }
        )
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
            fit = train_mlp(
                x[train], y[train], x[val], y[val], epochs=epochs, seed=seed, monotone=mono
            ).model
            out[name].append(auc(fit.probs(x[test]), y[test]))
        out["s_f"].append(auc(x[test][:, 0], y[test]))
        out["g_f"].append(auc(x[test][:, 1], y[test]))
    return {
        "folds": folds,
        "grouped_by": "question",
        **{
            f"auc_{k}": {"mean": _finite_mean(v), "per_fold": [round(a, 4) for a in v]}
            for k, v in out.items()
            if v
        },
    }


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


def score_model(
    model: RFeedbackMLP, x: Array, y: Array, kinds: Sequence[str] = ()
) -> dict[str, Any]:
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


def _graph_pool_data(
    runs: Sequence[str | Path], label: PoolLabel, seed: int
) -> tuple[FeedbackSplits, dict[str, Any]]:
    """The splits of the pools recorded by rfm_rag runs, and their description."""
    if not runs:
        raise InputError("graph_pools needs the traces of rfm_rag runs", hint="--runs DIR")
    data = graph_pool_splits(graph_pool_samples(runs, label=label), seed=seed)
    data_info: dict[str, Any] = {
        "source": "graph_pools",
        "runs": [str(r) for r in runs],
        "label": label,
        "entities": "the LLM's (Prompt 2), as recorded in the traces",
        "pools": "the graph's curated fact pools, one per judged round plus the final one",
    }
    return data, data_info


def _paragraph_data(
    datasets: Sequence[str],
    skip_first: int,
    *,
    n_train: int,
    n_val: int,
    n_test: int,
    n_cal: int,
    seed: int,
) -> tuple[FeedbackSplits, dict[str, Any]]:
    """The splits built from the bundled sets' paragraphs, and their description."""
    per_set: dict[str, int] = {}
    records: list[dict[str, Any]] = []
    for name in datasets:
        recs = load_records(name, skip_first=skip_first)
        per_set[name] = len(recs)
        records.extend(recs)
    refuse_evaluation_questions(records)
    data = build_splits(
        records, n_train=n_train, n_val=n_val, n_test=n_test, n_cal=n_cal, seed=seed
    )
    data_info: dict[str, Any] = {
        "source": "paragraphs",
        "datasets": list(datasets),
        "skip_first": skip_first,
        "note": f"only questions at index >= {skip_first} of each bundled set are used; "
        "evaluation reports on the first questions",
        "questions_after_skip": per_set,
        "entities": "heuristic capitalised spans of the question (no LLM at training time)",
        "pools": "raw sentences of the gold supporting / distractor paragraphs",
    }
    return data, data_info


def _model_info(model: RFeedbackMLP) -> dict[str, Any]:
    """The metrics' description of the fitted model: features, shape, threshold, calibration."""
    return {
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
    }


def _training_info(
    result: TrainResult, epochs: int | None, n_train: int, seed: int
) -> dict[str, Any]:
    """The "training" section of the metrics: optimiser, budget, early stopping, history."""
    return {
        "optimizer": "adam (projected: monotone weights clipped to >= 0 after each step)",
        "lr": LR,
        "batch_size": BATCH_SIZE,
        "max_epochs": epoch_budget(n_train, epochs),
        "max_epochs_rule": "--epochs"
        if epochs is not None
        else f"at least {MAX_EPOCHS} epochs and {MIN_STEPS} optimiser steps",
        "early_stopping": f"validation loss, patience {PATIENCE}, best epoch kept",
        "best_epoch": result.best_epoch,
        "epochs_run": len(result.history),
        "seed": seed,
        "history": result.history,
    }


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
    if source == "graph_pools":
        data, data_info = _graph_pool_data(runs, label, seed)
    else:
        data, data_info = _paragraph_data(
            datasets,
            skip_first,
            n_train=n_train,
            n_val=n_val,
            n_test=n_test,
            n_cal=n_cal,
            seed=seed,
        )
    splits = {"train": data.train, "val": data.val, "cal": data.cal, "test": data.test}
    data_info["questions"] = {k: len({s.qid for s in v}) for k, v in splits.items()}
    if source == "graph_pools":
        # the traced questions no weight was fitted to (Platt and test splits): `python -m lab
        # rfm calibrate` replays only these to set the stop threshold
        data_info["heldout"] = sorted({s.qid for s in (*data.cal, *data.test)})
    data_info["samples"] = {k: len(v) for k, v in splits.items()}
    xy = {k: _xy(v, embedder, progress) for k, v in splits.items()}
    result = train_mlp(
        *xy["train"],
        *xy["val"],
        epochs=epochs,
        seed=seed,
        embedder=embedder.name,
        monotone=monotone,
        x_cal=xy["cal"][0],
        y_cal=xy["cal"][1],
    )
    model = result.model
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save(out / WEIGHTS_FILE)
    metrics: dict[str, Any] = {
        "embedder": embedder.name,
        **_model_info(model),
        "data": data_info,
        "training": _training_info(result, epochs, len(xy["train"][1]), seed),
        **{k: score_model(model, *xy[k], [s.kind for s in v]) for k, v in splits.items()},
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
