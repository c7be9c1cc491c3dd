"""Offline answer selection (lab.replay: ``python -m lab replay select``): finding the call the final answer came
from, re-scoring it with a scripted model, resumable scores, and replaying rules whose
thresholds are chosen on the calibration questions only."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from gaprag.llm.client import LLM
from gaprag.testing import ScriptedChatModel
from gaprag.traces import TraceWriter
from lab.__main__ import main
from lab.replay import candidates as offline
from lab.replay import scoring, selection
from lab.replay.candidates import Candidate, Pair, pairs
from lab.replay.scoring import locate, score_trace
from lab.replay.selection import fit, replay

QUESTION = "Which genus has more species, Dracula or Pistacia?"
GATE_EVENT = {"node": "gate", "call": "gate", "signal": "logprob_mean", "value": -0.3}


def call(reply: str, *, user: str = "passages and question") -> dict[str, Any]:
    return {"messages": [{"role": "system", "content": "Answer."},
                         {"role": "human", "content": user}], "reply": reply}  # fmt: skip


def trace(
    prediction: str,
    replies: list[str],
    *,
    short: dict[str, Any] | None = None,
    stop: str = "answered",
    qid: str = "q60",
    method: str = "ircot",
) -> dict[str, Any]:
    events: list[dict[str, Any]] = [GATE_EVENT]
    if short is not None:
        events.append({"node": "short_answer", "call": "short_answer", **short})
    return {"id": qid, "method": method, "prediction": prediction, "stop_reason": stop,
            "llm_calls": [call(r) for r in replies], "trace": events}  # fmt: skip


# -- locate --------------------------------------------------------------------------------
def test_the_answer_is_found_after_the_answer_marker_of_the_last_reasoning_sentence() -> None:
    reply = "Dracula has 118 species. So the answer is: Dracula has more species."
    t = trace(
        "Dracula",
        ["Pistacia", reply],
        short={"path": "rule", "original": "Dracula has more species"},
    )
    found = locate(t)
    assert found is not None and found.call == 1
    assert reply[found.start : found.end] == "Dracula"
    assert found.start == reply.index("Dracula has more")


def test_a_rewritten_answer_comes_from_the_short_answer_call() -> None:
    t = trace("1859", ["1850", "It opened in 1859 in London", "1859"],
              short={"path": "llm", "original": "It opened in 1859 in London"})  # fmt: skip
    assert locate(t) == scoring.Located(2, 0, 4)


def test_the_answer_step_s_reply_wins_over_a_later_reply_that_mentions_it() -> None:
    # IterKey: the answer from round 1, then a keyword list that names it, then validation
    t = trace("Thomas Cooper", ["Tom", "Thomas Cooper.", '["Thomas Cooper", "actor"]', "True"],
              short={"path": "kept", "original": "Thomas Cooper"})  # fmt: skip
    found = locate(t)
    assert found is not None and found.call == 1


def test_the_gate_s_call_counts_only_where_the_gate_answered() -> None:
    looped = trace("Dracula", ["Dracula", "Reasoning. So the answer is Dracula."])
    assert locate(looped) == scoring.Located(1, 28, 35)
    gated = trace("Dracula", ["Dracula"], stop="gate_confident")
    assert locate(gated) == scoring.Located(0, 0, 7)
    assert locate(trace("Oslo", ["Dracula", "Bergen"])) is None
    assert locate(trace("", ["Dracula", "Bergen"])) is None


def test_a_json_reply_is_located_in_its_text_field() -> None:
    reply = '{"explanation": "Peter is named", "answer": {"text": "Peter", "confidence": 5}}'
    found = locate(trace("Peter", ["George", reply], method="migres"))
    assert found is not None and reply[found.start - 9 : found.end] == '"text": "Peter'


# -- scoring ---------------------------------------------------------------------------------
def scripted_llm(
    reply: str, tokens: list[list[tuple[str, float]]]
) -> tuple[LLM, ScriptedChatModel]:
    chat = ScriptedChatModel(default=reply, reply_logprobs={reply: tokens})
    return LLM(chat, supports_logprobs=True), chat


async def test_scoring_continues_the_recorded_reply_and_keeps_the_answer_tokens() -> None:
    reply = "Dracula has 118 species. So the answer is: Dracula."
    llm, chat = scripted_llm(" Dracula.", [[(" Dr", -0.1), (" P", -2.0)], [("acula", -0.3)], [(".", -0.01)]])  # fmt: skip
    record = await score_trace(llm, trace("Dracula", ["Pistacia", reply]))
    assert record["path"] == "scored"
    assert [t for t, _ in record["tokens"]] == [" Dr", "acula"]
    assert record["signals"]["logprob_mean"] == pytest.approx(-0.2)
    assert record["signals"]["logprob_margin"] == pytest.approx(1.9)
    assert record["p"] == pytest.approx(math.exp(-0.2))
    sent = chat.calls[0]
    assert sent["messages"][-1] == ("ai", "Dracula has 118 species. So the answer is:")
    assert sent["messages"][-2] == ("human", "passages and question")
    assert sent["kwargs"]["logprobs"] is True and sent["kwargs"]["temperature"] == 0.0


async def test_a_continuation_that_is_not_the_answer_is_a_mismatch() -> None:
    llm, _ = scripted_llm(" Pistacia.", [[(" Pist", -0.1)], [("acia", -0.1)]])
    record = await score_trace(llm, trace("Dracula", ["Pistacia", "So the answer is Dracula."]))
    assert record["path"] == "mismatch" and "p" not in record


async def test_no_call_where_the_gate_answered_or_the_endpoint_has_no_logprobs() -> None:
    chat = ScriptedChatModel(default="Dracula")
    gated = await score_trace(LLM(chat, supports_logprobs=True), trace("Dracula", ["Dracula"], stop="gate_confident"))  # fmt: skip
    plain = await score_trace(LLM(chat, supports_logprobs=False), trace("Dracula", ["P", "Dracula"]))  # fmt: skip
    assert (gated["path"], plain["path"]) == ("gate_stop", "no_logprobs")
    assert chat.calls == []


def gate_decision(answer: str, p: float) -> dict[str, Any]:
    return {"node": "gate", "round": 0, "decision": "continue", "p": p, "path": "logprobs",
            "threshold": 0.9, "answer": answer}  # fmt: skip


def result_row(qid: str, method: str, prediction: str, f1: float, gate: tuple[str, float] | None) -> dict[str, Any]:  # fmt: skip
    return {"dataset": "tiny", "id": qid, "method": method, "prediction": prediction, "f1": f1,
            "answers": ["Dracula"], "error": None, "stop_reason": "answered",
            "decisions": [gate_decision(*gate)] if gate else []}  # fmt: skip


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A run of a 61-question set: plain RAG and IRCoT on questions 5 and 60."""
    data = tmp_path / "tiny.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": QUESTION, "answers": ["Dracula"]}) + "\n" for i in range(61)))  # fmt: skip
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"dataset": "tiny", "dataset_path": str(data)}))
    rows = [result_row("q5", "standard_rag", "Pistacia", 0.0, None),
            result_row("q60", "standard_rag", "Pistacia", 0.0, None),
            result_row("q5", "ircot", "Dracula", 1.0, ("Pistacia", 0.4)),
            result_row("q60", "ircot", "Dracula", 1.0, ("Pistacia", 0.7))]  # fmt: skip
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    writer = TraceWriter(run)
    for qid in ("q5", "q60"):
        writer.write("ircot", trace("Dracula", ["Pistacia", "So the answer is: Dracula."], qid=qid))
    return run


async def test_scores_are_cached_beside_the_rows_and_scoring_resumes(run_dir: Path) -> None:
    llm, chat = scripted_llm(" Dracula.", [[(" Dracula", -0.5)], [(".", -0.1)]])
    assert await scoring.ascore_runs([run_dir], llm, limit=1) == 1
    assert len((run_dir / offline.SCORES).read_text().splitlines()) == 1
    assert await scoring.ascore_runs([run_dir], llm) == 1
    assert await scoring.ascore_runs([run_dir], llm) == 0
    assert len(chat.calls) == 2
    scores = offline.read_scores(run_dir)
    assert {k for k in scores} == {("ircot", "q5"), ("ircot", "q60")}
    cands = {c.id: c for c in pairs([run_dir])}
    assert cands["q60"].index == 60 and cands["q5"].index == 5
    assert cands["q60"].loop.p == pytest.approx(math.exp(-0.5))
    assert cands["q60"].gate.p == 0.7 and cands["q60"].gate.f1 == 0.0
    assert cands["q60"].plain_f1 == 0.0 and cands["q60"].loop.f1 == 1.0
    assert not cands["q60"].agree


# -- replay ----------------------------------------------------------------------------------
def cand(index: int, gate_p: float, loop_p: float | None, gate_f1: float, loop_f1: float, *, agree: bool = False, plain: float | None = None, dataset: str = "d") -> Pair:  # fmt: skip
    """A row's pair: plain RAG's answer "Paris", the loop's "Paris" too where they agree."""
    return Pair(dataset=dataset, method="rfm_rag", id=f"q{index}-{gate_p}", index=index,
                question=QUESTION, answers=("Paris",),
                plain=Candidate("Paris", None, gate_f1 if plain is None else plain, 1),
                run_f1=loop_f1, gate=Candidate("Paris", gate_p, gate_f1, 1),
                loop=Candidate("Paris" if agree else "Lyon", loop_p, loop_f1, 2))  # fmt: skip


FIT = [
    cand(60, 0.9, 0.2, 1.0, 0.0),  # the gate's answer right, and surer
    cand(61, 0.3, 0.8, 0.0, 1.0),
    cand(62, 0.6, 0.5, 0.0, 1.0),
    cand(63, 0.95, 0.9, 0.5, 0.5, agree=True),
    cand(64, 0.1, None, 0.0, 1.0),  # the method's answer not scored
]
CHECK = [cand(10, 0.92, 0.1, 1.0, 0.0), cand(11, 0.65, 0.1, 1.0, 0.0)]


def test_thresholds_are_chosen_by_f1_on_the_calibration_questions_only() -> None:
    assert fit("gate_p", FIT) == {"a": 0.9}
    assert fit("loop_p", FIT) == {"b": 0.5}
    assert fit("margin", FIT) == {"m": pytest.approx(0.7)}
    result = replay([*FIT, *CHECK])["rfm_rag"]
    gate_p = result["rules"]["gate_p"]
    assert gate_p["thresholds"] == {"a": 0.9}  # question 11 would have asked for 0.65
    assert gate_p["fit"] == {"f1": pytest.approx(4.5 / 5), "switched": 1, "captured": 1.0}
    assert gate_p["check"]["f1"] == 0.5 and gate_p["check"]["switched"] == 1
    loop = result["rules"]["loop"]
    assert loop["fit"]["f1"] == pytest.approx(3.5 / 5) and loop["fit"]["switched"] == 0
    assert result["rules"]["gate"]["fit"]["switched"] == 4  # never where the two agree
    assert result["fit"]["n"] == 5 and result["check"]["n"] == 2
    assert result["fit"]["differ"] == 4 and result["fit"]["loop_scored"] == 3
    assert result["fit"]["differ_gate"] == 0.25 and result["fit"]["differ_loop"] == 0.75
    assert result["fit"]["agree_f1"] == 0.5


def test_rules_with_thresholds_need_calibration_questions() -> None:
    result = replay(CHECK)["rfm_rag"]
    assert set(result["rules"]) == {"loop", "gate"} and result["fit"] is None


def test_the_check_applies_a_rule_on_the_reported_questions_only_against_plain_rag_and_the_run() -> (
    None
):
    other = cand(12, 0.9, 0.5, 0.0, 1.0, plain=0.5, dataset="e")
    result = selection.check([*FIT, *CHECK, other], "margin", {"rfm_rag": {"m": 0.5}})["rfm_rag"]
    # 10: the gate surer by 0.82, switched (1.0); 11: by 0.55, switched (1.0); 12: by 0.4, kept
    assert result["n"] == 3 and result["switched"] == 2
    assert result["f1"] == 1.0 and result["run"] == pytest.approx(1 / 3)
    assert result["vs_run"]["mean"] == pytest.approx(2 / 3)
    assert (result["vs_run"]["wins"], result["vs_run"]["losses"]) == (2, 0)
    assert result["vs_plain"]["mean"] == pytest.approx((0 + 0 + 0.5) / 3)
    assert result["sets"]["d"] == {"n": 2, "plain": 1.0, "run": 0.0, "rule": 1.0}
    assert result["sets"]["e"]["rule"] == 1.0
    unfitted = selection.check(CHECK, "margin", {})["rfm_rag"]  # no thresholds: the run's answer
    assert unfitted["rule"] == "loop" and unfitted["switched"] == 0 and unfitted["f1"] == 0.0
    table = selection.render_check({"rfm_rag": result})
    assert "| rfm_rag | margin (m=0.500) | **pooled** | 3 |" in table


def test_the_command_prints_the_replay(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "select", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert (
        "| ircot | fit | 1 | 0.000 | 0.000 | 1.000 | 1.000 | 1.000 | 0: – | 1 (0): 0.000 / 1.000 |"
        in out
    )
    assert "| ircot | gate_p | a=1.700 |" in out  # above every p: never switch
    assert main(["replay", "select", "--check", str(run_dir)]) == 0
    assert (
        "| method | rule | set | n | plain RAG | the run | with the rule |"
        in capsys.readouterr().out
    )
    assert main(["replay", "select", str(run_dir.parent)]) == 2


async def test_a_reply_that_repeats_the_prefix_is_read_after_it() -> None:
    # llama.cpp's server returns the prefilled start of the reply with the continuation
    llm, _ = scripted_llm("So the answer is: Dracula", [[(" Dracula", -0.25)]])
    scored = await llm.ascore_continuation([("user", "q")], "So the answer is:", " Dracula")
    assert scored is not None and scored.text == " Dracula"
    assert [(t.token, t.logprob) for t in scored.tokens or []] == [(" Dracula", -0.25)]
    assert await llm.ascore_continuation([("user", "q")], "So the answer is:", " Pistacia") is None


@pytest.mark.parametrize(
    ("argv", "module", "function", "said"),
    [
        (["select", "--score", "--methods", "iterkey"], "scoring", "score_runs", "scored 3 row(s)"),
        (["reread", "--send", "--methods", "iterkey"], "reread", "reread_runs", "sent 3 reread(s)"),
    ],
)
def test_replay_sends_its_calls_with_the_repeatable_model_before_replaying(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    module: str,
    function: str,
    said: str,
) -> None:
    import importlib

    from lab.replay import cli as offline_cli

    seen: dict[str, Any] = {}

    def calls(dirs: list[Path], model: Any, **kw: Any) -> int:
        seen.update(dirs=dirs, model=model, **kw)
        return 3

    monkeypatch.setattr(offline_cli, "_model", lambda: "the repeatable model")
    monkeypatch.setattr(importlib.import_module(f"lab.replay.{module}"), function, calls)
    run = tmp_path / "run"
    run.mkdir()
    main(["replay", argv[0], str(run), *argv[1:], "--limit", "7"])
    assert seen["model"] == "the repeatable model"
    assert seen["methods"] == ["iterkey"] and seen["limit"] == 7
    assert [Path(d) for d in seen["dirs"]] == [run]
    assert said in capsys.readouterr().err
