"""No process a gaprag command started for its own use outlives it when the command is stopped.

A gaprag command (``gaprag ask``, ``gaprag llm serve``) starts its embedded LLM server (here
a stand-in, ``tests/stub_llama_server.py``, that holds a request open and ignores SIGTERM,
the worst case: only SIGKILL stops it). While the server holds a request, the command gets
SIGTERM, SIGINT or SIGKILL (a crashed parent); 15 s later neither the server nor its
supervisor is in the process table, the command itself has exited, and no server is kept
for a next command (``GAPRAG_LOCAL_KEEP_S`` is on).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gaprag.llm import keep
from gaprag.stores import HashingEmbedder, Store
from tests.embedded import COMMAND, ROOT, embedded_env

STUB = ROOT / "tests" / "stub_llama_server.py"
AFTER_S = 15.0
SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT, "crashed": signal.SIGKILL}


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is dead)."""
    return keep.pid_alive(pid)


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    """The processes of ``pids`` still alive after ``timeout`` seconds (none: returns early)."""
    deadline = time.monotonic() + timeout
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def wait_file(path: Path, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().endswith("\n"):
            return path.read_text()
        if proc.poll() is not None:
            pytest.fail(f"the command exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        time.sleep(0.1)
    pytest.fail(f"no request reached the server within {timeout:.0f} s:\n{log.read_text()[-3000:]}")


@pytest.fixture
def stub_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of a command whose embedded server is the stand-in."""
    yield embedded_env(
        tmp_path,
        f'exec "{sys.executable}" "{STUB}" "$@"\n',
        STUB_INFLIGHT=str(tmp_path / "inflight"),
        GAPRAG_QUIET="1",
    )


def run_and_signal(args: list[str], env: dict[str, str], tmp: Path, signum: int,
                   poke: str | None = None) -> None:  # fmt: skip
    """Start ``gaprag ARGS``, wait for a request in flight at its server (``poke``: send one
    to the URL the command prints), send ``signum``, and check the process table."""
    log = tmp / "command.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", COMMAND, *args], env=env, cwd=tmp,
            stdout=subprocess.PIPE if poke else out, stderr=out, start_new_session=True,
        )  # fmt: skip
    pids: list[int] = []
    try:
        if poke is not None:
            assert proc.stdout is not None
            line = proc.stdout.readline().decode()  # "serving MODEL at URL ..."
            url = line.split(" at ", 1)[1].split()[0]
            threading.Thread(target=_post, args=(url + poke,), daemon=True).start()
        server_pid, supervisor_pid = map(
            int, wait_file(Path(env["STUB_INFLIGHT"]), proc, log, 120).split()
        )
        pids = [server_pid, supervisor_pid]
        assert all(alive(p) for p in pids)
        os.kill(proc.pid, signum)
        assert wait_gone(pids, AFTER_S) == [], f"alive {AFTER_S:.0f} s after {signum!r}"
        proc.wait(timeout=5)  # and the command itself has exited
        assert not list((Path(env["GAPRAG_HOME"]) / "servers").glob("*.json"))  # none kept
    finally:
        for pid in [*pids, proc.pid]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _post(url: str) -> None:
    request = urllib.request.Request(url, data=b'{"messages": []}', method="POST")
    with contextlib.suppress(OSError):  # the server is stopped under it
        urllib.request.urlopen(request, timeout=60).read()


@pytest.mark.parametrize("signum", SIGNALS.values(), ids=SIGNALS.keys())
def test_a_stopped_ask_leaves_no_server_behind(
    tmp_path: Path, stub_env: dict[str, str], tiny_docs: list[dict[str, str]], signum: int
) -> None:
    store = tmp_path / "store"
    Store.build(store, tiny_docs, embedder=HashingEmbedder(), progress=False)  # type: ignore[arg-type]
    args = ["ask", "--store", str(store), "--method", "ircot", "Who built the Eiffel Tower?"]
    run_and_signal(args, stub_env, tmp_path, signum)


@pytest.mark.parametrize("signum", SIGNALS.values(), ids=SIGNALS.keys())
def test_a_stopped_llm_serve_leaves_no_server_behind(
    tmp_path: Path, stub_env: dict[str, str], signum: int
) -> None:
    run_and_signal(["llm", "serve"], stub_env, tmp_path, signum, poke="/chat/completions")
