"""What a served run's caller reads when a library fails inside the run: gaprag's one line
naming the library and the error's class, never the library's own text or a server path.

``langgraph dev`` serves the shipped ``langgraph.json`` on a store whose Chroma database was
overwritten after it was built, so Chroma fails inside the run's retrieval; the caller waits
for the run and streams another.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.integration.conftest import Served, serve

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
