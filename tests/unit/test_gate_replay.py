"""benchmarks/gate_replay.py: the gate put in front of recorded method rows, and its choice
under the papers' call counts."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from gaprag.eval.results import RESULT_FIELDS
from tests.scripts import load_script

gr = load_script("benchmarks/gate_replay.py")


def _signal_row(qid: str, lp_mean: float, answer: str, index: int = 60) -> dict[str, Any]:
    return {
        "dataset": "hotpotqa", "index": index, "id": qid, "question": "Who?",
        "answers": ["Ann"], "rag": {"answer": answer, "f1": float(answer == "Ann")},
        "signals": {"lp_mean": lp_mean},
    }  # fmt: skip


def _method_row(qid: str, f1: float, calls: int, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {k: None for k in RESULT_FIELDS}
    row.update(
        dataset="hotpotqa", id=qid, method="ircot", question="Who?", answers=["Ann"],
        prediction="x", f1=f1, llm_calls=calls, decisions=[], options={"calibration": True},
    )  # fmt: skip
    row.update(extra)
    return row


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_confident_plain_answer_stops_at_the_gate_and_an_unsure_one_pays_for_the_loop(
    tmp_path: Path,
) -> None:
    plain = gr.plain_rag(
        [_signal_row("q1", math.log(0.95), "Ann"), _signal_row("q2", math.log(0.2), "Bob")],
        "logprob_mean",
    )
    assert plain[("hotpotqa", "q1")]["p"] == pytest.approx(0.95)
    run = _write(tmp_path / "run", [_method_row("q1", 0.0, 5), _method_row("q2", 1.0, 5)])
    rows = gr.gated_rows([run], plain, None)
    assert {r["llm_calls"] for r in rows} == {6.0}  # the gate's call comes first
    curves = gr.report(rows, "logprob_mean", 0.005, caps=False)
    grid = {pt["threshold"]: pt for pt in curves["ircot"]["grid"]}
    # p 0.9: q1 stops with plain RAG's right answer, q2 loops and the loop gets it right
    assert grid[0.9]["f1"] == 1.0 and grid[0.9]["llm_calls"] == pytest.approx(3.5)
    assert grid[0.9]["stop_rate"] == 0.5
    # never stopping: the loop's answers, every call paid
    assert grid[1.01]["f1"] == 0.5 and grid[1.01]["llm_calls"] == 6.0
    # 0.9 to 0.95 stop the same questions: ties go to the higher threshold
    assert curves["ircot"]["chosen"]["threshold"] == 0.95
    assert curves["ircot"]["profile"] == {
        "gate": "logprob_mean",
        "gate_threshold": round(math.log(0.95), 4),
    }
    assert grid[0.9]["unbeaten"] and not grid[1.01]["unbeaten"]


def test_the_papers_call_count_caps_the_choice(tmp_path: Path) -> None:
    plain = gr.plain_rag([_signal_row("q1", math.log(0.5), "Bob")], "logprob_mean")
    run = _write(tmp_path / "run", [_method_row("q1", 1.0, 9)])
    rows = gr.gated_rows([run], plain, None)
    curves = gr.report(rows, "logprob_mean", 0.005, caps=True)
    entry = curves["ircot"]
    assert entry["cap"] == 6.0
    assert entry["chosen"]["llm_calls"] <= 6.0 and entry["chosen"]["f1"] == 0.0
    assert entry["uncapped"]["chosen"]["f1"] == 1.0  # the loop's gain, at 10 calls
    assert "Without that cap" in gr.markdown(curves, "logprob_mean", "cmd")


def test_rows_of_evaluation_questions_are_refused() -> None:
    with pytest.raises(SystemExit, match="not a calibration question"):
        gr.plain_rag([_signal_row("q1", -0.1, "Ann", index=12)], "logprob_mean")


def test_rows_from_a_gated_run_are_replayed_as_they_are(tmp_path: Path) -> None:
    gate = {"node": "gate", "p": 0.97, "answer": "Ann", "path": "logprobs", "decision": "continue"}
    run = _write(tmp_path / "run", [_method_row("q9", 0.0, 4, decisions=[gate])])
    rows = gr.gated_rows([run], {}, None)
    assert rows[0]["source"] == "gated run" and rows[0]["llm_calls"] == 4
    grid = {pt["threshold"]: pt for pt in gr.report(rows, "logprob_mean", 0.005)["ircot"]["grid"]}
    assert grid[0.95]["f1"] == 1.0 and grid[0.95]["llm_calls"] == 1.0


def test_the_command_writes_both_reports_beside_a_dotted_model_name(tmp_path: Path) -> None:
    signals = tmp_path / "signals.jsonl"
    signals.write_text(json.dumps(_signal_row("q1", math.log(0.9), "Ann")) + "\n")
    run = _write(tmp_path / "run", [_method_row("q1", 0.0, 3)])
    out = tmp_path / "replay" / "qwen2.5-coder-1.5b"
    gr.main(["--signals", str(signals), "--runs", str(run), "--out", str(out), "--profile", "none"])
    assert json.loads(Path(f"{out}.json").read_text())["ircot"]["questions"] == 1
    assert Path(f"{out}.md").read_text().startswith("# The gate replayed")
