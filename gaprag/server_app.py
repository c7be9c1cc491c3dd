"""The HTTP app ``langgraph.json`` mounts beside the served graphs (``http.app``).

The LangGraph server exposes every graph as an MCP tool at ``/mcp``. Its ``tools/call``
answers with the Python ``repr`` of the run's whole output. This app adds one ASGI
middleware, :class:`McpToolText`, that turns such an answer into what
:func:`gaprag.as_tool` returns for the same run:

- the text content is the tool text (``answer: ...``, ``stop_reason: ...``, up to five
  ``evidence`` lines with an id, title and the first words of each passage);
- ``structuredContent`` is the compact result (answer, stop_reason, iterations, queries,
  evidence, usage), for clients that read fields.

Every other request and response passes through untouched; so does a ``tools/call`` answer
that is an error or not a method's output.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware

from gaprag.tool import tool_result

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]

#: Output fields that mark a run's output as a gaprag method's.
METHOD_OUTPUT = frozenset({"answer", "stop_reason"})


def run_output(text: str) -> dict[str, Any] | None:
    """The run output a ``tools/call`` text stands for (JSON or a dict's ``repr``), if it is a
    method's output."""
    value: Any = None
    try:
        value = json.loads(text)
    except ValueError:
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None
    if isinstance(value, dict) and value.keys() >= METHOD_OUTPUT:
        return value
    return None


def rewrite_tool_call(body: bytes) -> bytes | None:
    """The JSON-RPC answer ``body`` with a method's tool text and structured result, or None
    when it is not a successful ``tools/call`` answer carrying a method's output."""
    try:
        message = json.loads(body)
    except ValueError:
        return None
    result = message.get("result") if isinstance(message, dict) else None
    if not isinstance(result, dict) or result.get("isError"):
        return None
    content = result.get("content")
    if not (isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict)):
        return None
    if content[0].get("type") != "text" or not isinstance(content[0].get("text"), str):
        return None
    output = run_output(content[0]["text"])
    if output is None:
        return None
    text, compact = tool_result(output)
    message["result"] = {
        **result,
        "content": [{"type": "text", "text": text}],
        "structuredContent": compact,
    }
    return json.dumps(message, ensure_ascii=False).encode()


def _is_mcp_post(scope: MutableMapping[str, Any]) -> bool:
    path = str(scope.get("path", "")).rstrip("/")
    return scope["type"] == "http" and scope.get("method") == "POST" and path.endswith("/mcp")


class McpToolText:
    """ASGI middleware: a method's ``tools/call`` answer at ``/mcp`` becomes gaprag's tool
    text plus ``structuredContent`` (see the module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if not _is_mcp_post(scope):
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        chunks: list[bytes] = []

        async def capture(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
            else:
                await send(message)

        await self.app(scope, receive, capture)
        if start is None:  # the app sent no response: nothing to pass on
            return
        body = b"".join(chunks)
        headers = [(k, v) for k, v in start.get("headers", [])]
        json_reply = any(
            k.lower() == b"content-type" and v.startswith(b"application/json") for k, v in headers
        )
        new = rewrite_tool_call(body) if json_reply else None
        if new is not None:
            body = new
            headers = [(k, v) for k, v in headers if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            start = {**start, "headers": headers}
        await send(start)
        await send({"type": "http.response.body", "body": body, "more_body": False})


#: The app ``langgraph.json`` names in ``http.app``: no routes of its own, one middleware.
app = Starlette(middleware=[Middleware(McpToolText)])
