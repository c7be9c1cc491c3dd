"""Shared fixtures for integration tests: free ports, the fake OpenAI endpoint, a small store,
and ``langgraph dev`` serving every method (``served``)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gaprag.stores import HashingEmbedder, Store
from gaprag.stores.documents import Document
from gaprag.testing import served_config
from tests.conftest import OPERATOR_VARS
from tests.fake_openai import FakeOpenAI


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http_ok(url: str, timeout: float, *, alive: object = None) -> None:
    """Poll ``url`` until it answers 200; ``alive()`` returning False aborts early."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if callable(alive) and not alive():
            raise RuntimeError(f"the server behind {url} exited while starting")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError) as exc:
            last = exc
        time.sleep(0.25)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f} s ({last})")


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A running fake OpenAI-compatible endpoint; set ``.reply`` to script it."""
    with FakeOpenAI(reply="canned answer") as server:
        yield server


@pytest.fixture
def hashing_store(tmp_path: Path, tiny_docs: list[Document]) -> Path:
    """A store of the five tiny documents, embedded with HashingEmbedder (no model loads)."""
    root = tmp_path / "hashing-store"
    Store.build(root, tiny_docs, embedder=HashingEmbedder(), progress=False)
    return root


# -- langgraph dev serving every method -------------------------------------------------------
ROOT = Path(__file__).resolve().parents[2]
LANGGRAPH = Path(sys.executable).with_name("langgraph")
CANNED = "Gustave Eiffel"
SECRET = "sk-operator-secret-0123456789"
STARTUP_S = 120.0  # shared 2-core CI machines can be slow to import everything

DOCS = [
    {"id": "eiffel", "title": "Eiffel Tower", "text": "The Eiffel Tower in Paris was built by the engineer Gustave Eiffel."},
    {"id": "fr", "title": "France", "text": "Paris is the capital and largest city of France."},
    {"id": "hamlet", "title": "Hamlet", "text": "Hamlet is a tragedy written by William Shakespeare."},
]  # fmt: skip


@dataclass
class Served:
    url: str
    llm: FakeOpenAI
    store: Path
    methods: list[str]
    log: Path
    home: Path


@contextlib.contextmanager
def serve(tmp: Path, operator: dict[str, str], args: tuple[str, ...] = ()) -> Iterator[Served]:
    """``langgraph dev`` serving every method from ``tmp``, with the fake endpoint answering
    ``CANNED``, a store of ``DOCS`` at ``Served.store`` and the operator's environment
    ``operator`` (nothing else of the caller's operator settings; its ``GAPRAG_BASE_URL``
    names another endpoint); ``args``: more ``langgraph dev`` options."""
    pytest.importorskip("langgraph_api", reason="needs the studio extra: langgraph-cli[inmem]")
    if not LANGGRAPH.exists():
        pytest.skip(f"{LANGGRAPH} not found: pip install -e '.[studio]'")
    store = tmp / "store"
    Store.build(store, DOCS, embedder=HashingEmbedder(), progress=False)  # type: ignore[arg-type]
    # every graph langgraph.json serves: each method, then each paper configuration
    methods = list(json.loads((ROOT / "langgraph.json").read_text())["graphs"])
    config = served_config(ROOT / "langgraph.json", methods, tmp)
    port = free_port()
    log = tmp / "langgraph-dev.log"
    with FakeOpenAI(reply=CANNED) as llm:
        inherited = {k: v for k, v in os.environ.items() if k not in OPERATOR_VARS}
        env = {
            **inherited,
            "GAPRAG_BASE_URL": llm.base_url,
            **{k: v.replace("STORE", str(store)) for k, v in operator.items()},
            "GAPRAG_HOME": str(tmp / "home"),
            "LANGGRAPH_CLI_NO_ANALYTICS": "1",
            "LANGGRAPH_NO_VERSION_CHECK": "1",
            "HF_HUB_OFFLINE": "1",
        }
        env.pop("OPENAI_BASE_URL", None)
        with log.open("w") as out:
            proc = subprocess.Popen(
                [str(LANGGRAPH), "dev", "--no-browser", "--no-reload", "--port", str(port),
                 "--config", str(config), *args],
                cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}"
            try:
                wait_http_ok(f"{url}/ok", STARTUP_S, alive=lambda: proc.poll() is None)
            except (TimeoutError, RuntimeError) as exc:
                raise AssertionError(
                    f"{exc}\n--- server log ---\n{log.read_text()[-4000:]}"
                ) from None
            yield Served(url=url, llm=llm, store=store, methods=methods, log=log, home=tmp / "home")
        finally:
            os.killpg(proc.pid, signal.SIGTERM)  # the server and its workers, nothing else
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
    assert proc.returncode is not None


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``langgraph dev`` as an operator serves it: the operator names the store, the endpoint
    and the key, and allows nothing else (one server per test module)."""
    operator = {"GAPRAG_STORE": "STORE", "OPENAI_API_KEY": SECRET}
    with serve(tmp_path_factory.mktemp("studio"), operator) as server:
        yield server


@pytest.fixture(scope="module")
def served_default(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``langgraph dev`` on the default setup: an endpoint and nothing else, so the graphs use
    the bundled demo store, built on first use into an empty GAPRAG_HOME."""
    with serve(tmp_path_factory.mktemp("studio-default"), {}) as server:
        yield server


# -- a Milvus server -------------------------------------------------------------------------
MILVUS_LITE = Path(sys.executable).with_name("milvus-lite")
MILVUS_STARTUP_S = 60.0


def wait_tcp(host: str, port: int, timeout: float, *, alive: object = None) -> None:
    """Wait until ``host:port`` accepts a TCP connection; ``alive()`` False aborts early."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(alive) and not alive():
            raise RuntimeError(f"the server for {host}:{port} exited while starting")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
            return
        time.sleep(0.2)
    raise TimeoutError(f"{host}:{port} accepted no connection within {timeout:.0f} s")


def wait_milvus(uri: str, timeout: float) -> None:
    """Wait until the Milvus server at ``uri`` answers a call (a listening port is not yet a
    server that answers)."""
    from pymilvus import MilvusClient

    deadline = time.monotonic() + timeout
    while True:
        try:
            MilvusClient(uri=uri, timeout=5).list_collections()
            return
        except Exception as exc:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{uri} answered no call within {timeout:.0f} s ({exc})"
                ) from None
            time.sleep(0.5)


@pytest.fixture(scope="session")
def milvus_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``milvus://HOST:PORT`` of a Milvus server: the one ``GAPRAG_TEST_MILVUS_URI`` names (a
    standalone or managed Milvus), else Milvus Lite's development server (``milvus-lite
    server``) started on a free loopback port for the session and stopped by its process id.
    A server that cannot start fails the tests that need it, with its log."""
    given = os.environ.get("GAPRAG_TEST_MILVUS_URI", "").strip().rstrip("/")
    if given:
        yield given
        return
    if not MILVUS_LITE.exists():
        raise AssertionError(
            f"{MILVUS_LITE} not found: the Milvus tests need the milvus extra "
            "(pip install -e '.[milvus]'; scripts/setup.sh --dev installs it)"
        )
    data = tmp_path_factory.mktemp("milvus")
    port = free_port()
    log = data / "milvus-lite.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(MILVUS_LITE), "server", "--data-dir", str(data / "data"),
             "--host", "127.0.0.1", "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        try:
            wait_tcp("127.0.0.1", port, MILVUS_STARTUP_S, alive=lambda: proc.poll() is None)
            wait_milvus(f"http://127.0.0.1:{port}", MILVUS_STARTUP_S)
        except (TimeoutError, RuntimeError) as exc:
            raise AssertionError(
                f"{exc}\n--- milvus-lite log ---\n{log.read_text()[-4000:]}"
            ) from None
        yield f"milvus://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server's process group, nothing else
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
