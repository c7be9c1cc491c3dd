"""No graph blocks the event loop of an async run, on the default lazy dependencies.

Every method's ``ainvoke`` runs under ``blockbuster`` configured as ``langgraph dev`` configures
it (``langgraph_runtime_inmem.queue._enable_blockbuster``: every blocking call raises, except
the ones it allows: ``os.stat``, ``os.listdir``, ``os.remove``, ``os.path.*``, buffered file
reads and writes, ``threading.Lock.acquire``), with nothing injected and no store or client
made earlier in the process: the module's ``GAPRAG_HOME`` is empty at its start, so its first
run builds the demo store and every later one opens it; each run makes its chat client for a
configured endpoint (``GAPRAG_BASE_URL``), or for the embedded server, which the first run
that needs it starts with the real start-up code around a fake server process.

The default setup's first run is also run as ``langgraph dev`` meets it: each method, with the
settings of the default model's shipped profile (the gate on where it turns it on), as the
first run of a fresh process that starts the embedded server (``python -m
tests.unit.test_no_blocking METHOD``, one process per method).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import gaprag
from gaprag import config
from gaprag.context import BaseContext
from gaprag.deps import Deps
from gaprag.llm import factory, server
from gaprag.profiles import profile_for
from gaprag.stores import HashingEmbedder, Store, demo
from tests.blocking import langgraph_dev_blockbuster
from tests.fake_openai import FakeOpenAI

blockbuster = pytest.importorskip("blockbuster")

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "What is the capital of France?"
ANSWER = "Paris"


@contextmanager
def fake_embedded_server() -> Iterator[dict[Any, server.EmbeddedServer]]:
    """The embedded server as ``default_llm()`` starts it: the real decision and start-up code
    (free port, log file, supervised subprocess, health checks), with a fake OpenAI server as
    the subprocess's command instead of llama.cpp and its weights; stopped at the end."""
    servers: dict[Any, server.EmbeddedServer] = {}

    def command(self: server.EmbeddedServer, model_file: Path) -> list[str]:
        return [sys.executable, "-m", "tests.fake_openai", "--port", str(self.port),
                "--reply", ANSWER]  # fmt: skip

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", str(ROOT))  # the subprocess imports tests.fake_openai
        mp.setattr(server, "_servers", servers)
        mp.setattr(server, "pick_engine", lambda requested=None: "xllamacpp")
        mp.setattr(server, "ensure_model", lambda name, quiet=False: Path("model.gguf"))
        mp.setattr(server.EmbeddedServer, "command", command)
        try:
            yield servers
        finally:
            for started in servers.values():
                started.stop()


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One GAPRAG_HOME for the module, empty at its start: the first run builds the demo
    store into it, the later ones open it from disk."""
    return tmp_path_factory.mktemp("cold-home")


@pytest.fixture
def cold(monkeypatch: pytest.MonkeyPatch, home: Path) -> Path:
    """No store or client made earlier in the process: each run opens (or builds) the demo
    store and makes its chat client itself."""
    monkeypatch.setenv("GAPRAG_HOME", str(home))
    monkeypatch.setattr(demo, "_cache", {})
    monkeypatch.setattr(factory, "_defaults", {})
    return home


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    with FakeOpenAI(reply=ANSWER) as fake:
        monkeypatch.setenv("GAPRAG_BASE_URL", fake.base_url)
        yield fake


@pytest.fixture(scope="module")
def embedded_servers() -> Iterator[dict[Any, server.EmbeddedServer]]:
    """The embedded server as ``default_llm()`` starts it: the real decision and start-up code
    (free port, log file, supervised subprocess, health checks), with a fake OpenAI server as
    the subprocess's command instead of llama.cpp and its weights. Started by the module's
    first run that needs it, stopped at the module's end."""
    with fake_embedded_server() as servers:
        yield servers


@pytest.fixture
def embedded(
    monkeypatch: pytest.MonkeyPatch, embedded_servers: dict[Any, server.EmbeddedServer]
) -> dict[Any, server.EmbeddedServer]:
    monkeypatch.delenv("GAPRAG_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    return embedded_servers


def run_async(method: str, context: dict[str, Any] | None = None) -> dict[str, Any]:
    graph = gaprag.build_graph(method)  # nothing injected: everything resolved on first use

    async def go() -> dict[str, Any]:
        with langgraph_dev_blockbuster():
            return dict(await graph.ainvoke({"question": QUESTION}, context=context))

    return asyncio.run(go())


def built_demo_stores(home: Path) -> list[Path]:
    return sorted((home / "stores").glob("demo-*"))


@pytest.mark.parametrize("method", gaprag.list_methods())
def test_async_run_with_an_endpoint_never_blocks_the_loop(
    method: str, cold: Path, endpoint: FakeOpenAI
) -> None:
    out = run_async(method)
    assert out["stop_reason"]
    assert out["answer"]
    assert endpoint.requests, "the configured endpoint was not called"
    assert built_demo_stores(cold), "the demo store was not built into GAPRAG_HOME"


@pytest.mark.parametrize("method", gaprag.list_methods())
def test_async_run_with_the_embedded_server_never_blocks_the_loop(
    method: str, cold: Path, embedded: dict[Any, server.EmbeddedServer]
) -> None:
    out = run_async(method)
    assert out["stop_reason"]
    assert out["answer"]
    (started,) = embedded.values()  # started once, by the first run that needed it
    assert started.process is not None and started.process.poll() is None
    assert built_demo_stores(cold)


@pytest.mark.parametrize("method", gaprag.list_methods())
def test_async_run_on_a_users_store_never_blocks_the_loop(
    method: str,
    cold: Path,
    endpoint: FakeOpenAI,
    tmp_path: Path,
    tiny_docs: list[dict[str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The store named in the run's context (as Studio's form sends it, under the operator's
    store root) is opened in the run."""
    monkeypatch.setenv("GAPRAG_STORE_ROOT", str(tmp_path))
    store = tmp_path / "store"
    Store.build(store, tiny_docs, embedder=HashingEmbedder(), progress=False)  # type: ignore[arg-type]
    out = run_async(method, {"store": str(store)})
    assert out["stop_reason"] and out["answer"]
    assert out["retrieved_ids"]
    assert set(out["retrieved_ids"]) <= {d["id"] for d in tiny_docs}  # none of the demo's


def test_a_graph_moved_to_another_endpoint_resolves_it_off_the_loop(
    cold: Path,
    endpoint: FakeOpenAI,
    embedded_servers: dict[Any, server.EmbeddedServer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client is looked up directly once its settings were resolved; a change of them (here
    the endpoint's environment, to the embedded server) is resolved in a thread again."""
    graph = gaprag.build_graph("standard_rag")

    async def go() -> list[dict[str, Any]]:
        outs = []
        with langgraph_dev_blockbuster():
            outs.append(dict(await graph.ainvoke({"question": QUESTION})))
            monkeypatch.delenv("GAPRAG_BASE_URL")
            outs.append(dict(await graph.ainvoke({"question": QUESTION})))
        return outs

    first, second = asyncio.run(go())
    assert first["answer"] == second["answer"] == ANSWER
    assert len(endpoint.requests) == first["usage"]["llm_calls"]  # the second went elsewhere
    assert len(embedded_servers) == 1


def test_the_check_catches_a_demo_store_built_on_the_loop(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The check is not vacuous: the synchronous lookup, called on the loop, is refused."""
    monkeypatch.setenv("GAPRAG_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(demo, "_cache", {})

    async def go() -> None:
        with langgraph_dev_blockbuster():
            Deps().search(BaseContext())

    with pytest.raises(blockbuster.BlockingError):
        asyncio.run(go())


def test_sync_invoke_resolves_the_same_lazy_dependencies(cold: Path, endpoint: FakeOpenAI) -> None:
    out = gaprag.build_graph("standard_rag").invoke({"question": QUESTION})
    assert out["answer"] == ANSWER and out["evidence"]
    assert built_demo_stores(cold)


# -- the default setup's first run, one fresh process per method -----------------------------
def first_run(method: str) -> dict[str, Any]:
    """``method``'s first run in this process, on the embedded server it starts, under the
    default model's profile; what the run answered and the settings it ran with."""
    with fake_embedded_server():
        out = run_async(method)
    gate = getattr(gaprag.build_graph(method).context_schema, "gate", "off")
    return {"stop_reason": out.get("stop_reason"), "answer": out.get("answer"), "gate": gate}


@pytest.fixture(scope="module")
def first_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str, str]]:
    """Each method's first run in a fresh process (all started at once), as ``langgraph dev``
    with no endpoint starts: an empty GAPRAG_HOME, the default model (whose profile turns the
    gate on), the embedded server not started. Per method: (exit code, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if k not in ("GAPRAG_BASE_URL", "OPENAI_BASE_URL")}
    env.update(GAPRAG_LOCAL_MODEL=config.DEFAULT_LOCAL_MODEL, PYTHONPATH=str(ROOT))
    running = {}
    for method in gaprag.list_methods():
        home = str(tmp_path_factory.mktemp(f"first-{method}"))
        running[method] = subprocess.Popen(
            [sys.executable, "-m", "tests.unit.test_no_blocking", method],
            env={**env, "GAPRAG_HOME": home},
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    done = {}
    for method, process in running.items():
        out, err = process.communicate(timeout=600)
        done[method] = (process.returncode, out, err)
    return done


@pytest.mark.parametrize("method", gaprag.list_methods())
def test_default_setups_first_run_never_blocks_the_loop(
    method: str, first_runs: dict[str, tuple[int, str, str]]
) -> None:
    profile = profile_for(config.DEFAULT_LOCAL_MODEL)
    assert profile is not None, "the default model has a shipped profile"
    code, stdout, stderr = first_runs[method]
    assert code == 0, stderr[-3000:]
    out = json.loads(stdout.strip().splitlines()[-1])
    assert out["stop_reason"] and out["answer"] == ANSWER
    assert out["gate"] == profile.settings(method).get("gate", "off")


if __name__ == "__main__":
    print(json.dumps(first_run(sys.argv[1])))
