"""A tiny OpenAI-compatible HTTP server for tests that need a real endpoint but no model.

It answers ``GET /v1/models`` and ``POST /v1/chat/completions`` (non-streaming and streaming)
with a canned reply plus token usage, and records every request body (``requests``) and its
HTTP headers (``headers``) it received::

    with FakeOpenAI(reply="Paris") as server:
        os.environ["GAPRAG_BASE_URL"] = server.base_url
        ...
        assert server.requests[0]["messages"][-1]["content"].endswith("Answer:")

``reply`` may be a string or a callable ``(request_body) -> str`` for scripted answers;
``finish_reason`` likewise (``"length"`` imitates a reply cut at the output cap).
``check_model=True`` refuses a request for any model but ``model`` with HTTP 404, as vLLM
does; ``list_models=False`` answers ``GET /v1/models`` with 404 (``model_lookups`` counts the
lists served). ``latency`` (seconds) delays every chat reply, like a real endpoint's generation time;
requests are served in parallel threads, as by a server with unlimited slots, unless ``slots``
limits how many are served at once (``slots=1``: one request at a time, the others wait their
turn in arrival order, like llama.cpp's server with one slot).
A reply may also be a :class:`RawReply`, to imitate a misbehaving endpoint: any status,
headers and body bytes, a delay, or a connection reset part-way through the body.
Only the standard library is used, so a ``langgraph dev`` subprocess can reach it too.
As its own process (it serves until stopped)::

    python -m tests.fake_openai --port 8099 --latency 0.5 --reply "Paris" [--slots 1]
"""

from __future__ import annotations

import collections
import contextlib
import json
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


@dataclass
class RawReply:
    """An HTTP response sent as is: ``body`` (bytes, or a str/JSON value to encode)."""

    body: Any = b""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"
    delay_s: float = 0.0  # wait before answering
    reset_after: int | None = None  # send this many body bytes, then reset the connection

    def payload(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode("utf-8", "surrogatepass")
        return json.dumps(self.body).encode()


Reply = str | RawReply | Callable[[dict[str, Any]], "str | RawReply"]

MODEL_ID = "fake-model"


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


class _Turnstile:
    """At most ``slots`` holders at once; the others enter in the order they arrived."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError("slots must be at least 1")
        self._free = slots
        self._waiting: collections.deque[threading.Event] = collections.deque()
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        with self._lock:
            if self._free > 0 and not self._waiting:
                self._free -= 1
                return
            turn = threading.Event()
            self._waiting.append(turn)
        turn.wait()  # the leaving holder hands its slot over

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            if self._waiting:
                self._waiting.popleft().set()
            else:
                self._free += 1


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (a timeout test) is not an error worth a traceback."""
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeOpenAI:
    """Run with ``start()``/``stop()`` or as a context manager; binds a free port on 127.0.0.1."""

    def __init__(
        self,
        reply: Reply = "canned answer",
        *,
        model: str = MODEL_ID,
        finish_reason: Reply = "stop",
        latency: float = 0.0,
        check_model: bool = False,
        list_models: bool = True,
        port: int = 0,
        slots: int | None = None,
    ) -> None:
        self.latency = latency
        self.slots = slots
        #: held while a chat request is served, when ``slots`` limits them
        self._slots = _Turnstile(slots) if slots is not None else None
        self.check_model = check_model
        self.list_models = list_models
        self.model_lookups = 0
        self.requested_port = port
        self.reply = reply
        self.finish_reason = finish_reason
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self.embedding_requests: list[dict[str, Any]] = []  # each /v1/embeddings body
        self.headers: list[dict[str, str]] = []  # each chat request's HTTP headers
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------
    @property
    def port(self) -> int:
        assert self._server is not None, "server not started"
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeOpenAI:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                pass

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/") in ("/v1/models", "/models") and fake.list_models:
                    with fake._lock:
                        fake.model_lookups += 1
                        fake.headers.append({k.lower(): v for k, v in self.headers.items()})
                    self._send(
                        200,
                        {
                            "object": "list",
                            "data": [{"id": fake.model, "object": "model", "owned_by": "test"}],
                        },
                    )
                elif self.path.rstrip("/") == "/health":
                    self._send(200, {"status": "ok"})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    self._send(400, {"error": {"message": "invalid JSON"}})
                    return
                if self.path.rstrip("/") in ("/v1/embeddings", "/embeddings"):
                    self._embeddings(body)
                    return
                if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                with fake._lock:
                    fake.requests.append(body)
                    fake.headers.append({k.lower(): v for k, v in self.headers.items()})
                if fake.check_model and body.get("model") != fake.model:
                    message = f"The model `{body.get('model')}` does not exist."
                    self._send(404, {"error": {"message": message, "code": 404}})
                    return
                with fake._slots if fake._slots is not None else contextlib.nullcontext():
                    if fake.latency > 0:
                        time.sleep(fake.latency)
                    text = fake.reply(body) if callable(fake.reply) else fake.reply
                if isinstance(text, RawReply):
                    self._raw(text)
                    return
                finish = fake.finish_reason
                finish = finish(body) if callable(finish) else finish
                prompt = sum(_tokens(str(m.get("content", ""))) for m in body.get("messages", []))
                usage = {
                    "prompt_tokens": prompt,
                    "completion_tokens": _tokens(text),
                    "total_tokens": prompt + _tokens(text),
                }
                if body.get("stream"):
                    self._stream(text, usage)
                    return
                self._send(
                    200,
                    {
                        "id": f"chatcmpl-{len(fake.requests)}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": fake.model,
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": text},
                                "finish_reason": finish,
                                "logprobs": None,
                            }
                        ],
                        "usage": usage,
                    },
                )

            def _embeddings(self, body: dict[str, Any]) -> None:
                """Deterministic bag-of-words vectors (gaprag's HashingEmbedder, 32 dims)."""
                from gaprag.stores.embeddings import HashingEmbedder

                texts = body.get("input") or []
                texts = [texts] if isinstance(texts, str) else texts
                with fake._lock:
                    fake.embedding_requests.append(body)
                vectors = HashingEmbedder(32).embed([str(t) for t in texts])
                data = [
                    {"object": "embedding", "index": i, "embedding": v.tolist()}
                    for i, v in enumerate(vectors)
                ]
                usage = {"prompt_tokens": 1, "total_tokens": 1}
                self._send(
                    200,
                    {"object": "list", "data": data, "model": body.get("model"), "usage": usage},
                )

            def _raw(self, raw: RawReply) -> None:
                if raw.delay_s:
                    time.sleep(raw.delay_s)
                data = raw.payload()
                self.send_response(raw.status)
                self.send_header("Content-Type", raw.content_type)
                self.send_header("Content-Length", str(len(data)))
                for key, value in raw.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                if raw.reset_after is None:
                    self.wfile.write(data)
                    return
                self.wfile.write(data[: raw.reset_after])
                self.wfile.flush()
                # SO_LINGER 0: close() sends a TCP RST instead of a clean FIN
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.close_connection = True
                self.connection.close()

            def _stream(self, text: str, usage: dict[str, int]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                base = {
                    "id": f"chatcmpl-{len(fake.requests)}",
                    "object": "chat.completion.chunk",
                    "created": int(time.time()),
                    "model": fake.model,
                }
                chunks = [
                    {"index": 0, "delta": {"role": "assistant", "content": text}},
                    {"index": 0, "delta": {}, "finish_reason": "stop"},
                ]
                for choice in chunks:
                    event = {**base, "choices": [choice]}
                    self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                final = {**base, "choices": [], "usage": usage}
                self.wfile.write(f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n".encode())

        self._server = _QuietServer(("127.0.0.1", self.requested_port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fake-openai", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- inspection ----------------------------------------------------------------------
    def user_prompts(self) -> list[str]:
        """The last message's content of every chat request, in order."""
        return [str((r.get("messages") or [{}])[-1].get("content", "")) for r in self.requests]


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description="serve a fake OpenAI-compatible endpoint")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per chat reply")
    parser.add_argument("--reply", default="canned answer")
    parser.add_argument("--model", default=MODEL_ID)
    parser.add_argument("--slots", type=int, default=None, help="requests served at once")
    args = parser.parse_args(argv)
    server = FakeOpenAI(
        args.reply, model=args.model, latency=args.latency, port=args.port, slots=args.slots
    )
    with server:
        print(server.base_url, flush=True)
        threading.Event().wait()  # until the process is stopped


if __name__ == "__main__":
    main()
