"""Reliability with the real servers and models: the embedded LLM server listens on loopback
only, with an owner-only log; `gaprag index` killed with SIGKILL over an existing store
leaves the store opening and answering."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gaprag.llm.registry import MODELS, is_installed
from gaprag.stores import Store, default_embedder
from gaprag.stores.documents import Document

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]


def _listening(port: int) -> list[str]:
    """Local addresses (hex ``ADDR:PORT``) listening on ``port``, IPv4 and IPv6."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state = fields[1], fields[3]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A = LISTEN
                found.append(local)
    return found


@pytest.mark.llm
@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc")
@pytest.mark.skipif(
    not is_installed(MODELS["smollm2-135m"]), reason="run: gaprag llm install smollm2-135m"
)
def test_embedded_server_listens_on_loopback_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gaprag.llm.server import EmbeddedServer, free_port, pick_engine

    monkeypatch.setenv("GAPRAG_HOME", str(tmp_path / "home"))
    server = EmbeddedServer(model="smollm2-135m", engine=pick_engine(), port=free_port())
    server.start(quiet=True)
    try:
        addresses = _listening(server.port)
        assert addresses, "nothing listens on the server's port"
        # 127.0.0.1 is 0100007F in /proc's little-endian hex; never 00000000 (all interfaces)
        assert all(a.split(":")[0] == "0100007F" for a in addresses), addresses
        assert server.log_path is not None
        assert stat.S_IMODE(server.log_path.stat().st_mode) == 0o600
        assert stat.S_IMODE(server.log_path.parent.stat().st_mode) == 0o700
    finally:
        server.stop()


def test_kill_9_during_gaprag_index_keeps_the_previous_store(
    tmp_path: Path, tiny_docs: list[Document]
) -> None:
    root = tmp_path / "store"
    # MiniLM, as `gaprag index` then updates the store with the store's own embedder
    Store.build(root, tiny_docs, embedder=default_embedder(), progress=False).close()
    corpus = tmp_path / "big.jsonl"
    with corpus.open("w") as fh:
        for i in range(3000):
            fh.write(json.dumps({"id": f"n{i}", "text": f"zebra {i} lives in Kenya " * 8}) + "\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GAPRAG_HOME": str(tmp_path / "home")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gaprag.cli", "index", str(corpus), "--store", str(root)],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
    assert proc.stderr is not None
    deadline = time.monotonic() + 300
    for line in proc.stderr:  # "gaprag: indexing 3000 passages ..." comes before embedding
        if "gaprag: indexing" in line:
            break
        assert time.monotonic() < deadline
    time.sleep(2.0)  # inside the embedding of 3,000 passages
    proc.send_signal(signal.SIGKILL)
    proc.wait(60)
    assert proc.returncode == -signal.SIGKILL
    store = Store.open(root)
    assert len(store) == len(tiny_docs)
    assert store.search("Who wrote Hamlet?", 1, mode="hybrid")[0]["id"] == "hamlet"
