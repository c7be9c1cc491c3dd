"""An over-limit body gets its HTTP 413, whatever the client: the guard reads and drops the
rest of the body before it answers (``gaprag.server_app.refuse_too_large``), so a client that
sends its whole body before reading the answer (Python's urllib) reads the 413 too, not a
connection reset. Served by uvicorn, as ``langgraph dev`` serves, on a loopback port."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import httpx
import pytest

from gaprag.server_app import StateGuard
from tests.guard import Recorder
from tests.integration.conftest import free_port

uvicorn = pytest.importorskip("uvicorn", reason="needs the studio extra (LangGraph's server)")

LIMIT = 1024 * 1024
BIG = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                  "params": {"name": "standard_rag", "arguments": {"question": "x" * 10_000_000}}}).encode()  # fmt: skip
DETAIL = f"request body over {LIMIT} bytes is refused on this route"


@pytest.fixture(scope="module", params=["h11", "httptools"])
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, Recorder]]:
    inner = Recorder()
    port = free_port()
    config = uvicorn.Config(StateGuard(inner), host="127.0.0.1", port=port, log_level="error",
                            http=request.param, lifespan="off")  # fmt: skip
    served = uvicorn.Server(config)
    thread = threading.Thread(target=served.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not served.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", inner
    finally:
        served.should_exit = True
        thread.join(timeout=10)


def test_urllib_reads_the_413_after_sending_a_large_body(server: tuple[str, Recorder]) -> None:
    url, inner = server
    request = urllib.request.Request(
        f"{url}/mcp", data=BIG, headers={"Content-Type": "application/json"}, method="POST"
    )
    for _ in range(3):  # without the drain, most tries end in a broken pipe or a reset
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 413
        assert json.loads(refused.value.read())["error"]["message"] == DETAIL
    assert inner.requests == []


def test_httpx_reads_the_413_with_a_length_or_chunked(server: tuple[str, Recorder]) -> None:
    url, inner = server

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(BIG), 64 * 1024):
            yield BIG[i : i + 64 * 1024]

    with httpx.Client(base_url=url, timeout=30) as http:
        sized = http.post("/runs/wait", content=BIG)
        chunked = http.post("/runs/wait", content=chunks())
        after = http.post("/runs/wait", json={"assistant_id": "a"})  # the server still serves
    for reply in (sized, chunked):
        assert reply.status_code == 413 and reply.json() == {"detail": DETAIL}
        assert reply.headers["connection"] == "close"
    assert after.status_code == 200 and len(inner.requests) == 1


def test_a_client_waiting_for_100_continue_is_answered_at_once(
    server: tuple[str, Recorder],
) -> None:
    url, _ = server
    host, port = url.removeprefix("http://").split(":")
    head = (f"POST /runs/wait HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(BIG)}\r\nExpect: 100-continue\r\n\r\n")  # fmt: skip
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        conn.sendall(head.encode())  # and no body: the client waits to be told to send it
        reply = conn.recv(65536).decode()
    assert reply.startswith("HTTP/1.1 413"), reply
