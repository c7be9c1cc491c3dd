"""The Postgres checkpointer against a real PostgreSQL server started for this module.

The server is a throw-away cluster: ``initdb`` into a temp dir and ``postgres`` on a free port
on 127.0.0.1 (as the ``postgres`` user when the tests run as root). Without the server
binaries (``apt-get install -y postgresql``) the module is skipped.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gaprag import build_graph
from gaprag.errors import EndpointError
from gaprag.persistence import checkpointer_from_url, postgres_checkpointer, thread_config
from gaprag.stores import Store
from gaprag.testing import ScriptedChatModel
from tests.integration.conftest import free_port
from tests.retrievers import CountingRetriever

pytestmark = pytest.mark.integration

psycopg = pytest.importorskip("psycopg", reason="needs the postgres extra")
pytest.importorskip("langgraph.checkpoint.postgres", reason="needs the postgres extra")

PG_USER = "gaprag"


def pg_bindir() -> Path | None:
    """The newest installed server binaries (GAPRAG_PG_BINDIR overrides)."""
    if os.environ.get("GAPRAG_PG_BINDIR"):
        return Path(os.environ["GAPRAG_PG_BINDIR"])
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    if candidates:
        return Path(candidates[-1]).parent
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def as_server_user() -> list[str]:
    """initdb and postgres refuse to run as root: drop to the ``postgres`` user then."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("running as root and there is no 'postgres' user to run the server as")
    runuser = shutil.which("runuser")
    return [runuser, "-u", "postgres", "--"] if runuser else ["su", "postgres", "-c"]


def _run(prefix: list[str], argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    cmd = [*prefix, " ".join(argv)] if prefix[-1:] == ["-c"] else [*prefix, *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kwargs)  # type: ignore[call-overload, no-any-return]


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    bindir = pg_bindir()
    if bindir is None or not (bindir / "postgres").exists():
        pytest.skip("PostgreSQL server binaries not found: apt-get install -y postgresql")
    prefix = as_server_user()
    root = Path(tempfile.mkdtemp(prefix="gaprag-pg-"))
    if prefix:
        shutil.chown(root, user="postgres", group="postgres")
    data, sockets, log = root / "data", root / "run", root / "postgres.log"
    port = free_port()
    try:
        init = _run(
            prefix,
            [str(bindir / "initdb"), "-D", str(data), "-U", PG_USER, "--auth=trust",
             "-E", "UTF8", "--no-sync", "--no-instructions"],
        )  # fmt: skip
        assert init.returncode == 0, init.stderr
        server_cmd = [
            str(bindir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(sockets),
            "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "full_page_writes=off",
        ]  # fmt: skip
        _run(prefix, ["mkdir", "-p", str(sockets)])
        cmd = [*prefix, " ".join(server_cmd)] if prefix[-1:] == ["-c"] else [*prefix, *server_cmd]
        with log.open("w") as out:
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        url = f"postgresql://{PG_USER}@127.0.0.1:{port}/postgres"
        deadline = time.monotonic() + 60
        while True:
            try:
                psycopg.connect(url, connect_timeout=2).close()
                break
            except psycopg.OperationalError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"postgres did not start:\n{log.read_text()}") from None
                time.sleep(0.3)
        try:
            yield url
        finally:
            os.killpg(proc.pid, signal.SIGINT)  # "fast" shutdown of our server only
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_setup_creates_the_tables_and_is_idempotent(pg_url: str) -> None:
    saver = postgres_checkpointer(pg_url)
    again = postgres_checkpointer(pg_url)  # a second setup on existing tables is fine
    try:
        with psycopg.connect(pg_url) as conn:
            tables = {
                r[0]
                for r in conn.execute(
                    "select table_name from information_schema.tables where table_schema='public'"
                )
            }
        assert {"checkpoints", "checkpoint_writes", "checkpoint_blobs"} <= tables
    finally:
        saver.conn.close()
        again.conn.close()


def test_run_resumes_from_postgres_after_a_failure(pg_url: str, store: Store) -> None:
    config = thread_config("pg-resume")
    question = "Who wrote Hamlet?"
    attempts = 0

    def flaky(_: object) -> str:
        nonlocal attempts
        attempts += 1
        raise ConnectionError("endpoint went away mid-run")

    retriever1 = CountingRetriever(store)
    saver1 = postgres_checkpointer(pg_url)
    graph1 = build_graph(
        "standard_rag", llm=ScriptedChatModel(default=flaky), retriever=retriever1,
        checkpointer=saver1, retrieval_mode="bm25",
    )  # fmt: skip
    with pytest.raises((ConnectionError, EndpointError)):
        graph1.invoke({"question": question}, config)
    saver1.conn.close()  # the "process" is gone
    assert attempts == 1 and retriever1.queries == [question]

    retriever2 = CountingRetriever(store)
    model2 = ScriptedChatModel(default="William Shakespeare")
    saver2 = postgres_checkpointer(pg_url)
    try:
        graph2 = build_graph(
            "standard_rag", llm=model2, retriever=retriever2, checkpointer=saver2,
            retrieval_mode="bm25",
        )  # fmt: skip
        assert graph2.get_state(config).next == ("generate_answer",)
        out = graph2.invoke(None, config)
        assert out["answer"] == "William Shakespeare"
        assert retriever2.queries == [] and len(model2.calls) == 1
        assert "Hamlet is a tragedy" in model2.prompts()[0]
        assert out["usage"]["retrieval_calls"] == 1 and out["usage"]["llm_calls"] == 1
        history = list(graph2.get_state_history(config))
        assert len(history) >= 3  # input, after retrieve, after generate_answer
        assert {s.config["configurable"]["thread_id"] for s in history} == {"pg-resume"}
    finally:
        saver2.conn.close()


def test_threads_are_isolated_and_url_picks_postgres(pg_url: str, store: Store) -> None:
    saver = checkpointer_from_url(pg_url)
    try:
        graph = build_graph(
            "standard_rag", llm=ScriptedChatModel(rules=[("Hamlet", "Shakespeare")], default="Paris"),
            retriever=store, checkpointer=saver, retrieval_mode="bm25",
        )  # fmt: skip
        graph.invoke({"question": "Who wrote Hamlet?"}, thread_config("a"))
        graph.invoke({"question": "capital of France"}, thread_config("b"))
        assert graph.get_state(thread_config("a")).values["answer"] == "Shakespeare"
        assert graph.get_state(thread_config("b")).values["answer"] == "Paris"
        assert graph.get_state(thread_config("c")).values == {}
    finally:
        saver.conn.close()  # type: ignore[attr-defined]
