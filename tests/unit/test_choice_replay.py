"""The answer-choice rules and the step function (gaprag.nodes.choice.next_step) replayed on
recorded rows give the decisions the graph recorded on the same rows: escalating_rag's committed run on questions 0-49
(docs/results/n50/escalation), each row holding its candidates, its ``select`` and
``escalate`` decisions and its stop reason."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gaprag.eval.record import current_settings
from gaprag.nodes import choice

RUNS = Path(__file__).resolve().parents[2] / "docs" / "results" / "n50" / "escalation"
SETS = ("hotpotqa", "2wikimultihopqa", "musique")


def recorded(name: str) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(escalating_rag's settings, row) of each row of the set's committed run."""
    run = json.loads((RUNS / name / "run.json").read_text(encoding="utf-8"))
    settings = current_settings(run["settings"]["escalating_rag"])
    for line in (RUNS / name / "results.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["method"] == "escalating_rag" and not row.get("error"):
            yield settings, row


def decision(row: dict[str, Any], node: str) -> dict[str, Any] | None:
    return next((d for d in row["decisions"] if d["node"] == node), None)


@pytest.mark.parametrize("name", SETS)
def test_the_choice_rules_replay_the_graphs_recorded_decisions(name: str) -> None:
    replayed = 0
    for settings, row in recorded(name):
        selected, escalated = decision(row, "select"), decision(row, "escalate")
        if row["stop_reason"] == "gate_confident":
            assert selected is None and escalated is None
            continue
        assert selected is not None and escalated is not None, row["id"]
        kept = [c for c in row["candidates"] if c["answer"]]
        ladder = choice.Ladder(
            loops=tuple(
                m for m in (settings["first_loop"], settings["second_loop"]) if m != "none"
            ),
            answer_choice=settings["answer_choice"],
            choice_margin=settings["choice_margin"],
            escalate_p=settings["escalate_threshold"],
        )
        rungs = len({c["method"] for c in row["candidates"]} - {"standard_rag"})
        step = choice.next_step(
            [choice.Candidate(c["answer"], c["p"]) for c in kept],
            rungs,
            ladder,
            calls_left=settings["call_budget"] - row["llm_calls"],
        )
        chosen = step.choice
        assert chosen is not None, row["id"]
        assert kept[chosen.index]["method"] == selected["decision"], row["id"]
        assert kept[chosen.index]["answer"] == selected["answer"], row["id"]
        assert chosen.path == selected["path"], row["id"]
        assert chosen.p == pytest.approx(selected["p"], abs=1e-6), row["id"]
        assert step.stop_reason == row["stop_reason"], row["id"]
        assert escalated["decision"] == "stop"
        replayed += 1
    assert replayed >= 10  # the gate let the loop run on enough questions to compare
