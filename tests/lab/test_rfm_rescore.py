"""Re-scoring recorded R-Feedback decisions with retrained weights (`python -m lab rfm
calibrate`, a re-scorer passed to `gaprag.eval.calibrate.calibrate`): the new probabilities
drive the replay, on the questions the weights did not train on."""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gaprag.datasets import load_dataset
from gaprag.errors import InputError
from gaprag.eval.calibrate import calibrate
from gaprag.graphs.rfm_rag.feedback_model.features import FEATURE_NAMES
from gaprag.graphs.rfm_rag.feedback_model.model import RFeedbackMLP
from gaprag.profiles import load_profile
from lab.rfm.rescore import rescore_rows, round_pools

GOLD = "William Shakespeare"


def coverage_model() -> RFeedbackMLP:
    """p = sigmoid(20 * S_f - 10): sure when the pool covers the question's entities, never
    when it covers none; G_f ignored."""
    w1, w2, w3 = np.zeros((2, 32)), np.zeros((32, 16)), np.zeros((16, 1))
    w1[0, 0] = w2[0, 0] = 1.0
    w3[0, 0] = 20.0
    layers = [(w1, np.zeros(32)), (w2, np.zeros(16)), (w3, np.array([-10.0]))]
    return RFeedbackMLP(layers=layers, embedder="hashing-256", monotone=FEATURE_NAMES)


POOLS = (["A tragedy was first printed in 1603."], ["Hamlet was written by William Shakespeare."])


def write_run(root: Path, ids: list[str]) -> None:
    """A calibration run of rfm_rag: round 1 answered wrong, round 2 right; the recorded
    model was sure at round 1 (p 0.99), though only round 2's pool names the entity."""
    run = root / "hotpotqa"
    (run / "traces" / "rfm_rag").mkdir(parents=True)
    rows = []
    for qid in ids:
        decisions = [
            {"node": "feedback_classifier", "round": 1, "decision": "continue", "p": 0.99,
             "path": "model", "threshold": 1.01, "answer": "Christopher Marlowe"},
            {"node": "feedback_classifier", "round": 2, "decision": "continue", "p": 0.4,
             "path": "model", "threshold": 1.01, "answer": GOLD},
        ]  # fmt: skip
        rows.append({
            "dataset": "hotpotqa", "id": qid, "method": "rfm_rag", "question": "Who wrote Hamlet?",
            "answers": [GOLD], "f1": 1.0, "llm_calls": 9, "decisions": decisions,
            "options": {"calibration": True}, "error": None,
        })  # fmt: skip
        trace = {
            "input": "Who wrote Hamlet?", "iterations": 3, "prediction": GOLD,
            "extra": {"entities": ["Hamlet"], "evidence_pool": []},
            "trace": [{"node": "feedback_classifier", "round": r, "pool": POOLS[r - 1]}
                      for r in (1, 2)],
        }  # fmt: skip
        (run / "traces" / "rfm_rag" / f"{qid}.json").write_text(json.dumps(trace))
    (run / "results.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_round_pools_are_the_judged_pools() -> None:
    trace: dict[str, Any] = {
        "input": "Who wrote Hamlet?", "iterations": 2,
        "extra": {"entities": ["Hamlet"], "evidence_pool": [{"text": "x"}]},
        "trace": [
            {"node": "retrieve", "round": 1},
            {"node": "feedback_classifier", "round": 1, "pool": POOLS[0]},
            {"node": "feedback_classifier", "round": 2, "mode": "llm_judge"},  # no pool
        ],
    }  # fmt: skip
    pools = round_pools(trace)
    assert pools[1].sentences == POOLS[0] and pools[1].entities == ["Hamlet"]
    assert pools[1].question == "Who wrote Hamlet?" and pools[2].sentences == ["x"]  # final


def test_calibration_replays_retrained_weights(tmp_path: Path) -> None:
    ids = [ex.id for ex in load_dataset("hotpotqa").examples[60:63]]
    runs = tmp_path / "runs"
    write_run(runs, ids)
    weights = tmp_path / "w" / "weights.json"
    weights.parent.mkdir()
    coverage_model().save(weights)
    common: dict[str, Any] = {"model": "m", "methods": ["rfm_rag"], "datasets": ["hotpotqa"],
                              "limit": 5, "out": runs, "run": False, "cost_per_call": 0.0}  # fmt: skip
    # the recorded probabilities stop at round 1 (wrong) at any threshold up to 0.99
    recorded = calibrate(**common, profile_path=tmp_path / "a.toml")["curves"]["rfm_rag"]
    point = next(p for p in recorded["grid"] if p["threshold"] == 0.9)
    assert point["f1"] == 0.0 and "rescored" not in recorded
    # re-scored: round 1 (no entity covered) p ~0.00005, round 2 (covered) p ~0.99995
    rescore = {"rfm_rag": functools.partial(rescore_rows, weights=weights)}
    out = calibrate(**common, profile_path=tmp_path / "b.toml", rescore=rescore)
    rescored = out["curves"]["rfm_rag"]
    point = next(p for p in rescored["grid"] if p["threshold"] == 0.9)
    assert point["f1"] == 1.0 and point["stop_rate"] == 1.0
    assert rescored["rescored"]["decisions_rescored"] == 6
    assert load_profile(tmp_path / "b.toml").notes["rfm_rag"]["rf_weights"] == str(weights)
    # weights trained on graph pools replay only the questions they did not train on
    (weights.parent / "metrics.json").write_text(
        json.dumps({"data": {"heldout": [f"hotpotqa/{ids[0]}", "musique/other"]}})
    )
    rows, note = rescore_rows(
        [json.loads(line) for line in (runs / "hotpotqa" / "results.jsonl").read_text().splitlines()],
        {"hotpotqa": runs / "hotpotqa"}, weights,
    )  # fmt: skip
    assert [r["id"] for r in rows] == [ids[0]]
    assert note["questions_replayed"] == 1 and note["questions_left_out"] == 2
    assert [d["path"] for d in rows[0]["decisions"]] == ["model (re-scored)"] * 2
    assert rows[0]["decisions"][0]["p"] < 0.01 < 0.99 < rows[0]["decisions"][1]["p"]


def test_rescoring_needs_the_traces_and_rfm_rag(tmp_path: Path) -> None:
    ids = [ex.id for ex in load_dataset("hotpotqa").examples[60:61]]
    runs = tmp_path / "runs"
    write_run(runs, ids)
    weights = tmp_path / "weights.json"
    coverage_model().save(weights)
    (runs / "hotpotqa" / "traces" / "rfm_rag" / f"{ids[0]}.json").unlink()
    rescore = {"rfm_rag": functools.partial(rescore_rows, weights=weights)}
    with pytest.raises(InputError, match="no trace of rfm_rag question"):
        calibrate(model="m", methods=["rfm_rag"], datasets=["hotpotqa"], out=runs, run=False,
                  profile_path=tmp_path / "p.toml", rescore=rescore)  # fmt: skip
    with pytest.raises(InputError, match="a re-scorer for rfm_rag"):
        calibrate(model="m", methods=["iterkey"], datasets=["hotpotqa"], out=runs, run=False,
                  profile_path=tmp_path / "p.toml", rescore=rescore)  # fmt: skip


def test_retrain_script_compares_on_the_same_heldout_questions(tmp_path: Path) -> None:
    """scripts/rfm_retrain.sh on real calibration rows (the 12 committed rfm_rag questions):
    both weights replay the same held-out questions, and nothing shipped or recorded changes."""
    import shutil
    import subprocess

    root = Path(__file__).resolve().parents[2]
    runs = tmp_path / "runs"
    source = root / "docs/results/calibration/qwen2.5-coder-1.5b/b"
    for ds in ("hotpotqa", "2wikimultihopqa", "musique"):
        (runs / ds / "traces").mkdir(parents=True)
        rows = [line for line in (source / ds / "results.jsonl").read_text().splitlines()
                if json.loads(line)["method"] == "rfm_rag"]  # fmt: skip
        (runs / ds / "results.jsonl").write_text("\n".join(rows) + "\n")
        shutil.copy(source / ds / "traces" / "rfm_rag.jsonl.xz", runs / ds / "traces")
        shutil.copy(source / ds / "run.json", runs / ds / "run.json")
    (runs / "curves.json").write_text('{"recorded": true}')
    shipped = (root / "gaprag/graphs/rfm_rag/feedback_model/weights.json").read_bytes()
    out = tmp_path / "out"
    # the interpreter running these tests (and its `gaprag`) for a checkout without .venv
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(root / "scripts/rfm_retrain.sh"), str(runs), str(out)],
                          capture_output=True, text=True, cwd=root, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    metrics = json.loads((out / "retrained/metrics.json").read_text())
    held = metrics["data"]["heldout"]
    # 12 questions teach nothing: the script passes on training's verdict
    assert metrics["warnings"]
    assert all(f"retrained: warning: {w}" in done.stdout for w in metrics["warnings"])
    assert (
        held and json.loads((out / "shipped/metrics.json").read_text())["data"]["heldout"] == held
    )
    for w in ("shipped", "retrained"):
        curve = json.loads((out / w / "curves.json").read_text())["rfm_rag"]
        assert curve["questions"] == len(held) == curve["rescored"]["questions_replayed"]
        assert f"{w}: rf_threshold" in done.stdout
    assert json.loads((runs / "curves.json").read_text()) == {"recorded": True}
    assert (root / "gaprag/graphs/rfm_rag/feedback_model/weights.json").read_bytes() == shipped
