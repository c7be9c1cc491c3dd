"""The headroom columns of ``gaprag report``: the per-question oracle over a configuration's
candidates (plain RAG's row, the method's row, the gate's own answer) and the share captured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gaprag.eval.html import render_html
from gaprag.eval.markdown import render_markdown
from gaprag.eval.stats import captured_share, headroom, headroom_cells, summarize
from tests.scripts import load_script


def row(
    dataset: str, qid: str, method: str, f1: float, answers: list[str], gate: str | None = None
) -> dict[str, Any]:
    decisions = [] if gate is None else [{"node": "gate", "round": 0, "decision": "continue",
                                          "p": 0.5, "path": "logprobs", "threshold": 0.9,
                                          "answer": gate}]  # fmt: skip
    return {"dataset": dataset, "id": qid, "method": method, "f1": f1, "em": f1, "acc": f1,
            "answers": answers, "decisions": decisions, "error": None, "llm_calls": 1,
            "support_recall": 1.0, "retrieval_recall": 1.0}  # fmt: skip


ROWS = [
    # set a: the method wins q1, loses q2 where its gate's answer was right
    row("a", "q1", "standard_rag", 0.0, ["Oslo"]),
    row("a", "q1", "rfm_rag", 1.0, ["Oslo"], gate="Bergen"),
    row("a", "q2", "standard_rag", 1.0, ["Paris"]),
    row("a", "q2", "rfm_rag", 0.0, ["Paris"], gate="Paris"),
    # set b: the gate's answer is right where neither row is (scored with the rows' F1:
    # articles dropped); q4 has no gate answer
    row("b", "q3", "standard_rag", 0.0, ["Rome"]),
    row("b", "q3", "rfm_rag", 0.5, ["Rome"], gate="the Rome"),
    row("b", "q4", "standard_rag", 0.5, ["Lake Geneva"]),
    row("b", "q4", "rfm_rag", 0.5, ["Lake Geneva"]),
]


@pytest.fixture(scope="module")
def summary() -> dict[str, Any]:
    return summarize(ROWS, n_boot=20)


def test_oracle_takes_the_best_candidate_per_question_including_the_gate_answer(
    summary: dict[str, Any],
) -> None:
    pooled = summary["pooled"]["rfm_rag"]["headroom"]
    assert pooled["n"] == 4
    assert pooled["plain"] == pytest.approx(0.375)
    assert pooled["method"] == pytest.approx(0.5)
    assert pooled["oracle"] == pytest.approx((1 + 1 + 1 + 0.5) / 4)
    assert pooled["in_run"] == pytest.approx((1 + 1 + 1 + 0.5) / 4)
    assert pooled["gate_answers"] == 3
    assert pooled["captured"] == pytest.approx((0.5 - 0.375) / (0.875 - 0.375))
    assert "headroom" not in summary["pooled"]["standard_rag"]


def test_headroom_is_reported_per_set(summary: dict[str, Any]) -> None:
    a = summary["datasets"]["a"]["methods"]["rfm_rag"]["headroom"]
    b = summary["datasets"]["b"]["methods"]["rfm_rag"]["headroom"]
    assert (a["plain"], a["method"], a["oracle"], a["captured"]) == (0.5, 0.5, 1.0, 0.0)
    assert (b["plain"], b["method"], b["oracle"]) == (0.25, 0.5, 0.75)
    assert b["captured"] == pytest.approx(0.5)


def test_in_run_oracle_leaves_plain_rag_s_row_out() -> None:
    base = [row("a", "q", "standard_rag", 1.0, ["Oslo"])]
    other = [row("a", "q", "ircot", 0.0, ["Oslo"], gate="Bergen")]
    h = headroom(base, other)
    assert h is not None
    assert (h["oracle"], h["in_run"], h["method"]) == (1.0, 0.0, 0.0)


def test_no_share_when_the_oracle_is_no_better_than_plain_rag() -> None:
    base = [row("a", "q", "standard_rag", 1.0, ["Oslo"])]
    other = [row("a", "q", "migres", 0.5, ["Oslo"])]
    h = headroom(base, other)
    assert h is not None and h["oracle"] == 1.0 and h["captured"] is None
    assert headroom_cells({"headroom": h}) == ["1.000", "–"]
    assert captured_share(0.4, 0.3, 0.3) is None
    assert headroom(base, [row("a", "other", "migres", 0.5, ["Oslo"])]) is None


def test_summary_md_shows_oracle_and_share_beside_the_delta(summary: dict[str, Any]) -> None:
    text = render_markdown(summary, [], {})
    pooled = next(line for line in text.splitlines() if line.startswith("| method | n | EM"))
    assert "| ΔF1 vs standard_rag | wins / losses | oracle F1 | captured | LLM calls |" in pooled
    line = next(line for line in text.splitlines() if line.startswith("| rfm_rag | 4 |"))
    assert "| 0.875 | 25% | 1.00 |" in line
    per_set = [x for x in text.replace("**", "").splitlines() if x.startswith("| rfm_rag | 2 |")]
    assert [x.split(" | ")[-4:-2] for x in per_set] == [["1.000", "0%"], ["0.750", "50%"]]


def test_report_html_shows_oracle_and_share(summary: dict[str, Any], tmp_path: Path) -> None:
    page = render_html(summary, ROWS, [], tmp_path, {})
    assert page.count("<th>oracle F1</th><th>captured</th>") == 3  # pooled and each set
    assert '<td class="n">0.875</td><td class="n">25%</td>' in page


def test_readme_tables_add_the_headroom_columns_when_the_summary_has_them(
    summary: dict[str, Any],
) -> None:
    tables = load_script("scripts/readme_tables.py")
    lines = tables.overview(summary).splitlines()
    assert "| ΔF1 vs plain RAG [95% CI] | oracle F1 | captured | LLM calls / q |" in lines[0]
    assert lines[3].startswith("| RFM-RAG |") and "| 0.875 | 25% |" in lines[3]
    assert tables.deltas(summary).splitlines()[2].endswith("| 2 / 1 | 0.875 | 25% |")
