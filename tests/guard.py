"""A stand-in server behind gaprag's StateGuard, a client of it, and a caller's identity."""

from __future__ import annotations

import json
from typing import Any

import httpx

from gaprag.server_app import StateGuard


class Recorder:
    """A stand-in for LangGraph's server behind the guard: records each request body it
    receives and answers in three streamed chunks; on a WebSocket, acknowledges each frame."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, bytes]] = []
        self.frames: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            await receive()  # websocket.connect
            await send({"type": "websocket.accept"})
            while (message := await receive())["type"] == "websocket.receive":
                self.frames.append(message["text"])
                await send({"type": "websocket.send", "text": json.dumps({"ack": message["text"]})})
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        self.requests.append((scope["method"], scope["path"], body))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for part in (b"event: a\n\n", b"event: b\n\n"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b"event: end\n\n"})


def guarded(
    inner: Recorder, scope_extra: dict[str, Any] | None = None, **options: Any
) -> httpx.AsyncClient:
    """An HTTP client of ``StateGuard(inner, **options)``; ``scope_extra`` is added to each
    request's ASGI scope (who the caller is: ``auth`` and ``user``)."""
    guard = StateGuard(inner, **options)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await guard({**scope, **(scope_extra or {})}, receive, send)

    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


class Credentials:
    """A caller's credentials: its scopes."""

    def __init__(self, scopes: list[str]) -> None:
        self.scopes = scopes


class User:
    """A caller's user."""

    identity = "alice"
