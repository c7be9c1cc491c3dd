"""report.html: self-contained, the summary with intervals, the question index and the packed
drill-downs (decoded here the way the page's script does), old rows without traces."""

from __future__ import annotations

import base64
import gzip
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from gaprag.eval import read_results, write_report
from gaprag.graphs import METHODS
from gaprag.traces import method_traces
from tests.capitals import sample_run
from tests.methods import contract as contract_method

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def contract(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(METHODS, "contract", contract_method.__name__)


def embedded(html: str, name: str) -> Any:
    match = re.search(rf'<script type="application/json" id="{name}">(.*?)</script>', html, re.S)
    assert match, name
    return json.loads(match.group(1))


def unpack(blob: str) -> Any:
    return json.loads(gzip.decompress(base64.b64decode(blob)).decode("utf-8"))


def test_report_html_is_self_contained_with_summary_index_and_drilldowns(
    tmp_path: Path, contract: None
) -> None:
    out = sample_run(tmp_path)
    html = (out / "report.html").read_text()
    # offline: no external scripts, styles, fonts or images
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)
    assert "<link" not in html and "@import" not in html and "<script src" not in html
    # every plot embedded: quality per cost, F1 vs tokens, F1 by iterations
    assert html.count('src="data:image/png;base64,') == 3
    summary = json.loads((out / "summary.json").read_text())
    entry = summary["datasets"]["capitals"]["methods"]["contract"]
    f1 = entry["f1"]
    assert f"{f1['mean']:.3f} [{f1['ci'][0]:.3f}, {f1['ci'][1]:.3f}]" in html
    assert "Loop decisions" in html and "validate_answer" in html and "Retrieval recall" in html
    assert 'shown3 <span class="muted small">(contract)</span>' in html

    index = embedded(html, "index-data")
    assert index["baseline"] == "standard_rag" and len(index["questions"]) == 5
    by_id = {q["id"]: q for q in index["questions"]}
    assert set(by_id["q1"]["m"]) == {"standard_rag", "contract", "shown3"}
    assert by_id["q3"]["m"]["contract"]["vs"] == 1  # Rome beats Milan
    assert by_id["q2"]["m"]["contract"]["vs"] == -1  # Munich loses to Berlin
    assert by_id["q1"]["m"]["contract"]["vs"] == 0
    assert by_id["q5"]["gold"] == ["William Shakespeare", "Shakespeare"]
    # a reply that closes the script tag cannot break out of the embedded JSON
    assert "</script><script>alert(1)" not in html
    assert by_id["q2"]["m"]["contract"]["p"].startswith("Munich </script>")

    details = embedded(html, "details-data")
    assert set(details) == {q["k"] for q in index["questions"]}
    q5 = unpack(details[by_id["q5"]["k"]])
    assert q5["supporting"] == ["hamlet", "pt"]
    view = q5["methods"]["contract"]
    assert view["shown_ids"] == ["hamlet"] and len(view["retrieved_ids"]) == 6
    assert [d["decision"] for d in view["decisions"]] == ["reject", "accept", "sufficient"]
    assert view["titles"]["hamlet"] == "Hamlet"
    (call,) = view["calls"]
    assert call["messages"][-1]["content"].endswith("Question: Who wrote Hamlet?\nAnswer:")
    assert call["reply"] == "Shakespeare"
    trace = method_traces(out, "contract")["q5"]
    assert call["messages"] == trace["llm_calls"][0]["messages"]


def test_old_rows_without_traces_render(tmp_path: Path) -> None:
    d = tmp_path / "old"
    d.mkdir()
    shutil.copy(ROOT / "docs" / "results" / "hotpotqa.results.jsonl", d / "results.jsonl")
    rows = read_results(d)
    write_report([d], tmp_path / "rep", n_boot=100)
    html = (tmp_path / "rep" / "report.html").read_text()
    index = embedded(html, "index-data")
    assert len(index["questions"]) == len({r["id"] for r in rows})
    assert embedded(html, "details-data") == {}  # no traces: the rows alone
    assert "support recall is unknown" in html


def test_long_texts_are_cut_in_the_drilldown(tmp_path: Path) -> None:
    from gaprag.eval.html import MAX_TEXT, _trace_view

    call = {"messages": [{"role": "human", "content": "x" * (MAX_TEXT + 10)}], "reply": "ok"}
    view = _trace_view({"llm_calls": [call]})
    content = view["calls"][0]["messages"][0]["content"]
    assert content.startswith("x" * MAX_TEXT) and "10 more characters in the trace file" in content


def test_the_drilldown_shows_where_each_passage_comes_from() -> None:
    from gaprag.eval.html import _trace_view

    evidence = [
        {"id": "a", "title": "A", "source": "hybrid", "round": 1,
         "metadata": {"source": "hr/leave.pdf", "page": 2, "section": "Annual leave"}},
        {"id": "b", "title": "B", "source": "bm25", "round": 1},
    ]  # fmt: skip
    view = _trace_view({"evidence": evidence})
    assert view["evidence"][0]["origin"] == "hr/leave.pdf, p. 2, Annual leave"
    assert "origin" not in view["evidence"][1]
