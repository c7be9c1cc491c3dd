"""Killed runs lose nothing, concurrent writers lose nothing.

* ``kill -9`` while a store is being rebuilt over an existing one, at three points (while
  embedding, after the new version is written but before the switch, while pruning): the
  store opens and answers afterwards, from the old or the complete new version.
* ``kill -9`` during a graph run with a SQLite checkpointer: the thread resumes from its
  last finished step; no LLM call of a finished step is made again.
* 8 processes each add 200 expert-feedback pairs to one PairStore while another process
  lists and searches it: 1,600 pairs, no error in any process.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from gaprag.stores import HashingEmbedder, Store
from gaprag.stores.documents import Document
from gaprag.stores.pairs import PairStore

ROOT = Path(__file__).resolve().parents[2]


def _python(script: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _wait_for(path: Path, needle: str, proc: subprocess.Popen[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and needle in path.read_text():
            return
        if proc.poll() is not None:
            raise AssertionError(f"child exited early: {proc.communicate()}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {needle!r} in {path}")


# -- kill -9 during a store rebuild ----------------------------------------------------------
_REBUILD = """
import os, shutil, signal, sys, time
from pathlib import Path
from gaprag.stores import HashingEmbedder, Store
from gaprag.stores import store as store_module

root, point, marks = sys.argv[1], sys.argv[2], Path(sys.argv[3])

def die():
    marks.write_text(marks.read_text() + "dying\\n")
    os.kill(os.getpid(), signal.SIGKILL)

class SlowEmbedder(HashingEmbedder):
    def embed(self, texts, *, batch_size=64, progress=False):
        marks.write_text(marks.read_text() + "embedding\\n")
        if point == "embedding":
            time.sleep(60)  # killed from outside while here
        return super().embed(texts)

if point == "before_switch":
    real_replace = os.replace
    def replace(src, dst):
        if Path(dst).name == "CURRENT":
            die()
        return real_replace(src, dst)
    store_module.os.replace = replace
if point == "pruning":
    real_rmtree = shutil.rmtree
    def rmtree(path, *a, **k):
        real_rmtree(path, *a, **k)
        die()
    store_module.shutil.rmtree = rmtree
marks.write_text("started\\n")
docs = [{"id": f"new{i}", "title": "New", "text": f"zebra number {i} lives in Kenya"} for i in range(300)]
Store.build(root, docs, embedder=SlowEmbedder(), progress=False)
marks.write_text(marks.read_text() + "finished\\n")
"""


@pytest.mark.parametrize("point", ["embedding", "before_switch", "pruning"])
def test_kill_9_during_rebuild_leaves_a_working_store(
    point: str, tmp_path: Path, tiny_docs: list[Document]
) -> None:
    root = tmp_path / "store"
    Store.build(root, tiny_docs, embedder=HashingEmbedder(), progress=False)
    marks = tmp_path / "marks.txt"
    proc = _python(_REBUILD, str(root), point, str(marks))
    if point == "embedding":
        _wait_for(marks, "embedding", proc)
        proc.send_signal(signal.SIGKILL)
    proc.wait(120)
    assert proc.returncode == -signal.SIGKILL, proc.communicate()
    assert "finished" not in marks.read_text()

    store = Store.open(root)  # opens, whichever version is live
    if point == "pruning":  # killed after the switch: the new version is live and complete
        assert len(store) == 300
        assert store.search("zebra Kenya", 3, mode="hybrid")[0]["id"].startswith("new")
    else:  # killed before the switch: the previous version answers as before
        assert len(store) == len(tiny_docs)
        assert store.search("Who wrote Hamlet?", 1, mode="hybrid")[0]["id"] == "hamlet"
        assert store.search("Hamlet tragedy", 1, mode="dense")[0]["id"] == "hamlet"
    # and a later build over the debris works and cleans up the abandoned version
    store.close()
    Store.build(root, tiny_docs, embedder=HashingEmbedder(), progress=False)
    assert [p.name for p in root.glob("v-*")] == [Store.open(root).version_dir.name]
    assert not list(root.glob(".building-*")) and not list(root.glob(".pruning-*"))


# -- kill -9 during a checkpointed graph run -------------------------------------------------
_GRAPH_RUN = """
import json, os, sys, time
from pathlib import Path
from gaprag import build_graph
from gaprag.persistence import sqlite_checkpointer, thread_config
from gaprag.stores import Store
from gaprag.testing import ScriptedChatModel

store_dir, db, log, method, kill_at, mode = sys.argv[1:7]
kill_at = int(kill_at)
log = Path(log)

def reply(messages):
    prompt = "\\n".join(str(m.content) for m in messages)
    with log.open("a") as fh:
        fh.write(json.dumps({"event": "start", "prompt": prompt}) + "\\n")
    n = sum(1 for line in log.read_text().splitlines() if '"start"' in line)
    if n == kill_at:
        time.sleep(60)  # killed from outside during this call
    text = REPLIES.get(method, "Paris")
    with log.open("a") as fh:
        fh.write(json.dumps({"event": "done", "prompt": prompt}) + "\\n")
    return text

REPLIES = {"migres": '{"answer": "unknown", "missing": "the birthplace", "sufficient": false}'}
llm = ScriptedChatModel(default=reply)
graph = build_graph(method, llm=llm, retriever=Store.open(store_dir),
                    checkpointer=sqlite_checkpointer(db), retrieval_mode="bm25")
config = thread_config("t-1")
out = graph.invoke(None if mode == "resume" else {"question": "Who wrote Hamlet and where was he born?"}, config)
print(json.dumps({"answer": out.get("answer"), "stop_reason": out.get("stop_reason"),
                  "usage": out.get("usage")}))
"""


def _calls(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("method", ["iterkey", "migres"])
def test_kill_9_during_a_graph_run_resumes_from_the_last_finished_step(
    method: str, tmp_path: Path, tiny_docs: list[Document]
) -> None:
    store = tmp_path / "store"
    Store.build(store, tiny_docs, embedder=HashingEmbedder(), progress=False)

    # the uninterrupted run: how many LLM calls, in which order
    full_log = tmp_path / "full.jsonl"
    proc = _python(_GRAPH_RUN, str(store), str(tmp_path / "full.sqlite"), str(full_log), method,
                   "0", "new")  # fmt: skip
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    full = [c["prompt"] for c in _calls(full_log) if c["event"] == "done"]
    assert len(full) >= 3, f"{method} made too few calls to test a resume: {len(full)}"
    kill_at = len(full) // 2 + 1  # in the middle of the run

    db, log = tmp_path / "cp.sqlite", tmp_path / "run.jsonl"
    proc = _python(_GRAPH_RUN, str(store), str(db), str(log), method, str(kill_at), "new")
    deadline = time.monotonic() + 300
    while sum(c["event"] == "start" for c in _calls(log)) < kill_at:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.3)  # the killed call is in flight
    proc.send_signal(signal.SIGKILL)
    proc.wait(60)
    assert proc.returncode == -signal.SIGKILL
    before = [c["prompt"] for c in _calls(log) if c["event"] == "done"]
    assert len(before) == kill_at - 1
    assert oct(os.stat(db).st_mode & 0o777) == oct(0o600)

    log2 = tmp_path / "resume.jsonl"
    proc = _python(_GRAPH_RUN, str(store), str(db), str(log2), method, "0", "resume")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    resumed = [c["prompt"] for c in _calls(log2) if c["event"] == "done"]
    result = json.loads(out.strip().splitlines()[-1])
    assert result["answer"] and result["stop_reason"]
    # finished steps are not run again: the killed run's finished calls plus the resumed
    # run's calls are exactly the uninterrupted run's calls (repeated calls: 0)
    repeated = len(before) + len(resumed) - len(full)
    assert repeated == 0, (len(before), len(resumed), len(full))
    assert before + resumed == full


# -- concurrent writers ----------------------------------------------------------------------
def _writer(path: str, worker: int, n: int, queue: Any) -> None:
    errors: list[str] = []
    try:
        store = PairStore.open(path, embedder=HashingEmbedder(64))
        for i in range(n):
            chunk = "shared chunk text" if i % 2 else f"chunk {worker}-{i}"
            try:
                store.add(f"worker {worker} question {i}?", f"answer {worker}-{i}", chunk,
                          source="expert")  # fmt: skip
            except Exception as exc:
                errors.append(repr(exc))
        store.close()
    except Exception as exc:
        errors.append("open: " + repr(exc))
    queue.put(("writer", worker, errors))


def _reader(path: str, stop: Any, queue: Any) -> None:
    errors: list[str] = []
    rounds = 0
    while not stop.is_set() or rounds == 0:
        try:
            store = PairStore.open(path, embedder=HashingEmbedder(64))
            store.list()
            store.search("worker question", 5)
            store.search("answer", 3, mode="bm25")
            store.close()
            rounds += 1
        except Exception as exc:
            errors.append(repr(exc))
            rounds += 1
    queue.put(("reader", rounds, errors))


def test_eight_writers_and_a_reader_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "feedback.sqlite")  # not created beforehand: creation races too
    ctx = mp.get_context("fork")
    queue, stop = ctx.Queue(), ctx.Event()
    writers = [ctx.Process(target=_writer, args=(path, w, 200, queue)) for w in range(8)]
    reader = ctx.Process(target=_reader, args=(path, stop, queue))
    for p in writers:
        p.start()
    reader.start()
    reports = [queue.get(timeout=300) for _ in writers]
    stop.set()
    reports.append(queue.get(timeout=120))
    for p in [*writers, reader]:
        p.join(60)
        assert p.exitcode == 0
    assert [r for r in reports if r[2]] == []  # no error in any writer or the reader
    store = PairStore.open(path, embedder=HashingEmbedder(64))
    assert len(store) == 1600 and store.count(source="expert") == 1600
    assert store.chunk_count() == 8 * 100 + 1
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_a_long_held_lock_is_waited_for_not_raised(tmp_path: Path) -> None:
    """A writer blocked beyond SQLite's own busy timeout keeps waiting (bounded)."""
    from gaprag.stores import pairs

    path = tmp_path / "p.sqlite"
    store = PairStore.open(path, embedder=HashingEmbedder(16))
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    store._conn.execute("PRAGMA busy_timeout=50")  # SQLite alone would give up after 50 ms

    def release() -> None:
        time.sleep(0.5)
        blocker.execute("COMMIT")

    import threading

    threading.Thread(target=release).start()
    started = time.monotonic()
    store.add("q?", "a", "c")
    assert time.monotonic() - started >= 0.4 and len(store) == 1
    assert pairs.LOCK_WAIT_S >= 60
