"""Compressed per-question traces (gaprag.traces): appended per question, read back whatever
their layout, safe after a kill, compacted, converted from the per-file layout; and the
committed results tree stays small."""

from __future__ import annotations

import json
import lzma
import subprocess
import sys
from pathlib import Path

import pytest

from gaprag.eval.traces import main as traces_main
from gaprag.traces import (
    TraceWriter,
    compact,
    iter_traces,
    method_traces,
    read_file,
    safe_name,
    trace_file,
)

ROOT = Path(__file__).resolve().parents[2]
#: docs/results, as `du -sh` counts it: the n = 50 runs, calibration rows, the paper run (3 MB)
#: and RAG-EF's paper ladder (its S, E, rows and report: 1.6 MB)
RESULTS_LIMIT = 30 * 1024 * 1024


def _trace(qid: str, method: str = "iterkey", **extra: object) -> dict[str, object]:
    prompt = "You answer questions from passages. " * 40  # repeated across questions
    return {"id": qid, "method": method, "llm_calls": [{"messages": [prompt + qid]}], **extra}


def test_appended_traces_read_back_and_a_retried_question_keeps_its_last_trace(
    tmp_path: Path,
) -> None:
    writer = TraceWriter(tmp_path)
    writer.write("iterkey", _trace("q1", error="boom"))
    writer.write("iterkey", _trace("q2"))
    writer.write("iterkey", _trace("q1"))  # the failed question run again on --resume
    writer.write("ircot/v2", _trace("q1", method="ircot/v2"))
    path = trace_file(tmp_path, "iterkey")
    assert path == tmp_path / "traces" / "iterkey.jsonl.xz"
    assert [t["id"] for t in read_file(path)] == ["q1", "q2", "q1"]
    by_id = method_traces(tmp_path, "iterkey")
    assert set(by_id) == {"q1", "q2"} and "error" not in by_id["q1"]
    assert (tmp_path / "traces" / f"{safe_name('ircot/v2')}.jsonl.xz").is_file()
    assert method_traces(tmp_path, "ircot/v2")["q1"]["method"] == "ircot/v2"
    assert method_traces(tmp_path, "migres") == {}


def test_a_torn_last_trace_is_skipped_and_cut_before_the_next_append(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path)
    writer.write("iterkey", _trace("q1"))
    path = trace_file(tmp_path, "iterkey")
    whole = path.stat().st_size
    torn = lzma.compress(json.dumps(_trace("q2")).encode(), preset=0)
    with path.open("ab") as fh:  # a run killed in the middle of appending q2's stream
        fh.write(torn[: len(torn) // 2])
    with pytest.warns(UserWarning, match="incomplete trace"):
        assert [t["id"] for t in read_file(path)] == ["q1"]
    with pytest.warns(UserWarning, match="dropped an incomplete trace"):
        TraceWriter(tmp_path).write("iterkey", _trace("q3"))  # the resumed run
    assert path.stat().st_size > whole
    assert [t["id"] for t in read_file(path)] == ["q1", "q3"]


def test_compact_keeps_one_trace_per_question_in_one_smaller_stream(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path)
    for i in range(30):
        writer.write("iterkey", _trace(f"q{i}"))
    writer.write("iterkey", _trace("q0", note="again"))
    path = trace_file(tmp_path, "iterkey")
    appended = path.stat().st_size
    writer.compact()
    assert path.stat().st_size < appended / 3
    traces = read_file(path)
    assert len(traces) == 30 and method_traces(tmp_path, "iterkey")["q0"]["note"] == "again"
    assert lzma.decompress(path.read_bytes()).count(b"\n") == 30  # one stream, as xzcat reads it
    compact(path)  # idempotent
    assert read_file(path) == traces


def _old_layout(run: Path) -> None:
    for method in ("iterkey", "rfm_rag"):
        folder = run / "traces" / method
        folder.mkdir(parents=True)
        for qid in ("q1", "q2"):
            (folder / f"{qid}.json").write_text(json.dumps(_trace(qid, method=method), indent=2))


def test_readers_read_the_per_file_layout_of_older_runs(tmp_path: Path) -> None:
    _old_layout(tmp_path / "run")
    assert set(method_traces(tmp_path / "run", "rfm_rag")) == {"q1", "q2"}
    found = list(iter_traces([tmp_path / "run"]))
    assert sorted((t["method"], t["id"]) for t in found) == [
        ("iterkey", "q1"), ("iterkey", "q2"), ("rfm_rag", "q1"), ("rfm_rag", "q2"),
    ]  # fmt: skip


def test_convert_turns_trace_folders_into_compressed_files(tmp_path: Path) -> None:
    root = tmp_path / "results"
    for run in ("a/hotpotqa", "b"):
        _old_layout(root / run)
    before = {run: method_traces(root / run, "iterkey") for run in ("a/hotpotqa", "b")}
    assert traces_main(["convert", str(root)]) == 0
    assert not list(root.rglob("*.json"))
    assert not (root / "b" / "traces" / "iterkey").exists()
    for run, traces in before.items():
        assert (root / run / "traces" / "iterkey.jsonl.xz").is_file()
        assert method_traces(root / run, "iterkey") == traces
    assert {t["id"] for t in iter_traces([root / "b"])} == {"q1", "q2"}
    assert traces_main(["convert", str(root)]) == 0  # nothing left to convert
    assert method_traces(root / "b", "rfm_rag").keys() == {"q1", "q2"}


def test_convert_runs_as_a_module(tmp_path: Path) -> None:
    _old_layout(tmp_path / "run")
    done = subprocess.run(
        [sys.executable, "-m", "gaprag.eval.traces", "convert", str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "iterkey.jsonl.xz" in done.stdout and not list(tmp_path.rglob("*.json"))


def test_committed_results_stay_under_30_mb() -> None:
    """docs/results holds the committed runs with their traces compressed: at most 30 MB on
    disk (allocated blocks, as `du` counts them), and no trace left as a JSON file. Counted:
    what git commits there, tracked files and new files .gitignore lets in (it keeps out the
    ``report.html`` pages, which are rebuilt from the rows)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "docs/results"],
        capture_output=True,
        check=True,
        cwd=ROOT,
    ).stdout
    paths = (ROOT / name for name in listed.decode("utf-8").split("\0") if name)
    files = [p for p in paths if p.is_file()]
    used = sum(max(p.stat().st_blocks * 512, p.stat().st_size) for p in files)
    assert used <= RESULTS_LIMIT, (
        f"docs/results takes {used / 2**20:.1f} MB (limit {RESULTS_LIMIT // 2**20} MB)"
    )
    assert not [p for p in files if p.suffix == ".json" and "traces" in p.parts]
