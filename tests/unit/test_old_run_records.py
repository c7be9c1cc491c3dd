"""Run records (``run.json``) written by earlier versions still read under today's setting names:
``answer_style`` (short or paper) is ``reader``."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from gaprag.errors import InputError
from gaprag.eval import write_report
from gaprag.eval.record import check_resume, current_settings
from gaprag.eval.results import RESULT_FIELDS

OLD_RUN = {
    "dataset": "d",
    "dataset_sha256": "abc",
    "methods": {"standard_rag": {"answer_style": "paper", "top_k": 3}},
    "settings": {"standard_rag": {"answer_style": "paper", "reader": "short", "top_k": 3}},
}


def _row(qid: str) -> dict[str, Any]:
    row: dict[str, Any] = {k: None for k in RESULT_FIELDS}
    row.update(
        dataset="d", id=qid, method="standard_rag", question="?", answers=["a"], prediction="a",
        em=1.0, f1=1.0, acc=1.0, llm_calls=1, prompt_tokens=10, completion_tokens=1,
        retrieval_calls=1, iterations=1, stop_reason="answered", wall_s=0.1,
    )  # fmt: skip
    return row


def test_answer_style_reads_as_reader() -> None:
    assert current_settings({"answer_style": "paper", "top_k": 3}) == {
        "reader": "paper",
        "top_k": 3,
    }
    assert current_settings({"answer_style": "", "reader": "short"}) == {"reader": "short"}
    # a reader set to something else than its default was the one in force
    assert current_settings({"answer_style": "paper", "reader": "ranked"}) == {"reader": "ranked"}


def test_an_old_runs_selection_settings_read_under_todays_names_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = current_settings({"select": "logprob", "select_margin": 0.1, "top_k": 3})
    assert got == {
        "answer_choice": "logprob",
        "answer_scoring": "logprob",
        "choice_margin": 0.1,
        "top_k": 3,
    }


def test_report_of_an_old_run_shows_its_reader(tmp_path: Path) -> None:
    run = tmp_path / "old"
    run.mkdir()
    (run / "results.jsonl").write_text("".join(json.dumps(_row(q)) + "\n" for q in ("q1", "q2")))
    (run / "run.json").write_text(json.dumps(OLD_RUN))
    summary = write_report([run], tmp_path / "report", n_boot=50, plots=False)
    settings = summary["datasets"]["d"]["methods"]["standard_rag"]["settings"]
    assert settings["options"] == {"reader": "paper", "top_k": 3}
    assert settings["passages_per_prompt"] == 3


def test_resuming_an_old_run_compares_options_under_todays_names(tmp_path: Path) -> None:
    run_file = tmp_path / "run.json"
    run_file.write_text(json.dumps(OLD_RUN))
    same = {"dataset_sha256": "abc", "methods": {"standard_rag": {"reader": "paper", "top_k": 3}}}
    assert check_resume(run_file, same)["dataset_sha256"] == "abc"
    other = {"dataset_sha256": "abc", "methods": {"standard_rag": {"reader": "ranked", "top_k": 3}}}
    with pytest.raises(InputError, match="options for standard_rag differ"):
        check_resume(run_file, other)
