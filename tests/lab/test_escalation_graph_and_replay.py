"""The offline replay of escalating_rag (lab.replay.escalation) takes the graph's steps: on
the candidates a full run recorded, the replay under any setting gives the answer, the stop
reason and the LLM calls the graph gives under that setting, through a second rung, a loop
skipped for want of calls and a loop cut by the call budget; on the committed run's rows it
gives each row's answer, stop reason and calls."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from gaprag import build_graph
from gaprag.eval.record import current_settings
from gaprag.llm.client import LLM
from gaprag.nodes.gate import GATE_STOP
from gaprag.stores.store import Store
from lab.replay.candidates import Candidate
from lab.replay.escalation import Question, Setting, run
from tests.methods.escalating_rag import SURE, UNSURE, Q, model_for

GATE = -0.5  # logprob_mean: plain RAG's p of at least e^-0.5 ends the question
FIRST, SECOND = "ircot", "missing_knowledge"


def graph_run(store: Store, plain: Any, loop: str, loop_logprob: float, **options: Any) -> Any:
    graph = build_graph(
        "escalating_rag",
        llm=LLM(model_for(plain, loop, loop_logprob), supports_logprobs=True),
        retriever=store,
        profile=None,
        first_loop=FIRST,
        **{"gate_threshold": GATE, "second_loop": SECOND, **options},
    )
    return graph.invoke({"question": Q})


def recorded(store: Store, plain: Any, loop: str, loop_logprob: float) -> Question:
    """The rows a calibration run records: plain RAG's answer scored but not stopping, every
    loop run to its end (no choice, no stop, a large budget), each candidate with a distinct
    F1 that names it."""
    out = graph_run(
        store, plain, loop, loop_logprob,
        gate_threshold=100.0, answer_choice="off", escalate_threshold=1.5, call_budget=40,
    )  # fmt: skip
    gate = next(d for d in out["decisions"] if d["node"] == "gate")
    f1 = {"standard_rag": 0.1, FIRST: 0.2, SECOND: 0.3}
    loops = {
        c["method"]: Candidate(c["answer"], c["p"], f1[c["method"]], c["llm_calls"])
        for c in out["candidates"][1:]
    }
    assert set(loops) == {FIRST, SECOND}
    return Question("hotpotqa", "q", 60, Candidate(gate["answer"], gate["p"], 0.1, 1), loops)


SCENARIOS = [
    pytest.param(SURE, "Lyon", -1.0, {}, id="plain-rag-confident"),
    pytest.param(UNSURE, "Lyon", -0.05, {"escalate_threshold": 0.9}, id="first-loop-confident"),
    pytest.param(UNSURE, "Paris", -2.0, {"escalate_threshold": 0.99}, id="first-loop-agrees"),
    pytest.param(UNSURE, "Lyon", -1.0, {"escalate_threshold": 0.9}, id="second-rung"),
    pytest.param(UNSURE, "Lyon", -1.0, {"second_loop": "none"}, id="no-second-loop"),
    pytest.param(UNSURE, "Lyon", -1.0, {"call_budget": 2}, id="no-calls-for-a-loop"),
    pytest.param(UNSURE, "Lyon", -1.0, {"call_budget": 3}, id="no-calls-for-the-second"),
    pytest.param(UNSURE, "Lyon", -1.0, {"call_budget": 5}, id="second-loop-cut"),
]


@pytest.mark.parametrize(("plain", "loop", "loop_logprob", "options"), SCENARIOS)
def test_the_replay_on_recorded_candidates_gives_the_graphs_answer_stop_and_calls(
    store: Store, plain: Any, loop: str, loop_logprob: float, options: dict[str, Any]
) -> None:
    settings = {"escalate_threshold": 1.5, "call_budget": 8, **options}
    out = graph_run(store, plain, loop, loop_logprob, **settings)
    question = recorded(store, plain, loop, loop_logprob)
    setting = Setting(
        first=FIRST,
        second=str(settings.get("second_loop", SECOND)),
        gate_p=math.exp(GATE),
        escalate_p=float(settings["escalate_threshold"]),
        call_budget=int(settings["call_budget"]),
    )
    f1, calls, why = run(question, setting)
    by_f1 = {0.1: question.plain.answer} | {c.f1: c.answer for c in question.loops.values()}
    assert (by_f1[f1], why, calls) == (out["answer"], out["stop_reason"], out["usage"]["llm_calls"])


RUNS = Path(__file__).resolve().parents[2] / "docs" / "results" / "n50" / "escalation"


@pytest.mark.parametrize("name", ["hotpotqa", "2wikimultihopqa", "musique"])
def test_the_replay_on_the_committed_rows_gives_their_answers_stops_and_calls(name: str) -> None:
    """escalating_rag's committed run on questions 0-49: each row's own candidates, replayed
    under the run's settings, give the answer the row chose, its stop reason and calls."""
    run_record = json.loads((RUNS / name / "run.json").read_text(encoding="utf-8"))
    settings = current_settings(run_record["settings"]["escalating_rag"])
    setting = Setting(
        first=settings["first_loop"],
        second=settings["second_loop"],
        gate_p=math.exp(settings["gate_threshold"]),
        escalate_p=settings["escalate_threshold"],
        margin=settings["choice_margin"],
        call_budget=settings["call_budget"],
    )
    assert settings["gate"] == "logprob_mean" and settings["answer_choice"] == "logprob"
    replayed = 0
    for line in (RUNS / name / "results.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["method"] != "escalating_rag" or row.get("error"):
            continue
        gate = next(d for d in row["decisions"] if d["node"] == "gate")
        cands = row.get("candidates") or []
        answers = [gate["answer"], *(c["answer"] for c in cands[1:])]
        loops = {
            c["method"]: Candidate(c["answer"], c["p"], float(i), c["llm_calls"])
            for i, c in enumerate(cands[1:], start=1)
        }
        q = Question(name, row["id"], None, Candidate(gate["answer"], gate["p"], 0.0, 1), loops)
        f1, calls, why = run(q, setting)
        # the answer chosen (before the short-answer step): the select decision's, or the gate's
        chosen = next((d for d in row["decisions"] if d["node"] == "select"), gate)["answer"]
        assert (answers[int(f1)], why) == (chosen, row["stop_reason"]), row["id"]
        assert calls == row["llm_calls"] or why == GATE_STOP, row["id"]
        replayed += 1
    assert replayed == 50
