"""The R-Feedback Model: a tiny feed-forward network over (S_f, G_f), in numpy.

Architecture (paper: "two hidden layers with activations"; layer sizes not given, so ours;
see docs/methods/rfm_rag.md):
z-scored input (2) -> Linear(2, 32) -> ReLU -> Linear(32, 16) -> ReLU -> Linear(16, 1) -> logit,
then Platt scaling ``p = sigmoid(a * logit + b)`` (``a > 0``) fitted on held-out examples.

**Monotone.** The probability never falls when a feature listed in ``monotone`` rises, the
others fixed: that feature's first-layer weights and every weight of the later layers are kept
>= 0 during training (projected gradient steps). ReLU is non-decreasing, z-scoring divides by
a positive std and Platt's ``a`` is positive, so each path from such an input to ``p`` is
non-decreasing. More entity coverage (or relevance) can then never make a pool look *less*
sufficient, which the unconstrained model of the first release did.

``p`` is the probability that the pool is sufficient; the graph stops on it with
:func:`gaprag.nodes.should_stop`. Weights are JSON, and record the embedder the G_f feature was
computed with: loading them for another embedder is refused.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from gaprag.errors import GapragError
from gaprag.graphs.rfm_rag.feedback_model.features import FEATURE_NAMES, Array

WEIGHTS_FILE = "weights.json"
METRICS_FILE = "metrics.json"
FORMAT = "gaprag-rfeedback-mlp/2"
READABLE_FORMATS = frozenset({"gaprag-rfeedback-mlp/1", FORMAT})
"""/1: the first release (no monotone constraint, no calibration); still readable."""


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def shipped_weights_path() -> Path:
    """The weights shipped with gaprag (package data beside this module)."""
    return Path(str(resources.files(__package__ or "") / WEIGHTS_FILE))


@dataclass(frozen=True)
class FeedbackResult:
    """The sufficiency verdict for one pool."""

    sufficient: bool
    prob: float | None = None
    logit: float | None = None
    g_f: float | None = None


class SufficiencyJudge(Protocol):
    """Decides whether the evidence pool is enough to answer the question."""

    def judge(
        self, question: str, entities: list[str], sentences: list[str], s_f: float
    ) -> FeedbackResult: ...


@dataclass
class RFeedbackMLP:
    """Two hidden ReLU layers and one output logit, optionally monotone in some features and
    Platt-calibrated; numpy forward and backward passes."""

    layers: list[tuple[Array, Array]]  # (W [in, out], b [out]) per linear layer
    mean: Array = field(default_factory=lambda: np.zeros(2))
    std: Array = field(default_factory=lambda: np.ones(2))
    threshold: float = 0.5
    embedder: str = ""
    features: tuple[str, ...] = FEATURE_NAMES
    monotone: tuple[str, ...] = ()
    """Features the probability is non-decreasing in (constrained weights, see the module)."""
    calibration: tuple[float, float] = (1.0, 0.0)
    """Platt scaling (a, b) of the network's logit: p = sigmoid(a * logit + b), a > 0."""

    @classmethod
    def init(
        cls,
        sizes: tuple[int, ...] = (2, 32, 16, 1),
        *,
        seed: int = 0,
        embedder: str = "",
        monotone: Sequence[str] = (),
        features: tuple[str, ...] = FEATURE_NAMES,
    ) -> RFeedbackMLP:
        if len(sizes) != 4 or sizes[-1] != 1:
            raise ValueError("the R-Feedback model has exactly two hidden layers and one output")
        unknown = [m for m in monotone if m not in features]
        if unknown:
            raise ValueError(f"monotone features {unknown} are not among {list(features)}")
        rng = np.random.default_rng(seed)
        layers = []
        for fan_in, fan_out in itertools.pairwise(sizes):
            w = rng.normal(0.0, math.sqrt(2.0 / fan_in), size=(fan_in, fan_out))  # He init
            layers.append((w, np.zeros(fan_out)))
        model = cls(
            layers=layers,
            mean=np.zeros(sizes[0]),
            std=np.ones(sizes[0]),
            embedder=embedder,
            features=tuple(features),
            monotone=tuple(monotone),
        )
        if model.monotone:
            for w, _ in model.layers[1:]:  # start inside the constraint set, not at its edge
                np.abs(w, out=w)
                w *= 0.5
            for i in model.monotone_inputs:
                np.abs(model.layers[0][0][i], out=model.layers[0][0][i])
        return model

    @property
    def sizes(self) -> tuple[int, ...]:
        return (self.layers[0][0].shape[0], *(w.shape[1] for w, _ in self.layers))

    @property
    def n_params(self) -> int:
        return int(sum(w.size + b.size for w, b in self.layers))

    @property
    def monotone_inputs(self) -> list[int]:
        return [self.features.index(m) for m in self.monotone]

    def project(self) -> None:
        """Clip the constrained weights to >= 0 (after every training step)."""
        if not self.monotone:
            return
        first = self.layers[0][0]
        for i in self.monotone_inputs:
            np.maximum(first[i], 0.0, out=first[i])
        for w, _ in self.layers[1:]:
            np.maximum(w, 0.0, out=w)

    def satisfies_constraints(self) -> bool:
        """True when the weights guarantee monotonicity in every ``monotone`` feature."""
        if not self.monotone:
            return True
        first = self.layers[0][0]
        return (
            all(bool(np.all(first[i] >= 0)) for i in self.monotone_inputs)
            and all(bool(np.all(w >= 0)) for w, _ in self.layers[1:])
            and self.calibration[0] > 0
            and bool(np.all(self.std > 0))
        )

    # -- inference ------------------------------------------------------------------------
    def forward(self, x: Array) -> tuple[Array, list[Array]]:
        """The network's (uncalibrated) logits for raw features ``x`` [n, d], and activations."""
        h = (np.atleast_2d(x) - self.mean) / self.std
        acts = [h]
        for i, (w, b) in enumerate(self.layers):
            h = h @ w + b
            if i < len(self.layers) - 1:
                h = np.maximum(h, 0.0)
            acts.append(h)
        return h[:, 0], acts

    def raw_logits(self, x: Array) -> Array:
        return self.forward(x)[0]

    def logits(self, x: Array) -> Array:
        """Calibrated logits: ``a * raw + b``."""
        a, b = self.calibration
        return a * self.raw_logits(x) + b

    def probs(self, x: Array) -> Array:
        z = self.logits(x)
        return np.asarray(1.0 / (1.0 + np.exp(-np.clip(z, -60, 60))))

    def predict(self, s_f: float, g_f: float) -> FeedbackResult:
        """The probability that the pool is sufficient (and ``prob >= threshold``)."""
        logit = float(self.logits(np.array([[s_f, g_f]]))[0])
        prob = sigmoid(logit)
        return FeedbackResult(prob >= self.threshold, round(prob, 6), round(logit, 6), g_f)

    # -- training -------------------------------------------------------------------------
    def gradients(self, x: Array, y: Array) -> tuple[float, list[tuple[Array, Array]]]:
        """Mean BCE-with-logits loss of the network's logits and its gradients for a batch."""
        z, acts = self.forward(x)
        p = 1.0 / (1.0 + np.exp(-np.clip(z, -60, 60)))
        loss = bce_with_logits(z, y)
        delta = ((p - y) / len(y))[:, None]
        grads: list[tuple[Array, Array]] = []
        for i in range(len(self.layers) - 1, -1, -1):
            w, _ = self.layers[i]
            grads.append((acts[i].T @ delta, delta.sum(axis=0)))
            if i > 0:
                delta = (delta @ w.T) * (acts[i] > 0)
        return loss, grads[::-1]

    def loss(self, x: Array, y: Array, *, calibrated: bool = True) -> float:
        return bce_with_logits(self.logits(x) if calibrated else self.raw_logits(x), y)

    # -- persistence ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "architecture": "linear-relu-linear-relu-linear"
            + ("-monotone" if self.monotone else "")
            + "-platt",
            "sizes": list(self.sizes),
            "features": list(self.features),
            "monotone": list(self.monotone),
            "calibration": {"method": "platt", "a": self.calibration[0], "b": self.calibration[1]},
            "embedder": self.embedder,
            "threshold": self.threshold,
            "mean": self.mean.tolist(),
            "std": self.std.tolist(),
            "layers": [{"W": w.tolist(), "b": b.tolist()} for w, b in self.layers],
        }

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, expect_embedder: str | None = None) -> RFeedbackMLP:
        if data.get("format") not in READABLE_FORMATS:
            raise GapragError(
                "these R-Feedback weights have an unknown format",
                hint="retrain them with `python -m lab rfm train`, from a gaprag checkout",
            )
        if expect_embedder is not None and data.get("embedder") != expect_embedder:
            raise GapragError(
                f"the R-Feedback weights were trained with embedder {data.get('embedder')!r}, "
                f"not {expect_embedder!r}",
                hint="use the embedder the weights expect, or retrain (python -m lab rfm train, from a gaprag checkout)",
            )
        layers = [
            (np.asarray(layer["W"], dtype=np.float64), np.asarray(layer["b"], dtype=np.float64))
            for layer in data["layers"]
        ]
        cal = data.get("calibration") or {}
        model = cls(
            layers=layers,
            mean=np.asarray(data["mean"], dtype=np.float64),
            std=np.asarray(data["std"], dtype=np.float64),
            threshold=float(data.get("threshold", 0.5)),
            embedder=str(data.get("embedder", "")),
            features=tuple(data.get("features", FEATURE_NAMES)),
            monotone=tuple(data.get("monotone", ())),
            calibration=(float(cal.get("a", 1.0)), float(cal.get("b", 0.0))),
        )
        if len(model.layers) != 3 or model.sizes[-1] != 1:
            raise GapragError("R-Feedback weights must have two hidden layers and one output")
        if not model.satisfies_constraints():
            raise GapragError(
                "these R-Feedback weights claim to be monotone but break the constraint",
                hint="retrain them with `python -m lab rfm train`, from a gaprag checkout",
            )
        return model

    @classmethod
    def load(
        cls, path: str | Path | None = None, *, expect_embedder: str | None = None
    ) -> RFeedbackMLP:
        path = Path(path) if path else shipped_weights_path()
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise GapragError(
                f"cannot read R-Feedback weights at {path} ({exc})",
                hint="train them with `python -m lab rfm train --out DIR` (from a gaprag checkout)",
            ) from None
        return cls.from_dict(data, expect_embedder=expect_embedder)


MIN_PLATT_SLOPE = 1e-3


def monotonicity_violations(
    model: RFeedbackMLP, x: Array, feature: str, *, points: int = 41, rows: int = 200
) -> int:
    """How many of (up to ``rows`` of) the examples ``x`` see the probability fall somewhere
    as ``feature`` sweeps its range in ``x`` (widened by half of it on each side), the other
    features fixed. 0 for a monotone feature, by construction."""
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    if len(x) == 0:
        return 0
    j = model.features.index(feature)
    lo, hi = float(x[:, j].min()), float(x[:, j].max())
    pad = max(hi - lo, 1e-3) / 2
    grid = np.linspace(lo - pad, hi + pad, points)
    step = max(1, len(x) // rows)
    bad = 0
    for row in x[::step][:rows]:
        sweep = np.repeat(row[None, :], points, axis=0)
        sweep[:, j] = grid
        bad += int(bool(np.any(np.diff(model.probs(sweep)) < -1e-12)))
    return bad


def bce_with_logits(z: Array, y: Array) -> float:
    """Mean binary cross-entropy of labels ``y`` under logits ``z`` (numerically stable)."""
    return float(np.mean(np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))))


def fit_platt(z: Array, y: Array, *, iterations: int = 100) -> tuple[float, float]:
    """Platt scaling: (a, b) minimising the BCE of ``sigmoid(a * z + b)`` against ``y``, with
    Platt's smoothed targets; ``a`` is kept > 0 so the calibrated model stays monotone.
    Newton's method on the two parameters (a tiny ridge keeps the Hessian invertible)."""
    z = np.asarray(z, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n_pos, n_neg = float(np.sum(y == 1)), float(np.sum(y == 0))
    if n_pos == 0 or n_neg == 0:
        return 1.0, 0.0
    target = np.where(y == 1, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))
    a, b = 1.0, 0.0
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-np.clip(a * z + b, -60, 60)))
        g = np.array([np.sum((p - target) * z), np.sum(p - target)])
        w = p * (1 - p)
        h = np.array([[np.sum(w * z * z) + 1e-6, np.sum(w * z)], [np.sum(w * z), np.sum(w) + 1e-6]])
        step = np.linalg.solve(h, g)
        a, b = a - float(step[0]), b - float(step[1])
        if float(np.max(np.abs(step))) < 1e-9:
            break
    if a < MIN_PLATT_SLOPE:  # not informative on these examples: keep monotone, refit b only
        a = MIN_PLATT_SLOPE
        for _ in range(iterations):
            p = 1.0 / (1.0 + np.exp(-np.clip(a * z + b, -60, 60)))
            step_b = float(np.sum(p - target) / (np.sum(p * (1 - p)) + 1e-6))
            b -= step_b
            if abs(step_b) < 1e-9:
                break
    return a, b


def expected_embedder(path: str | Path | None = None) -> str:
    """The embedder name recorded in a weights file (without building the model)."""
    path = Path(path) if path else shipped_weights_path()
    try:
        return str(json.loads(path.read_text(encoding="utf-8")).get("embedder", ""))
    except (OSError, ValueError) as exc:
        raise GapragError(
            f"cannot read R-Feedback weights at {path} ({exc})",
            hint="train them with `python -m lab rfm train --out DIR` (from a gaprag checkout)",
        ) from None


# -- judges ---------------------------------------------------------------------------------
class MLPJudge:
    """Paper-faithful: the R-Feedback MLP over (S_f, G_f); G_f from the weights' embedder.

    ``prob`` is the calibrated probability that the pool is sufficient; the graph decides on it
    (``nodes.should_stop(prob, rf_threshold)``), ``sufficient`` is ``prob >= threshold``."""

    def __init__(self, model: RFeedbackMLP, relevance: Any, threshold: float | None = None) -> None:
        self.model = model
        self.relevance = relevance  # a FeatureExtractor (anything with .relevance(q, sentences))
        self.threshold = model.threshold if threshold is None else threshold

    def judge(
        self, question: str, entities: list[str], sentences: list[str], s_f: float
    ) -> FeedbackResult:
        g_f = float(self.relevance.relevance(question, sentences))
        logit = float(self.model.logits(np.array([[s_f, g_f]]))[0])
        prob = sigmoid(logit)
        return FeedbackResult(
            prob >= self.threshold, round(prob, 6), round(logit, 6), round(g_f, 6)
        )


class RelevanceJudge:
    """Relevance only (the baseline the R-Feedback model is measured against): sufficient when
    G_f, computed as :class:`MLPJudge` computes it (same embedder), is >= ``threshold``, a
    cosine. ``prob`` is ``sigmoid(G_f)``, a monotone map of G_f onto (0, 1), not a calibrated
    probability; the threshold in the same unit is :meth:`prob_threshold`."""

    def __init__(self, relevance: Any, threshold: float) -> None:
        self.relevance = relevance  # a FeatureExtractor (anything with .relevance(q, sentences))
        self.threshold = threshold

    @property
    def prob_threshold(self) -> float:
        """``sigmoid(threshold)``: stop iff ``prob >= prob_threshold`` iff G_f >= threshold."""
        return sigmoid(self.threshold)

    def judge(
        self, question: str, entities: list[str], sentences: list[str], s_f: float
    ) -> FeedbackResult:
        g_f = float(self.relevance.relevance(question, sentences))
        return FeedbackResult(g_f >= self.threshold, round(sigmoid(g_f), 6), None, round(g_f, 6))


class HeuristicJudge:
    """Offline rule, no trained model: sufficient when S_f >= tau_s (and sigmoid(G_f) >= tau_g)."""

    def __init__(self, relevance: Any = None, tau_s: float = 0.5, tau_g: float = 0.5) -> None:
        self.relevance = relevance
        self.tau_s = tau_s
        self.tau_g = tau_g

    def judge(
        self, question: str, entities: list[str], sentences: list[str], s_f: float
    ) -> FeedbackResult:
        g_f = (
            None if self.relevance is None else float(self.relevance.relevance(question, sentences))
        )
        ok = s_f >= self.tau_s and (g_f is None or sigmoid(g_f) >= self.tau_g)
        return FeedbackResult(ok, None, None, g_f)


class FixedJudge:
    """``never_sufficient`` (the wo-RFM ablation: always 3 rounds) or ``always_sufficient``."""

    def __init__(self, sufficient: bool) -> None:
        self.sufficient = sufficient

    def judge(
        self, question: str, entities: list[str], sentences: list[str], s_f: float
    ) -> FeedbackResult:
        return FeedbackResult(self.sufficient, 1.0 if self.sufficient else 0.0)
