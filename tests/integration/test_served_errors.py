"""What a served run's caller reads when a run fails on the server's side: one line saying
what failed and what to do, never a library's own text, a server path, URL or credential,
through the runs API, streams and MCP alike.

``langgraph dev`` serves the shipped ``langgraph.json``: on a store whose Chroma database was
overwritten after it was built (Chroma fails inside the run's retrieval: gaprag's line names
the library); with an endpoint that does not answer (its URL holds a password); on a store
removed after the server started.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.conftest import Served, free_port, serve

pytestmark = pytest.mark.integration

pytest.importorskip("langgraph_api", reason="needs the studio extra: langgraph-cli[inmem]")

RUN = {
    "assistant_id": "standard_rag",
    "input": {"question": "Who built the Eiffel Tower?"},
    "context": {"retrieval_mode": "dense"},
}
CHROMA_TEXT = "file is not a database"  # what Chroma says about the overwritten file


@pytest.fixture(scope="module")
def served_broken(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(tmp_path_factory.mktemp("broken"), {"GAPRAG_STORE": "STORE"}) as server:
        [database] = server.store.glob("v-*/chroma/chroma.sqlite3")
        database.write_bytes(b"not a database " * 100)
        yield server


def test_a_library_failure_reaches_the_caller_as_gaprags_one_line(served_broken: Served) -> None:
    with httpx.Client(base_url=served_broken.url, timeout=120) as http:
        waited = http.post("/runs/wait", json=RUN)
        streamed = http.post("/runs/stream", json=RUN)
    assert waited.status_code == 200, waited.text
    error = waited.json()["__error__"]
    assert error["error"] == "DependencyError", error
    assert "chromadb" in error["message"] and "\n" not in error["message"]
    assert "event: error" in streamed.text and "DependencyError" in streamed.text
    for text in (waited.text, streamed.text):
        assert CHROMA_TEXT not in text and str(served_broken.store) not in text
    assert CHROMA_TEXT in served_broken.log.read_text()  # the server's log keeps it


PASSWORD = "pa55word-of-the-operator"


@pytest.fixture(scope="module")
def served_down(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    endpoint = f"http://gaprag:{PASSWORD}@127.0.0.1:{free_port()}/v1"  # nothing listens there
    operator = {"GAPRAG_STORE": "STORE", "GAPRAG_BASE_URL": endpoint, "GAPRAG_MAX_RETRIES": "0"}
    with serve(tmp_path_factory.mktemp("down"), operator) as server:
        yield server


def told(served: Served, run: dict[str, Any]) -> list[str]:
    """What a caller reads of a failed run: waited for, streamed, and as an MCP tool's error."""
    with httpx.Client(base_url=served.url, timeout=120) as http:
        waited = http.post("/runs/wait", json=run)
        streamed = http.post("/runs/stream", json=run)
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": run["assistant_id"], "arguments": run["input"]}}  # fmt: skip
        tool = http.post("/mcp", json=call, headers={"Accept": "application/json"})
    assert waited.status_code == 200 and streamed.status_code == 200, waited.text
    assert tool.status_code == 200, tool.text
    error = waited.json()["__error__"]
    [content] = tool.json()["result"]["content"]
    assert "event: error" in streamed.text and error["message"] in streamed.text
    return [f"{error['error']}: {error['message']}", content["text"]]


def test_an_endpoint_that_does_not_answer_is_one_line_without_its_url(served_down: Served) -> None:
    lines = told(served_down, {**RUN, "context": {"retrieval_mode": "bm25"}})
    for line in lines:
        assert line.startswith("EndpointError: the model endpoint is not answering as it "), line
        assert "tell the server's operator" in line and "\n" not in line
        assert PASSWORD not in line and "127.0.0.1" not in line
    assert lines[0] == lines[1]  # the runs API and MCP say the same
    assert PASSWORD in served_down.log.read_text()  # the operator's log has the full text


@pytest.fixture(scope="module")
def served_no_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(tmp_path_factory.mktemp("no-store"), {"GAPRAG_STORE": "STORE"}) as server:
        shutil.rmtree(server.store)  # before any run opened it
        yield server


def test_a_store_that_cannot_be_opened_is_one_line_without_its_path(
    served_no_store: Served,
) -> None:
    lines = told(served_no_store, {**RUN, "context": {"retrieval_mode": "bm25"}})
    for line in lines:
        assert line.startswith("StoreError: the store cannot be opened or read: "), line
        assert "tell the server's operator" in line and "\n" not in line
        assert str(served_no_store.store) not in line
    assert lines[0] == lines[1]
    assert str(served_no_store.store) in served_no_store.log.read_text()
