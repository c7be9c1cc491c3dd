"""The offline replay of escalating_rag's rules on rows that hold every candidate, and the
choice of its settings on calibration questions only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.replay.candidates import Candidate as Answer
from lab.replay.escalation import (
    Question,
    Setting,
    fit,
    measure,
    questions,
    run,
    write_profile,
)


def question(
    plain: tuple[str, float, float],
    ircot: tuple[str, float | None, float, int],
    rfm: tuple[str, float | None, float, int],
    index: int = 60,
) -> Question:
    """plain: (answer, p, f1); a loop: (answer, p, f1, calls)."""
    return Question(
        dataset="hotpotqa",
        id=f"q{index}",
        index=index,
        plain=Answer(plain[0], plain[1], plain[2], 1),
        loops={"ircot": Answer(*ircot), "rfm_rag": Answer(*rfm)},
    )


SETTING = Setting(first="ircot", second="rfm_rag", gate_p=0.8, escalate_p=0.6)


def test_a_confident_plain_answer_costs_one_call() -> None:
    q = question(("Paris", 0.9, 1.0), ("Lyon", 0.9, 0.0, 1), ("Nice", 0.9, 0.0, 4))
    assert run(q, SETTING) == (1.0, 1, "gate_confident")


def test_a_confident_first_loop_stops_before_the_second() -> None:
    q = question(("Paris", 0.5, 0.0), ("Lyon", 0.7, 1.0, 1), ("Nice", 0.9, 0.0, 4))
    assert run(q, SETTING)[:2] == (1.0, 2)


def test_an_unsure_first_loop_escalates_and_agreement_wins() -> None:
    q = question(("Paris", 0.5, 1.0), ("Lyon", 0.4, 0.0, 1), ("paris", 0.3, 1.0, 4))
    assert run(q, SETTING) == (1.0, 6, "agreed")


def test_the_call_budget_cuts_the_second_loop() -> None:
    q = question(("Paris", 0.5, 0.0), ("Lyon", 0.55, 1.0, 1), ("Nice", 0.9, 0.0, 9))
    f1, calls, _ = run(q, Setting("ircot", "rfm_rag", 0.8, 0.6, call_budget=6))
    assert (f1, calls) == (1.0, 6)


def test_the_fit_keeps_within_the_calls_and_uses_only_calibration_questions() -> None:
    easy = question(("Paris", 0.95, 1.0), ("Paris", 0.9, 1.0, 1), ("Paris", 0.9, 1.0, 4))
    hard = question(("Rome", 0.4, 0.0), ("Lyon", 0.3, 0.0, 1), ("Nice", 0.2, 1.0, 4), 61)
    reported = question(("Rome", 0.1, 0.0), ("Oslo", 0.1, 1.0, 1), ("Bern", 0.1, 0.0, 4), 3)
    setting, result = fit([easy, hard, reported], max_calls=3.0)
    assert result["n"] == 2 and result["calls"] <= 3.0
    assert result["f1"] == pytest.approx(measure([easy, hard], setting)["f1"])
    assert result["f1"] == 1.0 and "rfm_rag" in (setting.first, setting.second)
    with pytest.raises(ValueError):
        fit([easy, hard], max_calls=0.5)


def test_rows_become_questions_with_each_methods_loop_and_score(tmp_path: Path) -> None:
    gate = {"node": "gate", "round": 0, "decision": "continue", "p": 0.5, "answer": "Paris"}
    base = {"dataset": "hotpotqa", "id": "a", "question": "Capital?", "answers": ["Lyon"]}
    rows = [
        {**base, "method": "standard_rag", "prediction": "Paris", "f1": 0.0, "llm_calls": 1},
        {
            **base,
            "method": "ircot",
            "prediction": "Lyon",
            "f1": 1.0,
            "llm_calls": 2,
            "decisions": [gate],
        },
    ]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    score = {"method": "ircot", "id": "a", "path": "scored", "p": 0.7}
    (tmp_path / "selection_scores.jsonl").write_text(json.dumps(score) + "\n")
    (q,) = questions([tmp_path])
    assert q.plain == Answer("Paris", 0.5, 0.0, 1)
    assert q.loops == {"ircot": Answer("Lyon", 0.7, 1.0, 1)}


def test_the_chosen_setting_is_written_into_the_profile_and_kept_elsewhere(tmp_path: Path) -> None:
    import tomllib

    from gaprag.context import effective_settings
    from gaprag.graphs import context_class
    from gaprag.profiles import apply_profile, resolve

    profile = tmp_path / "m.toml"
    profile.write_text('# a header\nmodel = "m"\n[ircot]\ngate_threshold = -0.1\n')
    setting = Setting("ircot", "none", gate_p=0.8, escalate_p=0.5, margin=0.1, call_budget=6)
    write_profile(profile, setting, {"f1": 0.5, "calls": 2.0}, {"date": "2026-11-27"})
    data = tomllib.loads(profile.read_text())
    assert profile.read_text().startswith("# a header\n")
    assert data["ircot"] == {"gate_threshold": -0.1}
    assert data["escalating_rag"]["gate_threshold"] == pytest.approx(-0.2231, abs=1e-4)
    assert data["escalating_rag"]["second_loop"] == "none"
    assert data["calibration"]["escalating_rag"]["calls"] == 2.0
    cls = context_class("escalating_rag")
    merged, _ = apply_profile(
        "escalating_rag", {}, resolve(str(profile), None), set(f for f in effective_settings(cls))
    )
    assert merged["first_loop"] == "ircot" and merged["call_budget"] == 6
