"""Quality per cost in every report: the Pareto front of F1 against LLM calls and seconds,
cost intervals, the plot and the "unbeaten on" column."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gaprag.eval.report import write_report
from gaprag.eval.results import RESULT_FIELDS
from gaprag.eval.stats import pareto_front


@pytest.mark.parametrize(
    ("points", "front"),
    [
        # cheaper and as good beats; better at more cost stays
        ({"a": (0.5, 1.0), "b": (0.5, 2.0), "c": (0.6, 3.0)}, ["a", "c"]),
        # better and cheaper beats everything
        ({"a": (0.5, 1.0), "b": (0.7, 0.5), "c": (0.6, 3.0)}, ["b"]),
        # equal on both: neither beats the other
        ({"a": (0.5, 1.0), "b": (0.5, 1.0)}, ["a", "b"]),
        # worse at the same cost is beaten
        ({"a": (0.4, 1.0), "b": (0.5, 1.0)}, ["b"]),
        ({}, []),
    ],
)
def test_pareto_front_keeps_what_nothing_beats_on_both(
    points: dict[str, tuple[float, float]], front: list[str]
) -> None:
    assert pareto_front(points) == front


def _row(
    method: str, dataset: str, qid: str, f1: float, calls: int, seconds: float
) -> dict[str, Any]:
    row: dict[str, Any] = {k: None for k in RESULT_FIELDS}
    row.update(
        dataset=dataset, id=qid, method=method, question="?", answers=["a"], prediction="a",
        em=f1, f1=f1, acc=f1, support_recall=1.0, llm_calls=calls, prompt_tokens=100,
        completion_tokens=10, retrieval_calls=1, iterations=1, stop_reason="answered",
        wall_s=seconds,
    )  # fmt: skip
    return row


def test_report_marks_the_front_and_plots_quality_per_cost(tmp_path: Path) -> None:
    rows = []
    for ds in ("a", "b"):
        for i, f1 in enumerate([1.0, 0.0, 1.0, 0.0]):
            rows.append(_row("standard_rag", ds, f"q{i}", f1, 1, 2.0))
            # better but dearer: on the front
            rows.append(_row("loop", ds, f"q{i}", 1.0 if i < 3 else 0.0, 4 + i, 10.0))
            # no better than plain RAG and dearer: beaten on both costs
            rows.append(_row("dear", ds, f"q{i}", f1, 6, 20.0))
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    summary = write_report([runs], out, seed=0, n_boot=200)

    assert summary["datasets"]["a"]["frontier"] == {
        "llm_calls": ["standard_rag", "loop"], "wall_s": ["standard_rag", "loop"]
    }  # fmt: skip
    assert summary["pooled_frontier"]["llm_calls"] == ["standard_rag", "loop"]
    lo, hi = summary["pooled"]["loop"]["cost_ci"]["llm_calls"]
    assert 4.0 <= lo <= summary["pooled"]["loop"]["cost"]["llm_calls"] == 5.5 <= hi <= 7.0
    assert summary["datasets"]["a"]["methods"]["dear"]["cost_ci"]["wall_s"] == [20.0, 20.0]

    for name in ("a", "b", "pooled"):
        plot = out / f"plots/{name}_f1_per_cost.png"
        assert plot.read_bytes()[:4] == b"\x89PNG"
        assert f"plots/{name}_f1_per_cost.png" in summary["plots"][name]
    md = (out / "summary.md").read_text()
    assert "| unbeaten on |" in md and "![pooled_f1_per_cost](plots/pooled_f1_per_cost.png)" in md
    pooled_loop = next(x for x in md.splitlines() if x.startswith("| loop | 8 |"))
    pooled_dear = next(x for x in md.splitlines() if x.startswith("| dear | 8 |"))
    assert "| calls, s |" in pooled_loop and "| – |" in pooled_dear


def test_html_report_shows_the_pooled_front_and_its_plot(tmp_path: Path) -> None:
    rows = [
        _row(m, ds, f"q{i}", f1, calls, 2.0 * calls)
        for ds in ("a", "b")
        for i in range(2)
        for m, f1, calls in (("standard_rag", 0.5, 1), ("dear", 0.5, 5))
    ]
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_report([runs], tmp_path / "out", seed=0, n_boot=100)
    html = (tmp_path / "out" / "report.html").read_text()
    pooled = html[html.index('id="pooled"') : html.index("</table>", html.index('id="pooled"'))]
    assert "<th>unbeaten on</th>" in pooled
    assert "<td>calls, s</td>" in pooled and "<td>–</td>" in pooled
    assert 'title="pooled_f1_per_cost"' in html
