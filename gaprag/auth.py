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
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from langgraph_sdk import Auth

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
_TRUE = ("1", "true", "yes", "on")


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
        if not _NAME.match(name) or name == LOCAL:
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


def _flag(name: str) -> bool:
    return (os.environ.get(name) or "").strip().lower() in _TRUE


@functools.cache
def clients() -> Clients:
    """The server's clients, read once (when the server loads this module)."""
    return load_clients()


def client_assistants() -> bool:
    """Whether clients may create assistants of their own (``GAPRAG_CLIENT_ASSISTANTS=1``)."""
    return _flag("GAPRAG_CLIENT_ASSISTANTS")


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
        if _flag("GAPRAG_OPEN_SERVER") or loopback(scope):
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
    """Threads and their runs: made as the caller's, seen and touched only by the caller."""
    if ctx.action in ("create", "create_run", "update"):
        _own(value, ctx.user.identity)
    return {OWNER: ctx.user.identity}


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
    return mine


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
