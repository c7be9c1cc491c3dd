"""The R-Feedback Model: a tiny feed-forward network over (S_f, G_f), in numpy.

Architecture (paper: "two hidden layers with activations"; layer sizes not given, so ours;
see docs/methods/rfm_rag.md):
z-scored input (2) -> Linear(2, 32) -> ReLU -> Linear(32, 16) -> ReLU -> Linear(16, 1) -> logit.
``sigmoid(logit) >= threshold`` means "the pool is sufficient". Weights are JSON, and record
the embedder the G_f feature was computed with: loading them for another embedder is refused.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from gaprag.errors import GapragError
from gaprag.graphs.rfm_rag.features import FEATURE_NAMES

Array = npt.NDArray[np.float64]
WEIGHTS_FILE = "weights.json"
METRICS_FILE = "metrics.json"
FORMAT = "gaprag-rfeedback-mlp/1"


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def shipped_weights_path() -> Path:
    return Path(str(resources.files("gaprag.graphs.rfm_rag") / WEIGHTS_FILE))


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
    """Two hidden ReLU layers and one output logit; numpy forward and backward passes."""

    layers: list[tuple[Array, Array]]  # (W [in, out], b [out]) per linear layer
    mean: Array = field(default_factory=lambda: np.zeros(2))
    std: Array = field(default_factory=lambda: np.ones(2))
    threshold: float = 0.5
    embedder: str = ""
    features: tuple[str, ...] = FEATURE_NAMES

    @classmethod
    def init(
        cls, sizes: tuple[int, ...] = (2, 32, 16, 1), *, seed: int = 0, embedder: str = ""
    ) -> RFeedbackMLP:
        if len(sizes) != 4 or sizes[-1] != 1:
            raise ValueError("the R-Feedback model has exactly two hidden layers and one output")
        rng = np.random.default_rng(seed)
        layers = []
        for fan_in, fan_out in itertools.pairwise(sizes):
            w = rng.normal(0.0, math.sqrt(2.0 / fan_in), size=(fan_in, fan_out))  # He init
            layers.append((w, np.zeros(fan_out)))
        return cls(layers=layers, mean=np.zeros(sizes[0]), std=np.ones(sizes[0]), embedder=embedder)

    @property
    def sizes(self) -> tuple[int, ...]:
        return (self.layers[0][0].shape[0], *(w.shape[1] for w, _ in self.layers))

    @property
    def n_params(self) -> int:
        return int(sum(w.size + b.size for w, b in self.layers))

    # -- inference ------------------------------------------------------------------------
    def forward(self, x: Array) -> tuple[Array, list[Array]]:
        """Logits for raw (un-normalised) features ``x`` [n, 2], and the activations."""
        h = (np.atleast_2d(x) - self.mean) / self.std
        acts = [h]
        for i, (w, b) in enumerate(self.layers):
            h = h @ w + b
            if i < len(self.layers) - 1:
                h = np.maximum(h, 0.0)
            acts.append(h)
        return h[:, 0], acts

    def logits(self, x: Array) -> Array:
        return self.forward(x)[0]

    def probs(self, x: Array) -> Array:
        z = self.logits(x)
        return np.asarray(1.0 / (1.0 + np.exp(-np.clip(z, -60, 60))))

    def predict(self, s_f: float, g_f: float) -> FeedbackResult:
        logit = float(self.logits(np.array([[s_f, g_f]]))[0])
        prob = sigmoid(logit)
        return FeedbackResult(prob >= self.threshold, round(prob, 6), round(logit, 6), g_f)

    # -- training -------------------------------------------------------------------------
    def gradients(self, x: Array, y: Array) -> tuple[float, list[tuple[Array, Array]]]:
        """Mean BCE-with-logits loss and its gradients for a batch."""
        z, acts = self.forward(x)
        p = 1.0 / (1.0 + np.exp(-np.clip(z, -60, 60)))
        loss = float(np.mean(np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))))
        delta = ((p - y) / len(y))[:, None]
        grads: list[tuple[Array, Array]] = []
        for i in range(len(self.layers) - 1, -1, -1):
            w, _ = self.layers[i]
            grads.append((acts[i].T @ delta, delta.sum(axis=0)))
            if i > 0:
                delta = (delta @ w.T) * (acts[i] > 0)
        return loss, grads[::-1]

    def loss(self, x: Array, y: Array) -> float:
        z = self.logits(x)
        return float(np.mean(np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))))

    # -- persistence ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "architecture": "linear-relu-linear-relu-linear",
            "sizes": list(self.sizes),
            "features": list(self.features),
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
        if data.get("format") != FORMAT:
            raise GapragError(
                "these R-Feedback weights have an unknown format",
                hint="retrain them with `gaprag rfm train`",
            )
        if expect_embedder is not None and data.get("embedder") != expect_embedder:
            raise GapragError(
                f"the R-Feedback weights were trained with embedder {data.get('embedder')!r}, "
                f"not {expect_embedder!r}",
                hint="use the embedder the weights expect, or retrain: gaprag rfm train",
            )
        layers = [
            (np.asarray(layer["W"], dtype=np.float64), np.asarray(layer["b"], dtype=np.float64))
            for layer in data["layers"]
        ]
        model = cls(
            layers=layers,
            mean=np.asarray(data["mean"], dtype=np.float64),
            std=np.asarray(data["std"], dtype=np.float64),
            threshold=float(data.get("threshold", 0.5)),
            embedder=str(data.get("embedder", "")),
            features=tuple(data.get("features", FEATURE_NAMES)),
        )
        if len(model.layers) != 3 or model.sizes[-1] != 1:
            raise GapragError("R-Feedback weights must have two hidden layers and one output")
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
                hint="train them with: gaprag rfm train --out DIR",
            ) from None
        return cls.from_dict(data, expect_embedder=expect_embedder)


def expected_embedder(path: str | Path | None = None) -> str:
    """The embedder name recorded in a weights file (without building the model)."""
    path = Path(path) if path else shipped_weights_path()
    try:
        return str(json.loads(path.read_text(encoding="utf-8")).get("embedder", ""))
    except (OSError, ValueError) as exc:
        raise GapragError(
            f"cannot read R-Feedback weights at {path} ({exc})",
            hint="train them with: gaprag rfm train --out DIR",
        ) from None


# -- judges ---------------------------------------------------------------------------------
class MLPJudge:
    """Paper-faithful: the R-Feedback MLP over (S_f, G_f); G_f from the weights' embedder."""

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
