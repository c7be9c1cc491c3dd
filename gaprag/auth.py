"""Who may call a served gaprag, and what each caller may touch (``langgraph.json``'s ``auth``).

LangGraph's server loads :data:`auth` (a ``langgraph_sdk.Auth``) for ``langgraph dev`` and a
deployed server alike. Two modes, chosen by the operator's environment when the server starts:

- **Clients** (``GAPRAG_CLIENT_TOKENS="alice=TOKEN,bob=TOKEN"`` and/or
  ``GAPRAG_CLIENT_TOKENS_FILE``, one ``NAME TOKEN`` a line): every request carries one
  client's token (``Authorization: Bearer TOKEN``, or ``x-api-key: TOKEN`` as LangGraph's SDK
  sends its ``api_key``); a request without a known token is refused with HTTP 401.
- **One machine** (no tokens configured): a caller on the loopback address is the one client
  :data:`LOCAL` (``langgraph dev`` on one's own machine, Studio included); a caller from
  another address is refused with HTTP 403, unless ``GAPRAG_OPEN_SERVER=1`` (an authenticating
  proxy in front of the server) serves every caller as :data:`LOCAL`.

In both, every thread, and so every run, belongs to the client that made it (its metadata's
:data:`OWNER`): no client reads, searches, joins, streams, cancels, updates or deletes
another's (LangGraph answers 404), and ``POST /runs/cancel`` touches only the caller's runs.
Clients use the operator's assistants (one per graph) and cannot create, edit or delete
assistants, unless the operator sets ``GAPRAG_CLIENT_ASSISTANTS=1``: then a client creates
assistants of its own, which only it sees and changes (on one machine, the one caller may).
The operator's assistants themselves stay read-only in every mode (:mod:`gaprag.server_app`). Crons and LangGraph's store are
refused, and so is any resource or action this module does not name.

A client keeps at most :data:`SERVED_CLIENT_MAX_INFLIGHT` runs in flight (pending or running)
unless the operator sets ``GAPRAG_CLIENT_MAX_INFLIGHT`` (``0``: no limit); one more is refused
with HTTP 429 (:class:`InFlight`). The one machine's caller is not limited.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
import logging
import os
import re
import time
import unicodedata
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from langgraph_sdk import Auth

from gaprag import config
from gaprag.errors import GapragError

#: The identity of every caller of a server with no client tokens configured.
LOCAL = "local"
#: The metadata key that names a thread's (and an assistant's) client.
OWNER = "owner"
#: The permission every caller authenticated by a token holds.
CLIENT = "gaprag:client"
#: Shortest token accepted: guessing one must be hopeless.
MIN_TOKEN_CHARS = 16
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")


def valid_name(name: str) -> bool:
    """Whether ``name`` can name a client: letters, digits and ``_.@-``, not :data:`LOCAL`."""
    return bool(_NAME.match(name)) and name != LOCAL


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


@dataclass(frozen=True)
class Clients:
    """The operator's clients: each token's SHA-256 and its client's name."""

    names: Mapping[bytes, str]

    def identify(self, token: str | None) -> str | None:
        """The client whose token ``token`` is, or None (compared in constant time)."""
        if not token:
            return None
        digest = _digest(token)
        found = None
        for known, name in self.names.items():
            if hmac.compare_digest(known, digest):
                found = name
        return found

    def __bool__(self) -> bool:
        return bool(self.names)


def parse_clients(text: str, where: str) -> dict[str, str]:
    """``{token: name}`` from ``NAME=TOKEN`` items separated by commas or new lines (``NAME
    TOKEN`` too; ``#`` starts a comment)."""
    out: dict[str, str] = {}
    hint = f"{where}: write one NAME=TOKEN (or NAME TOKEN) per client"
    for raw in re.split(r"[,\n]", text):
        item = raw.split("#", 1)[0].strip()
        if not item:
            continue
        name, _, token = item.replace("=", " ", 1).partition(" ")
        name, token = name.strip(), token.strip()
        if not valid_name(name):
            raise GapragError(
                f"{where}: {name!r} is not a client name",
                hint=f"{hint}; names are letters, digits and _.@- (not {LOCAL!r})",
            )
        if len(token) < MIN_TOKEN_CHARS or any(ch.isspace() for ch in token):
            raise GapragError(
                f"{where}: client {name}'s token is shorter than {MIN_TOKEN_CHARS} characters "
                "or has spaces",
                hint="make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'",
            )
        if token in out:
            raise GapragError(f"{where}: clients {out[token]} and {name} share a token", hint=hint)
        out[token] = name
    return out


def load_clients(env: Mapping[str, str] | None = None) -> Clients:
    """The clients ``GAPRAG_CLIENT_TOKENS`` and ``GAPRAG_CLIENT_TOKENS_FILE`` configure."""
    env = os.environ if env is None else env
    tokens = parse_clients(env.get("GAPRAG_CLIENT_TOKENS") or "", "GAPRAG_CLIENT_TOKENS")
    path = (env.get("GAPRAG_CLIENT_TOKENS_FILE") or "").strip()
    if path:
        try:
            text = Path(path).expanduser().read_text(encoding="utf-8")
        except OSError as err:
            raise GapragError(
                f"GAPRAG_CLIENT_TOKENS_FILE: cannot read {path} ({err.strerror})",
                hint="name a readable file of NAME TOKEN lines, or unset the variable",
            ) from None
        for token, name in parse_clients(text, "GAPRAG_CLIENT_TOKENS_FILE").items():
            if token in tokens:
                raise GapragError(
                    f"clients {tokens[token]} and {name} share a token",
                    hint="give every client its own token",
                )
            tokens[token] = name
    return Clients({_digest(t): n for t, n in tokens.items()})


@functools.cache
def clients() -> Clients:
    """The server's clients, read once (when the server loads this module)."""
    return load_clients()


def client_assistants() -> bool:
    """Whether clients may create assistants of their own (``GAPRAG_CLIENT_ASSISTANTS=1``)."""
    return config.flag("GAPRAG_CLIENT_ASSISTANTS")


def loopback(scope: Mapping[str, Any]) -> bool:
    """Whether the request came from this machine's loopback address."""
    client = scope.get("client")
    if not isinstance(client, list | tuple) or not client:
        return False
    try:
        return ipaddress.ip_address(str(client[0])).is_loopback
    except ValueError:
        return False


def token_of(authorization: str | None, headers: Mapping[bytes, bytes] | None) -> str | None:
    """The token a request carries: ``Authorization: Bearer TOKEN`` or ``x-api-key``."""
    scheme, _, value = (authorization or "").strip().partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    key = (headers or {}).get(b"x-api-key")
    return key.decode("latin-1").strip() or None if key else None


def identify(
    authorization: str | None, headers: Mapping[bytes, bytes] | None, scope: Mapping[str, Any]
) -> Auth.types.MinimalUserDict:
    """The caller of a request (see the module docstring), or ``Auth.exceptions.HTTPException``."""
    known = clients()
    if not known:
        if loopback(scope) or config.flag("GAPRAG_OPEN_SERVER"):
            return {"identity": LOCAL, "permissions": []}
        raise Auth.exceptions.HTTPException(
            status_code=403,
            detail="this server serves only its own machine: the operator configures client "
            "tokens (GAPRAG_CLIENT_TOKENS) to serve others",
        )
    name = known.identify(token_of(authorization, headers))
    if name is None:
        raise Auth.exceptions.HTTPException(
            status_code=401,
            detail="a client token is required: send Authorization: Bearer TOKEN",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return {"identity": name, "permissions": [CLIENT]}


auth = Auth()


@auth.authenticate
async def authenticate(
    authorization: str | None, headers: dict[bytes, bytes], scope: dict[str, Any]
) -> Auth.types.MinimalUserDict:
    return identify(authorization, headers, scope)


def refuse(detail: str) -> Auth.exceptions.HTTPException:
    return Auth.exceptions.HTTPException(status_code=403, detail=detail)


#: Runs (pending or running) one client may keep in flight unless the operator sets
#: ``GAPRAG_CLIENT_MAX_INFLIGHT``: a third of the ``--n-jobs-per-worker 32`` that
#: ``docs/studio.md`` recommends, so one client leaves most of the server's slots to others.
SERVED_CLIENT_MAX_INFLIGHT = 10
#: Seconds a run admitted under the limit counts before the server has stored it.
ADMIT_GRACE_S = 2.0
IN_FLIGHT = ("pending", "running")
#: A client's runs as the server holds them: ``{run_id: status}``.
RunsOf = Callable[[str], Awaitable[Mapping[str, str] | None]]
_log = logging.getLogger(__name__)


def load_max_inflight(env: Mapping[str, str] | None = None) -> int | None:
    """The in-flight limit ``GAPRAG_CLIENT_MAX_INFLIGHT`` sets (``0``: none), else
    :data:`SERVED_CLIENT_MAX_INFLIGHT`."""
    env = os.environ if env is None else env
    raw = (env.get("GAPRAG_CLIENT_MAX_INFLIGHT") or "").strip()
    if not raw:
        return SERVED_CLIENT_MAX_INFLIGHT
    if not raw.isdigit():
        raise GapragError(
            f"GAPRAG_CLIENT_MAX_INFLIGHT={raw!r} is not a whole number",
            hint="set it to the runs one client may keep in flight (0: no limit), or unset it",
        )
    return int(raw) or None


async def server_runs(identity: str) -> Mapping[str, str] | None:
    """``{run_id: status}`` of the runs ``identity`` owns, as LangGraph's in-memory runtime
    (``langgraph dev``) holds them; None under a runtime whose runs are not in this process."""
    from langgraph_runtime.database import connect  # only inside LangGraph's server

    async with connect() as conn:
        store = getattr(conn, "store", None)
        runs = list(store["runs"]) if store is not None else None
    if runs is None:
        return None
    return {
        str(run["run_id"]): str(run["status"])
        for run in runs
        if (run.get("metadata") or {}).get(OWNER) == identity
    }


class InFlight:
    """Each client's runs in flight, refused over a limit with HTTP 429.

    A client's runs in flight are the runs the server holds as pending or running with the
    client as owner, and the runs admitted in the last :data:`ADMIT_GRACE_S` seconds that the
    server has not stored yet (so concurrent requests cannot slip past the count together).
    ``limit`` None: no limit; ``runs_of`` reads the server's runs (:func:`server_runs`)."""

    def __init__(
        self,
        limit: Callable[[], int | None],
        runs_of: RunsOf = server_runs,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.runs_of = runs_of
        self.clock = clock
        self._admitted: dict[str, dict[str, float]] = {}
        self._warned = False

    async def refusal(self, identity: str) -> str | None:
        """Why a new run of ``identity`` would be refused now (None: it may start)."""
        counted = await self._count(identity)
        return None if counted is None else counted[1]

    async def admit(self, identity: str, run_id: Any) -> None:
        """Count run ``run_id`` of ``identity`` in, or raise HTTP 429 when the client already
        has its limit in flight."""
        counted = await self._count(identity)
        if counted is None:
            return
        pending, refused = counted
        if refused is not None:
            raise Auth.exceptions.HTTPException(
                status_code=429, detail=refused, headers={"Retry-After": "1"}
            )
        pending[str(run_id or uuid.uuid4())] = self.clock()

    async def _count(self, identity: str) -> tuple[dict[str, float], str | None] | None:
        """The client's runs admitted but not yet stored, and why one more is refused (None:
        it is not); None when no limit applies."""
        limit = self.limit()
        if limit is None:
            return None
        runs = await self.runs_of(identity)
        if runs is None:
            if not self._warned:
                self._warned = True
                _log.warning("GAPRAG_CLIENT_MAX_INFLIGHT is not enforced by this runtime")
            return None
        now = self.clock()
        pending = {
            r: t
            for r, t in self._admitted.get(identity, {}).items()
            if r not in runs and now - t < ADMIT_GRACE_S
        }
        self._admitted[identity] = pending
        count = sum(status in IN_FLIGHT for status in runs.values()) + len(pending)
        if count < limit:
            return pending, None
        runs_text = "run" if count == 1 else "runs"
        return pending, (
            f"client {identity} has {count} {runs_text} in flight, the most this server allows "
            f"(GAPRAG_CLIENT_MAX_INFLIGHT={limit}): wait for one to finish or cancel one"
        )


@functools.cache
def max_inflight() -> int | None:
    """The server's in-flight limit per client, read once."""
    return load_max_inflight()


#: The server's count of each client's runs in flight.
in_flight = InFlight(max_inflight)


def _own(value: Any, identity: str) -> None:
    """Write the caller as the owner into a request's metadata (in place: the server keeps
    its own reference to that dict)."""
    if not isinstance(value, dict):
        return
    metadata = value.get("metadata")
    if isinstance(metadata, dict):
        metadata[OWNER] = identity
    else:
        value["metadata"] = {OWNER: identity}


@auth.on.threads
async def own_threads(ctx: Auth.types.AuthContext, value: Any) -> Auth.types.FilterType:
    """Threads and their runs: made as the caller's, seen and touched only by the caller; a
    client's new run counts against its in-flight limit (:data:`in_flight`)."""
    if ctx.action in ("create", "create_run", "update"):
        _own(value, ctx.user.identity)
    if ctx.action == "create_run" and CLIENT in ctx.permissions:
        await in_flight.admit(
            ctx.user.identity, value.get("run_id") if isinstance(value, dict) else None
        )
    return {OWNER: ctx.user.identity}


#: Unicode categories a name may not hold: controls, format characters (zero-width,
#: bidirectional overrides and isolates), private, unassigned and surrogate code points,
#: line and paragraph separators.
HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cn", "Cs", "Zl", "Zp"})


def hidden_characters(name: str) -> list[str]:
    """The characters of ``name`` a reader cannot see or that reorder what they see, as
    ``U+XXXX`` names."""
    return [f"U+{ord(ch):04X}" for ch in name if unicodedata.category(ch) in HIDDEN_CATEGORIES]


_NOT_IN_TOOL_NAME = re.compile(r"[^a-zA-Z0-9_\-.]")


def mcp_tool_name(name: str) -> str:
    """The MCP tool name LangGraph's server gives an assistant named ``name``: whitespace runs
    become ``_``, characters an MCP tool name cannot hold are dropped, 128 characters at most
    (as ``langgraph_api``'s ``normalize_name``; a test holds the two equal)."""
    return _NOT_IN_TOOL_NAME.sub("", re.sub(r"\s+", "_", name.strip()))[:128]


def tool_names(name: str) -> frozenset[str]:
    """The names ``name`` can pass for: its MCP tool name (:func:`mcp_tool_name`) as given and
    after Unicode compatibility normalisation and case folding (NFKC, casefold). Two
    assistants whose sets meet read as the same tool."""
    folded = unicodedata.normalize("NFKC", name).casefold()
    return frozenset(n for n in (mcp_tool_name(name), mcp_tool_name(folded)) if n)


def name_refusal(name: str, taken: Iterable[str], whose: str) -> str | None:
    """Why ``name`` cannot name an assistant: it holds hidden characters, or it passes for
    one of ``taken`` (``whose``: what those are, for the message). None: it may."""
    if hidden := hidden_characters(name):
        return (
            f"the assistant name holds invisible or control characters ({', '.join(hidden[:5])}):"
            " choose a name of visible characters"
        )
    mine = tool_names(name)
    clash = next((t for t in taken if mine & tool_names(t)), None)
    if clash is not None:
        return (
            f"the assistant name {name.strip()!r} reads as {whose} {clash!r}: choose another name"
        )
    return None


async def server_assistant_names(identity: str, skip: str | None) -> list[str] | None:
    """The names of the assistants ``identity`` sees (the operator's and its own) but
    ``skip``, as LangGraph's in-memory runtime (``langgraph dev``) holds them; None under a
    runtime whose assistants are not in this process."""
    from langgraph_runtime.database import connect  # only inside LangGraph's server

    async with connect() as conn:
        store = getattr(conn, "store", None)
        assistants = list(store["assistants"]) if store is not None else None
    if assistants is None:
        return None
    seen = []
    for assistant in assistants:
        metadata = assistant.get("metadata") or {}
        theirs = metadata.get("created_by") == "system" or metadata.get(OWNER) == identity
        if theirs and str(assistant.get("assistant_id")) != str(skip):
            seen.append(str(assistant.get("name") or ""))
    return seen


ASSISTANTS_READ_ONLY = (
    "the operator's assistants are read-only and clients create none on this server "
    "(the operator allows clients' own assistants with GAPRAG_CLIENT_ASSISTANTS=1)"
)


@auth.on.assistants
async def operator_assistants(
    ctx: Auth.types.AuthContext, value: Any
) -> Auth.types.FilterType | None:
    """Every caller reads the operator's assistants; a client's own assistants only when the
    operator allows them, seen and changed by that client alone. On one machine (no tokens),
    the one caller makes and changes its own."""
    mine: Auth.types.FilterType = {OWNER: ctx.user.identity}
    shared = not clients() or client_assistants()
    if ctx.action in ("read", "search"):
        if not clients() or not client_assistants():
            return None  # the operator's assistants, or the one machine's
        return cast("Auth.types.FilterType", {"$or": [{"created_by": "system"}, mine]})
    if not shared:
        raise refuse(ASSISTANTS_READ_ONLY)
    metadata = value.get("metadata") if isinstance(value, dict) else None
    if isinstance(metadata, dict) and "created_by" in metadata:
        raise refuse("an assistant's metadata.created_by is the server's to set")
    if ctx.action in ("create", "update"):
        _own(value, ctx.user.identity)
        await _check_name(value, ctx.user.identity)
    return mine


async def _check_name(value: Any, identity: str) -> None:
    """Refuse a new or changed assistant name that passes for another assistant's the caller
    sees (its MCP tool would clash with it)."""
    name = value.get("name") if isinstance(value, dict) else None
    if not isinstance(name, str):
        return
    taken = await server_assistant_names(identity, skip=value.get("assistant_id"))
    if taken is not None and (refused := name_refusal(name, taken, "the assistant")):
        raise refuse(refused)


@auth.on.crons
async def no_crons(ctx: Auth.types.AuthContext, value: Any) -> bool:
    raise refuse("crons are off on this server: every run is started by its caller")


@auth.on.store
async def no_store(ctx: Auth.types.AuthContext, value: Any) -> bool:
    raise refuse("the key-value store is off on this server")


@auth.on
async def nothing_else(ctx: Auth.types.AuthContext, value: Any) -> bool:
    """Any resource or action not named above."""
    raise refuse(f"{ctx.resource} {ctx.action} is refused on this server")
