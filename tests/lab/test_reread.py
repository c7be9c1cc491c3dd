"""The offline reread tie-break (lab.replay.reread, ``python -m lab replay reread``): which rows are reread, with which
request, resumably, and how each rule picks between the candidates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gaprag.llm.client import LLM
from gaprag.metrics import f1_score
from gaprag.testing import ScriptedChatModel
from lab.__main__ import main
from lab.replay import reread
from lab.replay.candidates import Candidate, Pair, pair
from lab.replay.reread import REREAD_PASSAGES, pick, reread_messages

QUESTION = "Which genus has more species, Dracula or Pistacia?"
PARAGRAPHS = [{"id": f"p{i}", "title": f"T{i}", "text": f"paragraph {i}"} for i in range(12)]


def row(qid: str, method: str, prediction: str, f1: float, gate: str | None, **extra: Any) -> dict[str, Any]:  # fmt: skip
    decisions = [{"node": "gate", "decision": "continue", "p": 0.5, "answer": gate}] if gate else []
    return {"dataset": "tiny", "id": qid, "method": method, "question": QUESTION,
            "answers": ["Dracula"], "prediction": prediction, "f1": f1, "error": None,
            "stop_reason": "answered", "decisions": decisions,
            "shown_ids": ["p0", "p1", "p2", "p3", "p4", "p5"], "evidence_ids": ["p11", "p1"], **extra}  # fmt: skip


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A run of a 61-question set: plain RAG and IRCoT on questions 5 and 60, the two
    candidates differing on both; RFM-RAG agreeing with plain RAG on question 5."""
    data = tmp_path / "tiny.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": QUESTION, "answers": ["Dracula"], "paragraphs": PARAGRAPHS if i == 0 else []}) + "\n" for i in range(61)))  # fmt: skip
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"dataset": "tiny", "dataset_path": str(data)}))
    rows = [row("q5", "standard_rag", "Pistacia", 0.0, None),
            row("q60", "standard_rag", "Pistacia", 0.0, None),
            row("q5", "ircot", "Dracula", 1.0, "Pistacia"),
            row("q60", "ircot", "Pistacia genus", 0.0, "Dracula"),
            row("q5", "rfm_rag", "pistacia", 0.0, "Pistacia")]  # fmt: skip
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_the_reread_request_is_plain_rag_s_over_the_passages_shown_in_order() -> None:
    messages = reread_messages(QUESTION, PARAGRAPHS)
    text = str(messages)
    assert QUESTION in text and "paragraph 0" in text
    assert f"paragraph {REREAD_PASSAGES - 1}" in text and f"paragraph {REREAD_PASSAGES}" not in text
    assert text.index("paragraph 1") < text.index("paragraph 2")


async def test_only_rows_whose_candidates_differ_are_reread_and_rereading_resumes(run_dir: Path) -> None:  # fmt: skip
    chat = ScriptedChatModel(default="Dracula", reply_logprobs={"Dracula": [[("Dracula", -0.2)]]})
    llm = LLM(chat, supports_logprobs=True)
    assert await reread.areread_runs([run_dir], llm, limit=1) == 1
    assert await reread.areread_runs([run_dir], llm) == 1
    assert await reread.areread_runs([run_dir], llm) == 0
    assert len(chat.calls) == 2  # ircot's two rows; RFM-RAG agreed with plain RAG
    records = reread.read_rereads(run_dir)
    assert set(records) == {("ircot", "q5"), ("ircot", "q60")}
    assert records[("ircot", "q5")]["answer"] == "Dracula"
    # plain RAG's five (the first shown), then the method's evidence not among them
    assert records[("ircot", "q5")]["passages"] == 6
    assert records[("ircot", "q5")]["logprob_mean"] == pytest.approx(-0.2)
    shown = str(chat.calls[0]["messages"][-1][1])
    assert "paragraph 4" in shown and "paragraph 11" in shown and "paragraph 5" not in shown
    assert shown.index("paragraph 4") < shown.index("paragraph 11")


def candidates(plain: str, loop: str) -> Pair:
    return Pair(dataset="d", method="ircot", id="q", index=None, question=QUESTION,
                answers=("Dracula",), plain=None, run_f1=0.0,
                gate=Candidate(plain, None, f1_score(plain, ["Dracula"])),
                loop=Candidate(loop, None, f1_score(loop, ["Dracula"])))  # fmt: skip


@pytest.mark.parametrize(
    ("reread_answer", "expected"),
    [
        ("Dracula", {"reread": 1.0, "vote_loop": 1.0, "vote_plain": 1.0, "vote_reread": 1.0}),
        ("the Pistacia", {"reread": 0.0, "vote_loop": 0.0, "vote_plain": 0.0, "vote_reread": 0.0}),
        ("Orchids", {"reread": 0.0, "vote_loop": 0.0, "vote_plain": 1.0, "vote_reread": 0.0}),
    ],
    ids=["names_plain_rag_s", "names_the_loop_s", "names_neither"],
)
def test_the_vote_keeps_the_candidate_the_reread_names_else_each_rule_s_fallback(
    reread_answer: str, expected: dict[str, float]
) -> None:
    p = candidates("Dracula", "Pistacia")
    assert {rule: pick(rule, p, reread_answer) for rule in reread.RULES} == expected


def test_agreeing_candidates_keep_their_answer_whatever_the_reread() -> None:
    assert pick("reread", candidates("Dracula", "dracula"), "Orchids") == 1.0


def test_escalating_rag_rows_take_their_recorded_candidates() -> None:
    r = row("q1", "escalating_rag", "Dracula", 1.0, "Pistacia")
    r["candidates"] = [{"method": "standard_rag", "answer": "Pistacia"},
                       {"method": "ircot", "answer": "Dracula"}]  # fmt: skip
    found = pair(r)
    assert found is not None and (found.gate.answer, found.loop.answer) == ("Pistacia", "Dracula")
    assert (found.gate.f1, found.loop.f1) == (0.0, 1.0)
    assert not reread.tie(pair({**r, "stop_reason": "gate_confident"}))


def test_the_command_replays_the_rules_per_method_and_part(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (run_dir / reread.REREAD_FILE).write_text(
        json.dumps({"method": "ircot", "id": "q60", "answer": "Dracula"}) + "\n"
    )
    assert main(["replay", "reread", str(run_dir), "--methods", "ircot"]) == 0
    out = capsys.readouterr().out
    # question 60: the run said Pistacia genus (0), the reread names plain RAG's Dracula (1)
    assert "| ircot | fit | 1 | 1.00 | 0.000 | 0.000 | 1.000 | 1.000 | 1.000 | 1.000 |" in out
    assert "| ircot | check | 1 | 0.00 | 0.000 | 1.000 | 1.000 | 1.000 | 1.000 | 1.000 |" in out
    assert main(["replay", "reread", str(run_dir.parent)]) == 2
