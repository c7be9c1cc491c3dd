"""A ``gaprag`` command that started the embedded server and finished normally keeps it for the
next command with the same settings (``GAPRAG_LOCAL_KEEP_S``); an idle kept server stops.

The embedded server here is ``tests/fake_openai.py`` behind a ``llama-server`` script (it
answers at once), each command a fresh process, as in ``test_process_hygiene.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gaprag.llm import keep
from gaprag.stores import HashingEmbedder, Store
from tests.embedded import COMMAND, PATCH, ROOT, embedded_env

QUESTION = "What is the capital of France?"
# a process that uses the embedded server, then waits to be stopped
USER = PATCH + textwrap.dedent(
    """
    import time
    server.stop_on_signals()
    print(server.ensure_local_server().base_url, flush=True)
    time.sleep(60)
    """
)


def group_alive(pgid: int) -> bool:
    from gaprag.llm.server import _group_alive

    return _group_alive(pgid)


def _pgid_of(proc: Path) -> int | None:
    stat = keep.proc_stat(proc.name)
    return int(stat[2]) if stat is not None and len(stat) > 2 else None


def wait_for(condition: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return bool(condition())


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A command's environment: the fake server as ``llama-server``, servers kept 600 s. Every
    process group a test's commands leave is killed afterwards."""
    environ = embedded_env(
        tmp_path,
        'case " $* " in *" --version "*) echo "version: fake"; exit 0;; esac\n'
        'while [ $# -gt 0 ]; do [ "$1" = --port ] && port="$2"; shift; done\n'
        f'exec "{sys.executable}" -m tests.fake_openai --port "$port" --reply Paris\n',
    )
    environ.pop("GAPRAG_QUIET", None)
    yield environ
    _kept_groups.update(entry["pid"] for _, entry in keep.kept_entries())
    for pgid in _kept_groups:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    _kept_groups.clear()


#: the process groups of the servers kept during a test (each its keeper's pid)
_kept_groups: set[int] = set()


@pytest.fixture
def store(tmp_path: Path, tiny_docs: list[dict[str, str]]) -> str:
    path = tmp_path / "store"
    Store.build(path, tiny_docs, embedder=HashingEmbedder(), progress=False)  # type: ignore[arg-type]
    return str(path)


def gaprag(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-c", COMMAND, *args], env=env, cwd=ROOT,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    _kept_groups.update(entry["pid"] for _, entry in keep.kept_entries())
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def ask(env: dict[str, str], store: str) -> subprocess.CompletedProcess[str]:
    done = gaprag(env, "ask", "--store", store, "--method", "standard_rag", "--json", QUESTION)
    assert json.loads(done.stdout)["answer"] == "Paris"
    return done


def started_port(stderr: str) -> int | None:
    found = re.search(r"starting the local LLM server .* on 127\.0\.0\.1:(\d+)", stderr)
    return int(found.group(1)) if found else None


def the_entry() -> dict[str, Any]:
    entries = keep.kept_entries()
    assert len(entries) == 1, entries
    return entries[0][1]


def test_a_second_ask_uses_the_server_the_first_one_kept(env: dict[str, str], store: str) -> None:
    first = ask(env, store)
    port = started_port(first.stderr)
    assert port is not None
    assert "stays up for the next command (idle stop after 10 min" in first.stderr
    entry = the_entry()
    assert entry["port"] == port and entry["base_url"] == f"http://127.0.0.1:{port}/v1"
    assert entry["model"] == "smollm2-135m" and entry["engine"] == "llama-server"
    assert group_alive(entry["pid"])  # the first command has exited; its server has not

    second = ask(env, store)
    assert started_port(second.stderr) is None  # no start
    assert (
        f"gaprag: using the local LLM server kept at http://127.0.0.1:{port} "
        "(idle stop after 10 min)" in second.stderr
    )
    assert "stays up" not in second.stderr  # it was not its own to hand over
    assert the_entry()["pid"] == entry["pid"]


def test_other_settings_start_another_server(env: dict[str, str], store: str) -> None:
    first = ask(env, store)
    second = ask({**env, "GAPRAG_LOCAL_CTX": "2048"}, store)
    ports = [started_port(first.stderr), started_port(second.stderr)]
    assert None not in ports and ports[0] != ports[1]
    assert len(keep.kept_entries()) == 2  # each kept under its own settings


def test_an_idle_kept_server_stops_after_the_keep_time(env: dict[str, str], store: str) -> None:
    ask({**env, "GAPRAG_LOCAL_KEEP_S": "2"}, store)
    entry = the_entry()
    assert wait_for(lambda: not group_alive(entry["pid"]), 15)
    assert not port_open(entry["port"]) and keep.kept_entries() == []


def test_a_lease_holds_a_kept_server_and_the_idle_time_restarts_when_it_ends(
    env: dict[str, str], store: str
) -> None:
    ask({**env, "GAPRAG_LOCAL_KEEP_S": "2"}, store)
    path, entry = keep.kept_entries()[0]
    lease = keep.take_lease(path)  # this test's process uses the server
    time.sleep(4)
    assert group_alive(entry["pid"])
    keep.drop_lease(lease)
    dropped = time.monotonic()
    assert wait_for(lambda: not group_alive(entry["pid"]), 15)
    assert time.monotonic() - dropped >= 1.5  # a full idle time after the lease ended


def test_keep_0_stops_the_server_when_the_command_ends(env: dict[str, str], store: str) -> None:
    done = ask({**env, "GAPRAG_LOCAL_KEEP_S": "0"}, store)
    port = started_port(done.stderr)
    assert port is not None and "stays up" not in done.stderr
    assert keep.kept_entries() == [] and not port_open(port)


def test_a_command_stopped_while_using_a_kept_server_leaves_it_kept(
    env: dict[str, str], store: str
) -> None:
    ask(env, store)
    entry = the_entry()
    user = subprocess.Popen(
        [sys.executable, "-c", USER], env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert user.stdout is not None
        assert user.stdout.readline().strip() == entry["base_url"]
        path = keep.kept_entries()[0][0]
        assert keep.live_leases(path) == [user.pid]
        user.send_signal(signal.SIGTERM)
        assert user.wait(timeout=15) == 143
    finally:
        if user.poll() is None:
            user.kill()
            user.wait()
    assert keep.live_leases(path) == []
    assert group_alive(entry["pid"]) and port_open(entry["port"])
    assert the_entry()["pid"] == entry["pid"]


def test_gaprag_llm_stop_stops_every_kept_server(env: dict[str, str], store: str) -> None:
    ask(env, store)
    entry = the_entry()
    status = gaprag(env, "llm", "status").stdout
    assert status.startswith(f"http://127.0.0.1:{entry['port']}  smollm2-135m  llama-server")
    assert "0 client(s), idle stop after 10 min" in status
    done = gaprag(env, "llm", "stop")
    assert f"stopped the local LLM server kept at http://127.0.0.1:{entry['port']}" in done.stdout
    assert not group_alive(entry["pid"]) and not port_open(entry["port"])
    assert keep.kept_entries() == []
    assert gaprag(env, "llm", "stop").stdout.strip() == "no local LLM server is kept"
    assert gaprag(env, "llm", "status").stdout.strip() == "no local LLM server is kept"


def test_a_kept_server_stops_when_its_keeper_is_killed(env: dict[str, str], store: str) -> None:
    ask(env, store)
    entry = the_entry()
    os.kill(entry["pid"], signal.SIGKILL)  # the keeper only
    # its server went with it (a killed process's threads may hold its port a moment longer)
    assert wait_for(lambda: not group_alive(entry["pid"]) and not port_open(entry["port"]), 10)
    assert gaprag(env, "llm", "status").stdout.strip() == "no local LLM server is kept"
    assert keep.kept_entries() == []  # the dead keeper's entry is gone too


def test_a_server_stops_when_its_supervisor_is_killed_while_a_command_uses_it(
    env: dict[str, str],
) -> None:
    user = subprocess.Popen(
        [sys.executable, "-c", USER], env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert user.stdout is not None
        port = int(user.stdout.readline().strip().rsplit(":", 1)[1].removesuffix("/v1"))
        (supervisor,) = [
            int(p.name) for p in Path("/proc").iterdir()
            if p.name.isdigit() and (keep.proc_stat(p.name) or ["", ""])[1] == str(user.pid)
            and keep.KEEPER_MODULE.encode() in (p / "cmdline").read_bytes()
        ]  # fmt: skip
        _kept_groups.add(supervisor)
        os.kill(supervisor, signal.SIGKILL)
        assert wait_for(lambda: not group_alive(supervisor) and not port_open(port), 10)
    finally:
        user.kill()
        user.wait()


def test_the_xllamacpp_launcher_exits_when_its_parent_dies(tmp_path: Path) -> None:
    watching, exited = tmp_path / "watching", tmp_path / "exited"
    launcher = (
        "import os\n"
        "from gaprag.llm._xllama_launcher import wait_for_orphaning\n"
        "parent = os.getppid()\n"
        f"open({str(watching)!r}, 'w').close()\n"
        "wait_for_orphaning(parent, poll_s=0.05)\n"
        f"open({str(exited)!r}, 'w').close()\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys, time\n"
         f"subprocess.Popen([sys.executable, '-c', {launcher!r}]); time.sleep(60)"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    try:
        assert wait_for(watching.exists, 30)
        time.sleep(0.3)
        assert not exited.exists()  # a live parent: the launcher serves on
    finally:
        parent.kill()
        parent.wait()
    assert wait_for(exited.exists, 10)


def test_the_next_command_stops_a_server_whose_keeper_is_gone(env: dict[str, str]) -> None:
    """A keeper whose server outlived it (no parent-death signal on this system; a server
    script that forks) leaves a process group serving the entry's port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    serve = f'"{sys.executable}" -m tests.fake_openai --port {port} --reply Paris & wait'
    leader = subprocess.Popen(["/bin/sh", "-c", serve], env=env, cwd=ROOT, start_new_session=True)
    _kept_groups.add(leader.pid)
    assert wait_for(lambda: port_open(port), 30)
    base_url = f"http://127.0.0.1:{port}/v1"
    keep.write_entry(
        keep.entry_path("left"),
        {"pid": leader.pid, "port": port, "keep_s": 600, "base_url": base_url},
    )
    leader.kill()  # the keeper dies; its server lives on
    leader.wait()
    assert group_alive(leader.pid) and port_open(port)
    done = gaprag(env, "llm", "status")
    assert (
        f"gaprag: stopped the local LLM server left at http://127.0.0.1:{port} by a keeper that died"
        in done.stderr
    )
    assert done.stdout.strip() == "no local LLM server is kept"
    assert wait_for(lambda: not group_alive(leader.pid) and not port_open(port), 5)
    assert keep.kept_entries() == []


def test_a_kept_server_that_does_not_answer_in_time_stays_kept(
    env: dict[str, str], store: str
) -> None:
    ask(env, store)
    entry = the_entry()
    server = next(
        int(p.name) for p in Path("/proc").iterdir()
        if p.name.isdigit() and int(p.name) != entry["pid"] and _pgid_of(p) == entry["pid"]
    )  # fmt: skip
    os.kill(server, signal.SIGSTOP)  # busy: no answer to the health check
    try:
        done = ask(env, store)  # serves from a server of its own
    finally:
        os.kill(server, signal.SIGCONT)
    assert started_port(done.stderr) not in (None, entry["port"])
    assert the_entry()["pid"] == entry["pid"]  # still findable: its keeper stops it when idle
    assert group_alive(entry["pid"])


def test_of_two_commands_keeping_the_same_settings_one_registers() -> None:
    path = keep.entry_path("k")
    assert keep.create_entry(path, {"pid": 1, "port": 2})
    assert not keep.create_entry(path, {"pid": 3, "port": 4})
    assert keep.read_entry(path) == {"pid": 1, "port": 2}
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left


@pytest.mark.parametrize("text", ['{"pid": 1}', '{"pid": 1, "port": "80"}', "[1]", "{"])
def test_an_entry_without_its_pid_and_port_is_not_used(text: str) -> None:
    path = keep.entry_path("k")
    path.write_text(text)
    assert keep.read_entry(path) is None and keep.kept_entries() == []


def test_a_removed_entry_takes_its_empty_leases_folder_along() -> None:
    path = keep.entry_path("k")
    keep.write_entry(path, {"pid": 1, "port": 2})
    keep.drop_lease(keep.take_lease(path))
    assert keep.remove_entry(path, 1)
    assert not path.exists() and not keep.leases_dir(path).exists()


def test_a_stale_entry_is_replaced_by_a_started_server(env: dict[str, str], store: str) -> None:
    ask(env, store)
    stale = the_entry()
    os.killpg(stale["pid"], signal.SIGKILL)  # keeper and server gone, entry left behind
    assert wait_for(lambda: not group_alive(stale["pid"]), 10)
    done = ask(env, store)
    assert started_port(done.stderr) is not None
    assert the_entry()["pid"] != stale["pid"]


def test_settings_show_the_kept_server_as_the_embedded_endpoint(
    env: dict[str, str], store: str
) -> None:
    ask(env, store)
    done = gaprag(env, "settings", "standard_rag", "--json")
    base_url = json.loads(done.stdout)["base_url"]
    assert (base_url["value"], base_url["source"]) == (the_entry()["base_url"], "embedded server")


@pytest.mark.parametrize("value", ["ten", "-1", "inf", "nan"])
def test_a_bad_keep_time_is_refused_with_a_hint(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    from gaprag.config import local_keep_s
    from gaprag.errors import GapragError

    monkeypatch.setenv("GAPRAG_LOCAL_KEEP_S", value)
    with pytest.raises(GapragError, match="GAPRAG_LOCAL_KEEP_S") as err:
        local_keep_s()
    assert "GAPRAG_LOCAL_KEEP_S=600" in str(err.value.hint)


def test_the_keep_time_defaults_to_10_minutes(monkeypatch: pytest.MonkeyPatch) -> None:
    from gaprag.config import local_keep_s

    monkeypatch.delenv("GAPRAG_LOCAL_KEEP_S")
    assert local_keep_s() == 600 and keep.keep_label(local_keep_s()) == "10 min"
    assert keep.keep_label(2) == "2 s"


def test_only_a_live_process_that_took_the_lease_holds_it() -> None:
    entry = keep.entry_path("k")
    lease = keep.take_lease(entry)
    assert keep.live_leases(entry) == [os.getpid()]
    lease.write_text("0")  # the same pid, another process (started at another time)
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    dead = keep.leases_dir(entry) / done.stdout.strip()
    dead.write_text(keep.started_at(os.getpid()))
    assert keep.live_leases(entry) == []
    assert not lease.exists() and not dead.exists()  # pruned


def test_looking_for_a_kept_server_never_assembles_the_model_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from gaprag.llm import server

    keep.write_entry(keep.entry_path("k"), {"pid": os.getpid(), "port": 1})
    monkeypatch.setattr(server, "model_path", lambda model: tmp_path / "absent.gguf")
    monkeypatch.setattr(server, "ensure_model", lambda *a, **k: pytest.fail("assembled"))
    assert server.kept_local_server("smollm2-135m") is None


def test_a_keeper_releases_its_entry_only_when_no_client_holds_a_lease() -> None:
    from gaprag.llm import _supervise

    path = keep.entry_path("k")
    keep.write_entry(path, {"pid": os.getpid(), "port": 1})  # this process as the keeper
    lease = keep.take_lease(path)  # a client came
    assert _supervise.release(path) is False
    assert keep.read_entry(path) == {"pid": os.getpid(), "port": 1}  # put back
    keep.drop_lease(lease)
    assert _supervise.release(path) is True and keep.read_entry(path) is None


def test_a_lease_is_taken_even_when_its_folder_goes_before_the_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entry = keep.entry_path("k")
    write, calls = keep.write_atomic, []

    def folder_removed_once(path: Path, text: str) -> None:
        calls.append(path)
        if len(calls) == 1:
            path.parent.rmdir()  # the keeper removed its entry and the empty folder
        write(path, text)

    monkeypatch.setattr(keep, "write_atomic", folder_removed_once)
    lease = keep.take_lease(entry)
    assert len(calls) == 2 and keep.live_leases(entry) == [os.getpid()]
    assert lease.read_text() == keep.started_at(os.getpid())
