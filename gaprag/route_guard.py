"""Who reaches the routes LangGraph's server keeps beside its API (``langgraph.json``'s
``http.app`` puts :class:`RouteGuard` first).

LangGraph's server checks a caller (:mod:`gaprag.auth`) on its API alone: threads, runs,
assistants, MCP and the rest. Beside the API it answers, unchecked, its health checks
(``/ok``, ``/``), its description (``/info``, ``/docs``, ``/openapi.json``), its counters
(``/metrics``) and, under ``langgraph dev``, the in-memory runtime's own routes: ``/internal/*``
(one reads any thread, one wipes every thread) and ``/deploy`` (starts a deployment process).
:class:`RouteGuard` checks each of those requests as the API's are checked:

- a health check (``/ok``, ``/``) answers every caller;
- ``/internal/*`` and ``/deploy*`` are the server machine's own: with client tokens they answer
  no caller (a client is refused with 403, a caller without a token with 401); on one machine
  (no tokens) only a caller on the loopback address, and none when ``GAPRAG_OPEN_SERVER=1``
  (a proxy's callers all arrive as one);
- ``/metrics`` counts every client's requests per route: with client tokens it answers only the
  clients the operator names in ``GAPRAG_METRICS_CLIENTS`` (none by default);
- every other route outside the API (``/info``, ``/docs``, ``/openapi.json``, and any route a
  later LangGraph adds there) answers the callers the API answers: a client with its token, or
  the one machine's caller.

A refusal is LangGraph's own shape: HTTP 401 or 403 with a one-line JSON ``detail``.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from langgraph_sdk import Auth
from starlette.responses import JSONResponse

from gaprag import auth, config
from gaprag.errors import GapragError

Message = MutableMapping[str, Any]
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Health checks: answered to every caller (a load balancer carries no token).
HEALTH = re.compile(r"/ok/?|/?")
#: The in-memory runtime's own routes (``langgraph dev``): the server machine's alone.
MACHINE_ONLY = re.compile(r"/(?:internal|deploy)(?:/.*)?")
METRICS = re.compile(r"/metrics/?")

NOT_FOR_CLIENTS = (
    "/internal/* and /deploy are the server machine's own routes (the in-memory runtime's): "
    "they are not served to clients"
)
NOT_FOR_PROXIED = (
    "/internal/* and /deploy are the server machine's own routes: they are not served "
    "behind GAPRAG_OPEN_SERVER=1"
)
METRICS_CLIENTS = (
    "/metrics counts every client's requests: the operator names the clients that may read "
    "it in GAPRAG_METRICS_CLIENTS"
)


def metrics_clients(env: Mapping[str, str] | None = None) -> frozenset[str]:
    """The clients ``GAPRAG_METRICS_CLIENTS`` names (``alice,ops``): they may read
    ``/metrics`` on a server with client tokens."""
    env = os.environ if env is None else env
    raw = env.get("GAPRAG_METRICS_CLIENTS") or ""
    names = {name.strip() for name in raw.split(",") if name.strip()}
    bad = sorted(n for n in names if not auth.valid_name(n))
    if bad:
        raise GapragError(
            f"GAPRAG_METRICS_CLIENTS: {bad[0]!r} is not a client name",
            hint="name clients of GAPRAG_CLIENT_TOKENS, separated by commas",
        )
    return frozenset(names)


@functools.cache
def allowed_metrics_clients() -> frozenset[str]:
    """The server's :func:`metrics_clients`, read once."""
    return metrics_clients()


def checked_by_langgraph(scope: Scope) -> bool:
    """Whether LangGraph's authentication already ran for this request (its API's routes:
    the server sets the caller as ``scope["user"]`` before gaprag's middleware runs)."""
    return scope.get("user") is not None and "auth" in scope


def route_of(scope: Scope) -> str:
    """The request's path under the server's mount prefix (``root_path``), if any."""
    path, root = str(scope.get("path", "")), str(scope.get("root_path", ""))
    return path[len(root) :] if root and path.startswith(root) else path


def headers(scope: Scope) -> dict[bytes, bytes]:
    """A request's headers by lower-case name."""
    return {bytes(k).lower(): bytes(v) for k, v in scope.get("headers", ())}


def header(scope: Scope, name: bytes) -> str | None:
    """One header of a request (``name`` in lower case), if it was sent."""
    value = headers(scope).get(name)
    return None if value is None else value.decode("latin-1")


def refusal(scope: Scope) -> tuple[int, str, dict[str, str]] | None:
    """Why a request to a route outside LangGraph's API is refused (status, detail, headers),
    or None when it passes (see the module docstring)."""
    path = route_of(scope)
    machine_only = any(MACHINE_ONLY.fullmatch(p) for p in (path, str(scope.get("path", ""))))
    if not machine_only and (HEALTH.fullmatch(path) or checked_by_langgraph(scope)):
        return None
    sent = headers(scope)
    authorization = sent.get(b"authorization", b"").decode("latin-1") or None
    try:
        caller = auth.identify(authorization, sent, scope)
    except Auth.exceptions.HTTPException as err:
        return err.status_code, str(err.detail), dict(err.headers or {})
    clients = bool(auth.clients())
    if machine_only:
        if clients:
            return 403, NOT_FOR_CLIENTS, {}
        if config.flag("GAPRAG_OPEN_SERVER"):
            return 403, NOT_FOR_PROXIED, {}
        return None  # identify() let only a loopback caller through
    if clients and METRICS.fullmatch(path) and caller["identity"] not in allowed_metrics_clients():
        return 403, METRICS_CLIENTS, {}
    return None


class RouteGuard:
    """ASGI middleware: the routes beside LangGraph's API answer only the callers the module
    docstring names."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        refused = refusal(scope)
        if refused is None:
            await self.app(scope, receive, send)
            return
        status, detail, headers = refused
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": detail[:120]})
            return
        await JSONResponse({"detail": detail}, status_code=status, headers=headers)(
            scope, receive, send
        )
