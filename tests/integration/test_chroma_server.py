"""A real Chroma server (`chroma run`) on loopback behind a gaprag store."""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gaprag.llm.server import free_port
from gaprag.stores import HashingEmbedder, Store
from gaprag.stores.documents import Document

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def chroma_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    exe = shutil.which("chroma")
    if exe is None:
        pytest.skip("the chroma CLI is not installed")
    port = free_port()
    data = tmp_path_factory.mktemp("chroma-data")
    log = (data / "chroma.log").open("wb")
    proc = subprocess.Popen(
        [exe, "run", "--path", str(data), "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url + "/api/v2/heartbeat", timeout=1):
                    break
            except OSError:
                time.sleep(0.3)
        else:
            pytest.fail("chroma run did not start: " + (data / "chroma.log").read_text()[-500:])
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_store_on_a_chroma_server(
    tmp_path: Path, chroma_url: str, tiny_docs: list[Document]
) -> None:
    store = Store.build(
        tmp_path / "s", tiny_docs, embedder=HashingEmbedder(), chroma_url=chroma_url, progress=False
    )
    assert store.manifest["chroma"]["url"] == chroma_url
    assert not (store.version_dir / "chroma").exists()  # vectors live on the server
    assert store.search("Eiffel Tower Paris", 1, mode="dense")[0]["id"] == "eiffel"
    reopened = Store.open(tmp_path / "s")
    hybrid = reopened.search("Who wrote Hamlet?", 2, mode="hybrid")
    assert hybrid[0]["id"] == "hamlet"
    # a rebuild uses a new collection and switches atomically
    rebuilt = Store.build(
        tmp_path / "s",
        tiny_docs[:2],
        embedder=HashingEmbedder(),
        chroma_url=chroma_url,
        progress=False,
    )
    assert rebuilt.manifest["chroma"]["collection"] != store.manifest["chroma"]["collection"]
    assert {h["id"] for h in Store.open(tmp_path / "s").search("capital", 5, mode="dense")} == {
        "fr",
        "de",
    }
    # an update on a server store: a new collection with the kept vectors and the new ones
    updated = rebuilt.add(
        [{"id": "oslo", "title": "Oslo", "text": "Oslo is in Norway."}], progress=False
    )
    assert updated.manifest["embedded"] == 1 and len(updated) == 3
    assert updated.manifest["chroma"]["collection"] != rebuilt.manifest["chroma"]["collection"]
    assert updated.dense_index().collection.count() == 3
    assert updated.search("Norway", 1, mode="dense")[0]["id"] == "oslo"
