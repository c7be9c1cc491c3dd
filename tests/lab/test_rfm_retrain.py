"""Retraining the R-Feedback model is deterministic: a small slice of the bundled data
(HotpotQA questions 60+, hashing embedder, seed 0) gives the same weights twice and the
held-out metrics committed here for that slice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gaprag.stores.embeddings import HashingEmbedder
from lab.rfm.train import run_training

SLICE: dict[str, Any] = {
    "datasets": ("hotpotqa",),
    "skip_first": 60,
    "n_train": 400,
    "n_val": 100,
    "n_test": 100,
    "n_cal": 100,
    "epochs": 20,
    "seed": 0,
    "cv_folds": 0,
}
"""The slice: `python -m lab rfm train --datasets hotpotqa --n-train 400 --n-val 100 --n-test 100
--n-cal 100 --epochs 20 --cv-folds 0 --embedder hashing-256`."""
COMMITTED: dict[str, Any] = {
    "questions": {"train": 70, "val": 18, "cal": 12, "test": 18},
    "best_epoch": 20,
    "calibration": {"a": 0.371748, "b": -0.059443},
    "test": {
        "n": 100,
        "auc": 0.6474,
        "auc_g_f_only": 0.5616,
        "auc_s_f_only": 0.7542,
        "accuracy": 0.6,
        "loss": 0.6753,
        "ece": 0.0674,
    },
}
"""The slice's metrics as committed (seed 0): a change here is a change in training."""


def _train(out: Path) -> dict[str, Any]:
    return run_training(out, HashingEmbedder(), progress=False, **SLICE)


def test_retraining_a_slice_is_deterministic_and_matches_the_committed_metrics(
    tmp_path: Path,
) -> None:
    first = _train(tmp_path / "a")
    second = _train(tmp_path / "b")
    assert (tmp_path / "a" / "weights.json").read_bytes() == (
        tmp_path / "b" / "weights.json"
    ).read_bytes()
    assert {k: v for k, v in first.items() if k != "wall_s"} == {
        k: v for k, v in second.items() if k != "wall_s"
    }
    assert first["data"]["questions"] == COMMITTED["questions"]
    assert first["training"]["best_epoch"] == COMMITTED["best_epoch"]
    for key, value in COMMITTED["calibration"].items():
        assert first["calibration"][key] == pytest.approx(value, abs=1e-5)
    for key, value in COMMITTED["test"].items():
        assert first["test"][key] == pytest.approx(value, abs=1e-4), key
    saved = json.loads((tmp_path / "a" / "metrics.json").read_text())
    assert saved["test"]["auc"] == first["test"]["auc"]


def test_another_seed_gives_other_weights(tmp_path: Path) -> None:
    base = _train(tmp_path / "a")
    other = run_training(tmp_path / "b", HashingEmbedder(), progress=False, **{**SLICE, "seed": 1})
    assert other["calibration"] != base["calibration"]
