"""Shared fixtures for integration tests: free ports, the fake OpenAI endpoint, a small store."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gaprag.stores import HashingEmbedder, Store
from gaprag.stores.documents import Document
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
