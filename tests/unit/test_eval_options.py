"""The evaluation's options are declared once (:class:`gaprag.eval.EvalSettings`): the CLI, the
keyword API and the planned run take them from there; and the runner stays small enough to
read."""

from __future__ import annotations

import ast
import dataclasses
import json
import typing
from pathlib import Path
from typing import Any

import pytest

import gaprag.eval.runner as runner
from gaprag.cli import build_parser, main
from gaprag.eval import EvalSettings, evaluate
from gaprag.testing import ScriptedChatModel

RUNNER = Path(runner.__file__)


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.jsonl"
    records = [
        {
            "id": f"q{i}",
            "question": f"Question {i}?",
            "answers": ["yes"],
            "supporting": [],
            "paragraphs": [{"id": f"p{i}", "title": f"T{i}", "text": f"Paragraph {i}."}],
        }
        for i in range(3)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture
def planned(monkeypatch: pytest.MonkeyPatch) -> list[runner.Run]:
    """The runs :func:`evaluate` plans; none is carried out."""
    runs: list[runner.Run] = []

    async def capture(run: runner.Run) -> dict[str, Any]:
        runs.append(run)
        return {"out": str(run.out_dir)}

    monkeypatch.setattr(runner, "run_questions", capture)
    return runs


def test_runner_has_no_function_over_60_lines_and_at_most_400_lines() -> None:
    source = RUNNER.read_text(encoding="utf-8")
    assert len(source.splitlines()) <= 400, f"{RUNNER} has {len(source.splitlines())} lines"
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > 60
    ]
    assert not long, f"functions over 60 lines in {RUNNER}: {long}"


def test_settings_have_resolvable_type_hints() -> None:
    hints = typing.get_type_hints(EvalSettings)
    assert set(hints) == {f.name for f in dataclasses.fields(EvalSettings)}


def test_keywords_and_a_settings_object_plan_the_same_run(
    dataset: Path, tmp_path: Path, planned: list[runner.Run]
) -> None:
    llm = ScriptedChatModel(default="yes")
    keywords: dict[str, Any] = dict(
        methods="standard_rag", dataset=dataset, limit=2, out=tmp_path / "a", llm=llm, seed=3
    )
    evaluate(**keywords)
    evaluate(EvalSettings(**keywords))
    evaluate(EvalSettings(**keywords), limit=1, out=tmp_path / "b")  # keywords replace fields
    first, second, third = planned
    assert first.settings == second.settings == EvalSettings(**keywords)
    assert [ex.id for ex in first.selected] == [ex.id for ex in second.selected] == ["q0", "q1"]
    assert third.settings == dataclasses.replace(first.settings, limit=1, out=tmp_path / "b")
    assert [ex.id for ex in third.selected] == ["q0"] and third.out_dir == tmp_path / "b"


def test_an_unknown_option_is_refused_before_anything_runs(
    dataset: Path, planned: list[runner.Run]
) -> None:
    with pytest.raises(TypeError, match="max_error"):
        evaluate(methods="standard_rag", dataset=dataset, max_error=3)
    assert not planned


def test_the_eval_flags_default_to_the_settings_defaults() -> None:
    args = build_parser().parse_args(["eval", "--methods", "standard_rag", "--dataset", "x"])
    defaults = EvalSettings(methods="standard_rag", dataset="x")
    for flag, field in [
        ("limit", "limit"),
        ("offset", "offset"),
        ("concurrency", "concurrency"),
        ("resume", "resume"),
        ("max_errors", "max_errors"),
        ("base_url", "base_url"),
        ("model", "model"),
        ("store", "store"),
        ("seed", "seed"),
    ]:
        assert getattr(args, flag) == getattr(defaults, field), flag
    assert args.quiet is not defaults.progress


def test_the_eval_command_hands_its_flags_over_as_one_settings_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[EvalSettings] = []

    def fake(settings: EvalSettings) -> dict[str, Any]:
        seen.append(settings)
        return {"new_rows": 0, "skipped": 0, "errors": 0}

    monkeypatch.setattr(runner, "evaluate", fake)
    out = tmp_path / "out"
    argv = ["eval", "--methods", "standard_rag,migres", "--dataset", "hotpotqa", "--limit", "7"]
    argv += ["--out", str(out), "--concurrency", "2", "--set", "top_k=3", "--quiet"]
    assert main(argv) == 0
    (settings,) = seen
    assert settings == EvalSettings(
        methods=["standard_rag", "migres"],
        dataset="hotpotqa",
        limit=7,
        out=out,
        concurrency=2,
        sets=["top_k=3"],
        variants=[],
        progress=False,
    )
    assert "0 new results" in capsys.readouterr().err
