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

A second middleware, :class:`StateGuard`, keeps a run's state the graph's own: it refuses,
with HTTP 403 and a one-line JSON ``detail``, every request that would write channels
directly (``command.update``, ``command.goto`` and its ``Send``; ``supersteps`` on thread
creation; thread state updates and copies; the same fields in A2A messages and in the
streaming protocol's commands) and the side doors ``langgraph.json`` has no switch for
(a run's ``webhook``, crons). ``command: {"resume": ...}`` alone passes: it answers a paused
run's question (RAG-EF's expert review) and the graph validates the value like any input.
It reads at most :data:`MAX_BODY_BYTES` of a guarded request's body and hands the same bytes
on; responses, streamed ones included, pass through untouched.

Between clients, the guard refuses, with authentication on or off (:mod:`gaprag.auth`):
edits and deletions of the operator's assistants (one per graph, their ids
``uuid5(NAMESPACE_GRAPH, graph_id)``: :func:`system_assistants`), and an assistant name that
shadows a graph (an MCP tool of the same name would fail for everyone). Without client tokens
it also refuses ``POST /runs/cancel`` by ``status`` (every caller's runs); with them, LangGraph's
filters limit it to the caller's runs. A request announcing a body over
:data:`MAX_BODY_BYTES` is refused on every route (``/mcp`` answers a JSON-RPC error), and so is
an MCP ``tools/call`` of a client at its in-flight limit (HTTP 429, a JSON-RPC error).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import functools
import json
import os
import re
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import JSONResponse

from gaprag import auth
from gaprag.route_guard import RouteGuard, header
from gaprag.tool import tool_result

Message = MutableMapping[str, Any]
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]
#: Why a request is refused, from its parsed body, path and scope (None: it passes).
Refusal = Callable[[Any, str, Scope], "str | None"]

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


#: The header :class:`McpToolText` puts on an MCP request (replacing any the client sent).
#: LangGraph's MCP handler starts the tool's run with the request's headers, so the run's
#: answer carries it back through this middleware.
MCP_CALL = b"x-gaprag-mcp-call"
#: What each MCP request in progress learnt of its run's error: ``{call id: __error__}``.
_run_errors: dict[str, dict[str, Any]] = {}
#: Longest run answer read for its error (a run's error answer is a few hundred bytes).
MAX_ERROR_ANSWER = 64 * 1024


def _is_run_wait(scope: Scope) -> bool:
    path = str(scope.get("path", "")).rstrip("/")
    return scope["type"] == "http" and path.endswith("/runs/wait")


def tool_error_text(body: bytes, error: dict[str, Any] | None) -> bytes | None:
    """A failed ``tools/call`` answer whose text is only the error's class name (all LangGraph's
    MCP handler keeps), with the run's one line instead: ``"Class: message"``; None when the
    answer is not such a failure or the run's error is unknown."""
    if not error or not isinstance(error.get("message"), str):
        return None
    try:
        message = json.loads(body)
    except ValueError:
        return None
    result = message.get("result") if isinstance(message, dict) else None
    if not isinstance(result, dict) or not result.get("isError"):
        return None
    content = result.get("content")
    if not (isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict)):
        return None
    if content[0].get("text") != error.get("error"):
        return None
    text = f"{error['error']}: {error['message']}"
    message["result"] = {**result, "content": [{"type": "text", "text": text}]}
    return json.dumps(message, ensure_ascii=False).encode()


class McpToolText:
    """ASGI middleware: a method's ``tools/call`` answer at ``/mcp`` becomes gaprag's tool
    text plus ``structuredContent``, and a failed run's answer its one-line error instead of
    the error's class name alone (see the module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if _is_mcp_post(scope):
            await self._tool_call(scope, receive, send)
        elif _is_run_wait(scope) and (call := header(scope, MCP_CALL)) in _run_errors:
            await self._run_for_tool(str(call), scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _run_for_tool(self, call: str, scope: Scope, receive: Receive, send: Send) -> None:
        """A tool call's run, passed through as it is; its error, if any, kept for the call."""
        seen = bytearray()

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.body" and len(seen) <= MAX_ERROR_ANSWER:
                seen.extend(message.get("body", b""))
            await send(message)

        await self.app(scope, receive, watch)
        try:
            answer = json.loads(bytes(seen))
        except ValueError:
            return
        error = answer.get("__error__") if isinstance(answer, dict) else None
        if isinstance(error, dict) and call in _run_errors:
            _run_errors[call] = error

    async def _tool_call(self, scope: Scope, receive: Receive, send: Send) -> None:
        call = uuid.uuid4().hex
        headers = [(k, v) for k, v in scope.get("headers", ()) if bytes(k).lower() != MCP_CALL]
        scope = {**scope, "headers": [*headers, (MCP_CALL, call.encode())]}
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

        _run_errors[call] = {}
        try:
            await self.app(scope, receive, capture)
        finally:
            error = _run_errors.pop(call, None)
        if start is None:  # the app sent no response: nothing to pass on
            return
        body = b"".join(chunks)
        headers = [(k, v) for k, v in start.get("headers", [])]
        json_reply = any(
            k.lower() == b"content-type" and v.startswith(b"application/json") for k, v in headers
        )
        new = (rewrite_tool_call(body) or tool_error_text(body, error)) if json_reply else None
        if new is not None:
            body = new
            headers = [(k, v) for k, v in headers if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            start = {**start, "headers": headers}
        await send(start)
        await send({"type": "http.response.body", "body": body, "more_body": False})


# -- StateGuard: a run's state is written by its graph only ------------------------------------
#: Longest request body :class:`StateGuard` reads on a guarded route (1 MiB); a longer one is
#: refused with HTTP 413. A run's input is a question and a few settings.
MAX_BODY_BYTES = 1024 * 1024

_OWN = "a run's state is written by its graph only"
SUPERSTEPS = f"supersteps are refused on thread creation: {_OWN}"
STATE_UPDATE = f"thread state updates are refused: {_OWN}"
THREAD_COPY = f"copying a thread is refused: {_OWN}"
WEBHOOK = (
    "webhook is refused: this server posts run output to no URL; wait for the run instead "
    "(/runs/wait, /threads/{thread_id}/runs/{run_id}/join)"
)
CRONS = "crons are off on this server: every run is started by its caller"


def too_large(limit: int) -> str:
    return f"request body over {limit} bytes is refused on this route"


def command_refusal(command: Any, where: str = "command") -> str | None:
    """Why a run's ``command`` is refused, or None: only ``{"resume": value}`` passes (fields
    set to null count as absent)."""
    if command is None:
        return None
    if not isinstance(command, dict):
        return f'{where} must be {{"resume": value}}: {_OWN}'
    fields = sorted(str(k) for k, v in command.items() if k != "resume" and v is not None)
    if not fields:
        return None
    named = ", ".join(f"{where}.{field}" for field in fields)
    verb = "is" if len(fields) == 1 else "are"
    return f"{named} {verb} refused: {_OWN} ({where}.resume alone answers a paused run)"


def run_refusal(body: Any) -> str | None:
    """A run request (``/runs``, ``/runs/wait``, ``/runs/stream``, per thread too)."""
    if not isinstance(body, dict):
        return None  # not a run request: the server answers it
    if (refused := command_refusal(body.get("command"))) is not None:
        return refused
    return WEBHOOK if body.get("webhook") is not None else None


def batch_refusal(body: Any) -> str | None:
    """``/runs/batch``: a list of run requests."""
    items = body if isinstance(body, list) else []
    return next((r for r in map(run_refusal, items) if r is not None), None)


def thread_refusal(body: Any) -> str | None:
    """``POST /threads``: ``supersteps`` write the new thread's state."""
    return SUPERSTEPS if isinstance(body, dict) and body.get("supersteps") else None


def protocol_refusal(body: Any) -> str | None:
    """A streaming-protocol command (``/threads/{id}/commands`` and its WebSocket):
    ``run.start`` and ``input.respond`` take ``params.update`` and ``params.goto``."""
    if not isinstance(body, dict) or body.get("method") not in ("run.start", "input.respond"):
        return None
    params = body.get("params")
    if not isinstance(params, dict):
        return None
    forged = {k: params[k] for k in ("update", "goto") if params.get(k) is not None}
    return command_refusal(forged or None, where=f"{body['method']} params")


def a2a_refusal(body: Any) -> str | None:
    """An A2A JSON-RPC request: ``params.message.command`` is a run's command."""
    params = body.get("params") if isinstance(body, dict) else None
    message = params.get("message") if isinstance(params, dict) else None
    if not isinstance(message, dict):
        return None
    return command_refusal(message.get("command"), where="message.command")


#: LangGraph's namespace for the ids of the assistants it makes for each graph
#: (``langgraph_api.graph.NAMESPACE_GRAPH``).
NAMESPACE_GRAPH = uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8")
SYSTEM_ASSISTANT = (
    "the operator's assistants are read-only: run them with your settings in the run's "
    "context instead"
)
CANCEL_ALL = (
    "cancelling runs by status is refused on this server: it would cancel every caller's "
    "runs; cancel your own with thread_id and run_ids"
)


@functools.cache
def graph_ids() -> frozenset[str]:
    """The served graphs' ids: ``langgraph.json``'s ``graphs``, as LangGraph's server hands
    them to its process (``LANGSERVE_GRAPHS``; ``langgraph dev`` and a built image set it)."""
    try:
        graphs = json.loads(os.environ.get("LANGSERVE_GRAPHS") or "null")
    except ValueError:
        graphs = None
    return frozenset(str(g) for g in graphs) if isinstance(graphs, dict) else frozenset()


def system_assistants() -> frozenset[str]:
    """The ids the operator's assistants answer to: each graph's id and its assistant's."""
    return graph_ids() | {str(uuid.uuid5(NAMESPACE_GRAPH, g)) for g in graph_ids()}


def _assistant_id(text: str) -> str:
    try:
        return str(uuid.UUID(text))
    except ValueError:
        return text


def name_refusal(body: Any) -> str | None:
    """An assistant name that holds hidden characters or passes for a graph's
    (:func:`gaprag.auth.name_refusal`; ``POST /assistants``, ``PATCH /assistants/{id}``)."""
    name = body.get("name") if isinstance(body, dict) else None
    if not isinstance(name, str):
        return None
    return auth.name_refusal(name, sorted(graph_ids()), "the graph")


def assistant_refusal(body: Any, path: str, scope: Scope) -> str | None:
    """An edit, deletion or version change of an operator's assistant, or a shadowing name."""
    target = _assistant_id(path.rstrip("/").removesuffix("/latest").rsplit("/", 1)[-1])
    if target in system_assistants():
        return SYSTEM_ASSISTANT
    return name_refusal(body)


def cancel_refusal(body: Any, path: str, scope: Scope) -> str | None:
    """``POST /runs/cancel`` by status: every caller's runs, unless clients are told apart."""
    by_status = isinstance(body, dict) and body.get("status")
    return CANCEL_ALL if by_status and not caller_is_client(scope) else None


def caller_is_client(scope: Scope) -> bool:
    """Whether the request's caller is a client authenticated by its token."""
    user = scope.get("user")
    return auth.CLIENT in getattr(scope.get("auth"), "scopes", ()) and bool(
        getattr(user, "identity", "")
    )


async def tool_call_refusal(message: Any, scope: Scope) -> str | None:
    """An MCP ``tools/call`` by a client at its in-flight limit (:data:`gaprag.auth.in_flight`):
    its run would be refused inside the MCP route, which answers that with HTTP 500, so the
    call is refused here with the limit's one line."""
    if not (isinstance(message, dict) and message.get("method") == "tools/call"):
        return None
    if not caller_is_client(scope):
        return None
    return await auth.in_flight.refusal(str(scope["user"].identity))


def body_only(refusal: Callable[[Any], str | None]) -> Refusal:
    """A refusal that reads the body alone."""
    return lambda body, _path, _scope: refusal(body)


def _route(pattern: str) -> re.Pattern[str]:
    """A route of LangGraph's API, under any mount prefix, with or without a trailing slash."""
    return re.compile(rf"(?:/.*)?{pattern}/?")


@dataclass(frozen=True)
class Rule:
    """A guarded route: ``refusal(body, path, scope)`` says why a request is refused (None:
    it passes); a text refuses every request, unread. ``jsonrpc``: the route speaks JSON-RPC
    (``/mcp``), so a refusal is a JSON-RPC error."""

    method: str
    path: re.Pattern[str]
    refusal: Refusal | str
    jsonrpc: bool = False


_ID = r"[^/]+"
RULES = (
    Rule("POST", _route(rf"(?:/threads/{_ID})?/runs(?:/stream|/wait)?"), body_only(run_refusal)),
    Rule("POST", _route(r"/runs/batch"), body_only(batch_refusal)),
    Rule("POST", _route(r"/runs/cancel"), cancel_refusal),
    Rule("POST", _route(rf"(?:/threads/{_ID})?/runs/crons"), CRONS),
    Rule("PATCH", _route(rf"/runs/crons/{_ID}"), CRONS),
    Rule("POST", _route(r"/threads"), body_only(thread_refusal)),
    Rule("POST", _route(rf"/threads/{_ID}/state"), STATE_UPDATE),
    Rule("POST", _route(rf"/threads/{_ID}/copy"), THREAD_COPY),
    Rule("POST", _route(rf"/threads/{_ID}/commands"), body_only(protocol_refusal)),
    Rule("POST", _route(rf"/a2a/{_ID}"), body_only(a2a_refusal)),
    Rule("POST", _route(r"/assistants"), body_only(name_refusal)),
    Rule("PATCH", _route(rf"/assistants/{_ID}"), assistant_refusal),
    Rule("DELETE", _route(rf"/assistants/{_ID}"), assistant_refusal),
    Rule("POST", _route(rf"/assistants/{_ID}/latest"), assistant_refusal),
    Rule("POST", _route(r"/mcp"), body_only(lambda _body: None), jsonrpc=True),
)
#: The streaming protocol's WebSocket: each frame is a command.
PROTOCOL_SOCKET = _route(rf"/threads/{_ID}/stream/events")


def guarded_rule(method: str, path: str) -> Rule | None:
    """The rule for a request, or None when the route is not guarded."""
    return next((r for r in RULES if r.method == method and r.path.fullmatch(path)), None)


def parse(raw: bytes | str | None) -> Any:
    """A body as LangGraph's server reads it (orjson), or None when empty or not JSON (the
    server refuses those itself)."""
    if not raw:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


class _ClientGone(Exception):
    """The client disconnected before its request body was read."""


async def read_body(receive: Receive, limit: int) -> bytes | None:
    """The request body, or None as soon as it is longer than ``limit``."""
    chunks = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone
        chunks += message.get("body", b"")
        if len(chunks) > limit:
            return None
        if not message.get("more_body", False):
            return bytes(chunks)


class StateGuard:
    """ASGI middleware: refuses what would write a run's state directly, and the side doors
    ``langgraph.json`` cannot close (see the module docstring)."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] == "websocket" and PROTOCOL_SOCKET.fullmatch(path):
            await self.app(scope, guard_frames(receive, send), send)
            return
        rule = guarded_rule(str(scope.get("method", "")), path) if scope["type"] == "http" else None
        if scope["type"] == "http" and announced_length(scope) > self.max_body_bytes:
            await refuse_too_large(scope, receive, send, self.max_body_bytes, rule)
            return
        if rule is None:
            await self.app(scope, receive, send)
            return
        if isinstance(rule.refusal, str):
            await refuse(scope, receive, send, 403, rule.refusal, rule)
            return
        try:
            body = await read_body(receive, self.max_body_bytes)
        except _ClientGone:
            return
        if body is None:
            await refuse_too_large(scope, receive, send, self.max_body_bytes, rule)
            return
        message = parse(body)
        refused = rule.refusal(message, path, scope)
        if refused is not None:
            await refuse(scope, receive, send, 403, refused, rule)
            return
        if rule.jsonrpc and (busy := await tool_call_refusal(message, scope)) is not None:
            await refuse(scope, receive, send, 429, busy, rule, message.get("id"))
            return
        await self.app(scope, replay(body, receive), send)


#: Most bytes of an over-limit body read and dropped before the 413 is sent, and how long
#: that may take: a client that sends its whole body before it reads the answer (Python's
#: urllib) then reads the 413 instead of a connection reset.
DRAIN_BYTES = 64 * 1024 * 1024
DRAIN_S = 30.0


async def drain(receive: Receive, limit: int = DRAIN_BYTES, timeout_s: float = DRAIN_S) -> None:
    """Read and drop the rest of a request's body: up to ``limit`` bytes, for up to
    ``timeout_s`` seconds, until the client has sent it all or gone."""

    async def rest() -> None:
        read = 0
        while read <= limit:
            message = await receive()
            if message["type"] != "http.request":
                return
            read += len(message.get("body", b""))
            if not message.get("more_body", False):
                return

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(rest(), timeout_s)


def expects_continue(scope: MutableMapping[str, Any]) -> bool:
    """Whether the client waits for ``100 Continue`` before it sends the body."""
    return any(
        k.lower() == b"expect" and v.strip().lower() == b"100-continue"
        for k, v in scope.get("headers", ())
    )


async def refuse_too_large(
    scope: MutableMapping[str, Any], receive: Receive, send: Send, limit: int, rule: Rule | None
) -> None:
    """HTTP 413 for a body over ``limit``, sent once the client has finished sending (the body
    is read and dropped, up to :data:`DRAIN_BYTES`; a client that waits for ``100 Continue``
    has sent none), on a connection then closed."""
    if not expects_continue(scope):
        await drain(receive)
    await refuse(scope, receive, send, 413, too_large(limit), rule, close=True)


def announced_length(scope: MutableMapping[str, Any]) -> int:
    """The request's ``Content-Length`` (0 when absent or not a number)."""
    for key, value in scope.get("headers", ()):
        if key.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


async def refuse(
    scope: MutableMapping[str, Any],
    receive: Receive,
    send: Send,
    status: int,
    detail: str,
    rule: Rule | None = None,
    request_id: Any = None,
    *,
    close: bool = False,
) -> None:
    """Answer with ``{"detail": ...}``, as LangGraph's server answers its own refusals; on a
    JSON-RPC route, with a JSON-RPC error (``request_id``: the request's ``id``, null when
    the request was not read). ``close``: the server closes the connection after it."""
    content: dict[str, Any] = {"detail": detail}
    if rule is not None and rule.jsonrpc:
        error = {"code": -32600, "message": detail}
        content = {"jsonrpc": "2.0", "id": request_id, "error": error}
    headers = {"Connection": "close"} if close else None
    await JSONResponse(content, status_code=status, headers=headers)(scope, receive, send)


def replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` for the app: the body already read, then the client's own messages (a
    streamed response still learns when its client disconnects)."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


def guard_frames(receive: Receive, send: Send) -> Receive:
    """``receive`` for the protocol's WebSocket: a command frame that would write state is
    answered with a protocol error and not handed on."""

    async def guarded() -> Message:
        while True:
            message = await receive()
            if message["type"] != "websocket.receive":
                return message
            command = parse(message.get("text") or message.get("bytes"))
            refused = protocol_refusal(command)
            if refused is None:
                return message
            error = {
                "type": "error",
                "id": command.get("id"),
                "error": "permission_denied",
                "message": refused,
            }
            await send({"type": "websocket.send", "text": json.dumps(error)})

    return guarded


#: The app ``langgraph.json`` names in ``http.app``: no routes of its own, three middlewares
#: (who may reach a route beside the API first, then the state guard).
app = Starlette(
    middleware=[Middleware(RouteGuard), Middleware(StateGuard), Middleware(McpToolText)]
)
