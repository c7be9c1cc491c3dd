"""What the operator of a graph decides, and the one check of a run's settings against it.

Whoever builds a graph (``build_graph``, the ``gaprag`` command, ``gaprag eval``, the
environment of a served graph) is its *operator*. Whoever runs it (``invoke(...,
context={...})``, Studio's form, a LangGraph server's runs, assistants and MCP calls) sets only
*run settings*. The settings that name an endpoint, a model, a file or a spend switch are the
operator's: their fields are made with ``describe(..., operator=KIND)`` and a run may not
change them unless the operator allowed it (:class:`OperatorPolicy`):

- ``endpoint`` (``base_url``, ``keywords_base_url``, ``validator_base_url``): a URL under one
  of ``allowed_endpoints`` (``GAPRAG_ALLOWED_ENDPOINTS``), compared parsed: the same scheme,
  host and port, and the prefix's path on a segment boundary; a URL with user information is
  never allowed. The operator's API key is never sent to such an endpoint: it gets the key the
  operator tied to that prefix, or none.
- ``model`` (``model``, ``keywords_model``, ``validator_model``): only together with an allowed
  run-time endpoint for it.
- ``path`` (``store``, ``feedback_store``, ``qa_store``, ``rf_weights``, ``reranker``): inside
  ``store_root`` (``GAPRAG_STORE_ROOT``) after resolving ``..`` and symbolic links, and every
  symbolic link inside a named folder (a store's files) leading inside it too; without a root,
  never. A run-time ``feedback_store`` or ``qa_store`` opens only an existing pair store.
- ``switch`` (``calibration``): never.
- a store *address* (``store`` naming ``milvus://HOST:PORT/COLLECTION``): only one listed in
  ``allowed_stores`` (``GAPRAG_ALLOWED_STORES``, comma-separated ``milvus://HOST:PORT`` or
  ``milvus://HOST:PORT/COLLECTION``), compared parsed: the same host and port, and the
  collection when the entry names one. The store root never admits one.

A run-time value equal to the operator's (the build-time value, or the ``GAPRAG_<NAME>``
variable when the build left it empty) is no change. ``dev_allow_runtime_settings``
(``GAPRAG_DEV_ALLOW_RUNTIME_SETTINGS=1``) allows every change, for a developer's own machine.

Spend: ``max_bounds`` (``GAPRAG_MAX_BOUNDS="max_iterations=3,max_steps=5"``) caps numeric
settings (a run asking for more is refused; a default above the cap is lowered to it);
``deadline_s`` (``GAPRAG_RUN_DEADLINE``) and ``token_budget`` (``GAPRAG_RUN_TOKEN_BUDGET``) end
a run early with ``stop_reason`` ``deadline`` or ``token_budget``: the LLM layer keeps them for
the run and checks them before every call (:mod:`gaprag.llm.spend`); a served graph gets
:data:`SERVED_DEADLINE_S` and :data:`SERVED_TOKEN_BUDGET` unless the operator sets others;
``feedback_writes`` (``GAPRAG_FEEDBACK_WRITES``) lets resumed expert reviews write to RAG-EF's
shared feedback store.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import httpx

from gaprag import config
from gaprag.errors import (
    DependencyError,
    EndpointError,
    GapragError,
    InputError,
    ServerError,
    StoreError,
    hide_urls,
    one_line,
)

OperatorKind = Literal["endpoint", "model", "path", "switch"]
T = TypeVar("T")

#: The stop reasons of a run the operator's limits ended.
LIMIT_REASONS = ("deadline", "token_budget")
#: A served run's token budget unless the operator sets ``GAPRAG_RUN_TOKEN_BUDGET``: 22x the
#: most one question took at the shipped settings in the published evaluations (13,460
#: tokens, MIGRES), and nine calls at a full 32k context (a paper-faithful IRCoT).
SERVED_TOKEN_BUDGET = 300_000
#: A served run's deadline (seconds of step time) unless the operator sets
#: ``GAPRAG_RUN_DEADLINE``: the slowest question of the published evaluations took 2,313 s
#: (the 1.5B model on a shared 2-core CPU).
SERVED_DEADLINE_S = 3600.0
#: The server's log: a served run's library errors, with their own text and traceback.
_log = logging.getLogger("gaprag")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _number(name: str, kind: type[T]) -> T | None:
    raw = (os.environ.get(name) or "").strip()
    if not raw:
        return None
    try:
        value = kind(raw)  # type: ignore[call-arg]
    except ValueError:
        raise GapragError(
            f"{name}={raw!r} is not a number", hint=f"set {name} to a positive number or unset it"
        ) from None
    if value <= 0:  # type: ignore[operator]
        raise GapragError(f"{name} must be positive (got {raw})", hint=f"unset {name} for none")
    return value


@dataclass(frozen=True)
class Location:
    """Where a URL sends requests, as the HTTP client parses it: scheme, host, port (the
    scheme's default when none is given) and path (``..`` resolved, no trailing ``/``)."""

    scheme: str
    host: str
    port: int
    path: str

    def under(self, prefix: Location) -> bool:
        """Whether this location is ``prefix`` or below it: the same scheme, host and port,
        and ``prefix``'s path followed by nothing or by ``/`` (``/v1`` holds ``/v1/chat``,
        not ``/v10``)."""
        same = (self.scheme, self.host, self.port) == (prefix.scheme, prefix.host, prefix.port)
        return same and (
            not prefix.path or self.path == prefix.path or self.path.startswith(prefix.path + "/")
        )


_DEFAULT_PORTS = {"http": 80, "https": 443}
#: characters no endpoint URL needs and parsers disagree on
_ODD = re.compile(r"[\x00-\x20\x7f\\]|%(2f|2e|5c|00)", re.IGNORECASE)


def location(url: str) -> Location | None:
    """The :class:`Location` of an ``http(s)`` URL; None for anything else: another scheme,
    no host, a bad port, user information (``http://a:1@b/``: the request goes to ``b``),
    whitespace, control characters, backslashes or encoded ``/``, ``.``, ``\\``."""
    if not isinstance(url, str) or _ODD.search(url):
        return None
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError, TypeError):
        return None
    port = parsed.port or _DEFAULT_PORTS.get(parsed.scheme)
    if parsed.scheme not in _DEFAULT_PORTS or not parsed.host or parsed.userinfo or port is None:
        return None
    if not 0 < port < 65536 or "@" in url.split("//", 1)[-1].split("/", 1)[0]:
        return None
    return Location(parsed.scheme, parsed.host.lower(), port, parsed.path.rstrip("/"))


MILVUS_SCHEME = "milvus"
_COLLECTION = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")


@dataclass(frozen=True)
class StoreAddress:
    """A store on a Milvus server: ``milvus://HOST:PORT/COLLECTION`` (``collection`` empty in
    an allow-list entry that admits every collection of the server)."""

    host: str
    port: int
    collection: str

    @property
    def uri(self) -> str:
        """The server's address as pymilvus takes it."""
        return f"http://{self.host}:{self.port}"

    def __str__(self) -> str:
        return f"{MILVUS_SCHEME}://{self.host}:{self.port}/{self.collection}".rstrip("/")

    def under(self, entry: StoreAddress) -> bool:
        """Whether ``entry`` (an allow-list entry) admits this address."""
        same = (self.host, self.port) == (entry.host, entry.port)
        return same and entry.collection in ("", self.collection)


def is_store_address(value: object) -> bool:
    """Whether ``value`` names a store on a server (``milvus://...``) rather than a path."""
    return isinstance(value, str) and value.lower().startswith(f"{MILVUS_SCHEME}://")


def store_address(text: str, *, collection: bool = True) -> StoreAddress:
    """``milvus://HOST:PORT/COLLECTION`` parsed (``collection=False``: the collection may be
    left out), or an InputError saying what is wrong with it."""
    hint = "write it as milvus://HOST:PORT/COLLECTION, e.g. milvus://127.0.0.1:19530/docs"
    if not is_store_address(text) or _ODD.search(text):
        raise InputError(
            f"{_shown(text)} is not a milvus://HOST:PORT/COLLECTION address", hint=hint
        )
    rest = text[len(MILVUS_SCHEME) + 3 :]
    netloc, _, path = rest.partition("/")
    host, sep, port_text = netloc.rpartition(":")
    name = path.rstrip("/")
    if not sep or not host or "@" in netloc or not port_text.isdigit():
        raise InputError(f"{_shown(text)}: give the server as HOST:PORT", hint=hint)
    port = int(port_text)
    if not 0 < port < 65536:
        raise InputError(f"{_shown(text)}: port {port} is out of range", hint=hint)
    if (name or collection) and not _COLLECTION.match(name):
        raise InputError(
            f"{_shown(text)}: the collection name must be letters, digits and _ "
            "(starting with a letter or _)",
            hint=hint,
        )
    return StoreAddress(host.lower(), port, name)


def parse_store_addresses(text: str) -> tuple[StoreAddress, ...]:
    """``"milvus://10.0.0.5:19530,milvus://db:19530/docs"`` -> the addresses runs may name."""
    out = []
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        try:
            out.append(store_address(item, collection=False))
        except InputError as err:
            raise GapragError(
                f"GAPRAG_ALLOWED_STORES: {err.message}",
                hint="list milvus://HOST:PORT or milvus://HOST:PORT/COLLECTION, comma-separated",
            ) from None
    return tuple(out)


@dataclass(frozen=True)
class AllowedEndpoint:
    """A URL prefix runs may name as an endpoint, and the variable holding its key (if any).
    URLs are compared parsed (:func:`location`), never as text."""

    prefix: str
    key_env: str | None = None

    def holds(self, url: str) -> bool:
        """Whether ``url`` is this prefix or below it (:meth:`Location.under`)."""
        mine, theirs = location(self.prefix), location(url)
        return mine is not None and theirs is not None and theirs.under(mine)


def parse_endpoints(text: str) -> tuple[AllowedEndpoint, ...]:
    """``"https://a/v1=A_KEY,http://10.0.0.5:8000/"`` -> prefixes with their key variables."""
    out = []
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        prefix, sep, env = item.rpartition("=")
        if sep and _ENV_NAME.match(env) and "://" in prefix:
            out.append(AllowedEndpoint(prefix, env))
        else:
            out.append(AllowedEndpoint(item))
    for entry in out:
        if location(entry.prefix) is None:
            raise GapragError(
                f"GAPRAG_ALLOWED_ENDPOINTS: {entry.prefix!r} is not an http(s) URL prefix",
                hint="list prefixes like https://api.example.com/v1 (optionally =KEY_VARIABLE), "
                "with a host, no user name or password",
            )
    return tuple(out)


def parse_bounds(text: str) -> dict[str, int | float]:
    """``"max_iterations=3,gate_threshold=0.5"`` -> ``{"max_iterations": 3,
    "gate_threshold": 0.5}``: a cap for any numeric setting (whole numbers stay ints)."""
    out: dict[str, int | float] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        name, _, raw = item.partition("=")
        value: int | float | None
        try:
            value = int(raw)
        except ValueError:
            try:
                value = float(raw)
            except ValueError:
                value = None
        if not name.strip() or value is None or not math.isfinite(value):
            raise GapragError(
                f"GAPRAG_MAX_BOUNDS: {item!r} is not NAME=NUMBER",
                hint='e.g. GAPRAG_MAX_BOUNDS="max_iterations=3,max_steps=5"',
            )
        out[name.strip()] = value
    return out


@dataclass(frozen=True)
class OperatorPolicy:
    """What runs may change and spend; read once from the environment (:meth:`from_env`) when
    a graph is built, or given to ``build_graph(..., policy=OperatorPolicy(...))``."""

    allowed_endpoints: tuple[AllowedEndpoint, ...] = ()
    """URL prefixes a run may name as an endpoint (``GAPRAG_ALLOWED_ENDPOINTS``)."""
    store_root: Path | None = None
    """The directory under which a run may name stores and model files (``GAPRAG_STORE_ROOT``)."""
    allowed_stores: tuple[StoreAddress, ...] = ()
    """Store addresses a run may name as its ``store`` (``GAPRAG_ALLOWED_STORES``)."""
    dev_allow_runtime_settings: bool = False
    """A developer's own machine: runs may change every operator setting."""
    max_bounds: Mapping[str, int | float] = field(default_factory=dict)
    """Caps on numeric settings by name (``GAPRAG_MAX_BOUNDS``)."""
    deadline_s: float | None = None
    """Seconds of node time a run may spend before it answers with what it has."""
    token_budget: int | None = None
    """LLM tokens (prompt + completion) a run may spend before it answers with what it has."""
    feedback_writes: bool = True
    """Resumed expert reviews may add pairs to RAG-EF's feedback store."""
    hide_paths: bool = False
    """Callers never see the server's absolute paths: not in the errors of a run (a path
    under the store root shows as ``<store root>/...``, under ``GAPRAG_HOME`` as
    ``<GAPRAG_HOME>/...``, any other as ``<server path>``) nor as the default of a path
    setting in the settings' JSON schema (:data:`HIDDEN_PATH`). On in the served graphs."""

    @classmethod
    def from_env(cls, *, served: bool = False) -> OperatorPolicy:
        """The policy the environment sets. ``served``: for LangGraph's server
        (:mod:`gaprag.studio`), where feedback writes are off unless
        ``GAPRAG_FEEDBACK_WRITES=1`` and every run has a deadline and a token budget
        (:data:`SERVED_DEADLINE_S`, :data:`SERVED_TOKEN_BUDGET` unless set)."""
        root = (os.environ.get("GAPRAG_STORE_ROOT") or "").strip()
        return cls(
            allowed_endpoints=parse_endpoints(os.environ.get("GAPRAG_ALLOWED_ENDPOINTS") or ""),
            store_root=Path(root).expanduser().resolve() if root else None,
            allowed_stores=parse_store_addresses(os.environ.get("GAPRAG_ALLOWED_STORES") or ""),
            dev_allow_runtime_settings=config.flag("GAPRAG_DEV_ALLOW_RUNTIME_SETTINGS"),
            max_bounds=parse_bounds(os.environ.get("GAPRAG_MAX_BOUNDS") or ""),
            deadline_s=_number("GAPRAG_RUN_DEADLINE", float)
            or (SERVED_DEADLINE_S if served else None),
            token_budget=_number("GAPRAG_RUN_TOKEN_BUDGET", int)
            or (SERVED_TOKEN_BUDGET if served else None),
            feedback_writes=config.flag("GAPRAG_FEEDBACK_WRITES", not served),
            hide_paths=served,
        )

    def endpoint(self, url: str) -> AllowedEndpoint | None:
        """The allow-list entry ``url`` falls under, if any."""
        return next((e for e in self.allowed_endpoints if e.holds(url)), None)

    def store_allowed(self, value: str) -> bool:
        """Whether a run may name the store address ``value`` (:data:`allowed_stores`)."""
        try:
            address = store_address(value)
        except InputError:
            return False
        return any(address.under(entry) for entry in self.allowed_stores)

    def key_for(self, url: str) -> str:
        """The key sent to a run-time endpoint: the one tied to its prefix, else none (a
        placeholder)."""
        entry = self.endpoint(url)
        key = os.environ.get(entry.key_env) if entry and entry.key_env else None
        return key or config.PLACEHOLDER_API_KEY

    def inside_root(self, method: str, name: str, value: str) -> Path:
        """``value`` resolved under the store root (relative to it, ``..`` and symbolic links
        followed), with every symbolic link inside it (a store's files) leading inside the
        root too; an InputError when it leaves the root or is no path. Reads the file system:
        nodes call it through :func:`gaprag.context.aresolve_context`, off the event loop."""
        assert self.store_root is not None
        _check_path_text(method, name, value)
        shown = _shown(value)
        root = self.store_root.resolve()
        path = (root / Path(value).expanduser()).resolve()
        escaped = path if not path.is_relative_to(root) else _link_out_of(path, root)
        if escaped is not None:
            where = "" if escaped == path else f" (its {escaped.relative_to(path)} leads out)"
            raise InputError(
                f"{method}: {name}={shown} is outside the store root{where}",
                hint="name a path under the store root (GAPRAG_STORE_ROOT), with no symbolic "
                "link leading out of it",
            )
        return path

    def hide(self, text: str) -> str:
        """``text`` with every absolute path shown as :attr:`hide_paths` says (when on)."""
        if not self.hide_paths:
            return text
        bases = [(b, label) for b, label in ((self.store_root, "<store root>"),
                 (config.home_path(), "<GAPRAG_HOME>")) if b is not None]  # fmt: skip

        def shown(match: re.Match[str]) -> str:
            path = Path(match.group(0))
            for base, label in bases:
                if path.is_relative_to(base):
                    rest = path.relative_to(base).as_posix()
                    return label if rest == "." else f"{label}/{rest}"
            # a server path starts in a folder of /; a URL's path (/v1/chat) does not
            return "<server path>" if path.parts[1] in _top_folders() else match.group(0)

        return _ABSOLUTE_PATH.sub(shown, text)

    def hidden(self, err: Exception) -> Exception | None:
        """What a served run's caller is told instead of ``err`` (None: ``err`` itself), one
        line that LangGraph's server passes on (a ``ValueError`` or ``RuntimeError``), with no
        server path, URL or key (:meth:`told`); the server's log keeps ``err``'s whole text.
        A caller's bad input (:class:`InputError`) keeps its class and hint; the endpoint's
        and the store's failures (:class:`EndpointError`, :class:`StoreError`) say what
        failed and to try again or tell the operator; any other gaprag error is a
        :class:`ServerError`; any other error is a library's, whose text stays in the
        server's log: the caller gets a :class:`DependencyError` naming the library and the
        error's class. Off (None) unless :attr:`hide_paths` (the served graphs)."""
        if not self.hide_paths:
            return None
        if isinstance(err, InputError):
            message, hint = self.told(err.message), self.told(err.hint)
            if (message, hint) == (err.message, err.hint):
                return None
            return InputError(message, hint=hint)
        if isinstance(err, GapragError):
            kind, what = next(((k, w) for k, w in _SERVED_KINDS if isinstance(err, k)), _OTHER)
            told: GapragError = kind(f"{what}: {self.told(err.message)}", hint=_TELL_OPERATOR)
        else:
            told = DependencyError.of(err)
        _log.error("%s: %s: %s", told.message, type(err).__name__, err, exc_info=err)
        return told

    def told(self, text: str) -> str:
        """``text`` as a served caller reads it: one line, no server path (:meth:`hide`),
        URL or key."""
        return one_line(hide_urls(self.hide(text)))


#: What a served caller is told failed, by the kind of gaprag error, and what to do.
_SERVED_KINDS: tuple[tuple[type[GapragError], str], ...] = (
    (EndpointError, "the model endpoint is not answering as it should"),
    (StoreError, "the store cannot be opened or read"),
)
_OTHER: tuple[type[GapragError], str] = (ServerError, "the server could not run this")
_TELL_OPERATOR = (
    "try again in a while; if it keeps failing, tell the server's operator (the server's log "
    "has the full text)"
)
_MAX_PATH = 1024
#: an absolute path in a message: a ``/`` that starts a word (not a URL's or a relative
#: path's), up to whitespace, a quote, a bracket or a separator
_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/~-])/[^\s'\"()<>,;]*[^\s'\"()<>,;.:]")
#: the default a path setting shows in a served graph's settings schema: a run that gives it
#: back gets the operator's value
HIDDEN_PATH = "<the operator's>"
#: entries of a directory looked at for symbolic links that lead out of the store root
_MAX_ENTRIES = 100_000


@functools.cache
def _top_folders() -> frozenset[str]:
    """The names in the file system's root folder."""
    try:
        return frozenset(os.listdir("/"))
    except OSError:
        return frozenset()


def _shown(value: Any) -> str:
    """A caller's value in an error line: its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_path_text(method: str, name: str, value: str) -> None:
    """An InputError when ``value`` cannot be a path: control characters, or too long."""
    if len(value) > _MAX_PATH or any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise InputError(
            f"{method}: {name}={_shown(value)} is not a path (control characters or too long)",
            hint="name a path under the store root (GAPRAG_STORE_ROOT)",
        )


def _link_out_of(path: Path, root: Path) -> Path | None:
    """The first entry under directory ``path`` (``path`` resolved, inside ``root``) that is
    a symbolic link resolving outside ``root``, followed through linked folders inside it;
    None when there is none (or ``path`` is no directory); an InputError past
    :data:`_MAX_ENTRIES` entries."""
    if not path.is_dir():
        return None
    seen: set[Path] = set()
    pending = [(path, path)]  # (as reached from path, resolved)
    count = 0
    while pending:
        shown, real = pending.pop()
        if real in seen:
            continue
        seen.add(real)
        try:
            entries = list(os.scandir(real))
        except OSError:
            continue
        for entry in entries:
            count += 1
            if count > _MAX_ENTRIES:
                raise InputError(
                    f"{path.name} holds more than {_MAX_ENTRIES:,} files to check",
                    hint="name a store or a file, not a folder of many",
                )
            target = Path(entry.path)
            if entry.is_symlink():
                target = target.resolve()
                if not target.is_relative_to(root):
                    return shown / entry.name
            if target.is_dir():
                pending.append((shown / entry.name, target))
    return None


def touches_files(ctx: Any) -> bool:
    """Whether admitting ``ctx`` reads the file system: it names a path the operator did not
    set (resolved under the store root, symbolic links read)."""
    cls = type(ctx)
    return any(
        kind == "path"
        and getattr(ctx, name)
        and not is_store_address(getattr(ctx, name))
        and getattr(ctx, name) not in operator_values(cls, name)
        for name, kind in operator_fields(cls).items()
    )


def chosen_by_run(ctx: Any, name: str) -> bool:
    """Whether setting ``name`` of an admitted ``ctx`` holds a value the run chose (not the
    operator's): a run-time store opens only an existing store of its kind."""
    value = getattr(ctx, name)
    return bool(value) and value not in operator_values(type(ctx), name)


# -- the operator's values and the check -----------------------------------------------------
def env_name(name: str) -> str:
    """The variable that sets operator setting ``name`` for every graph: ``GAPRAG_<NAME>``."""
    return f"GAPRAG_{name.upper()}"


def env_value(name: str) -> str:
    """The environment's value of operator setting ``name`` (``base_url`` also reads
    ``OPENAI_BASE_URL``)."""
    if name == "base_url":
        return config.base_url() or ""
    return (os.environ.get(env_name(name)) or "").strip()


def operator_kind(f: dataclasses.Field[Any]) -> OperatorKind | None:
    kind: OperatorKind | None = f.metadata.get("operator")
    return kind


def operator_fields(cls: type[Any]) -> dict[str, OperatorKind]:
    """``{name: kind}`` of the operator settings of a context class."""
    out = {}
    for f in dataclasses.fields(cls):
        kind = operator_kind(f)
        if kind is not None:
            out[f.name] = kind
    return out


def _default(cls: type[Any], name: str) -> Any:
    f = cls.__dataclass_fields__[name]
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def operator_values(cls: type[Any], name: str) -> tuple[Any, ...]:
    """The values of setting ``name`` that are the operator's: its build-time value, and the
    environment's value when the build left it empty."""
    built = _default(cls, name)
    env = env_value(name) if not built and isinstance(built, str) else ""
    return (built, env) if env else (built,)


def policy_of(cls: type[Any]) -> OperatorPolicy:
    """The policy a context class was built under (``build_graph``), else the environment's."""
    policy = getattr(cls, "__operator_policy__", None)
    return policy if isinstance(policy, OperatorPolicy) else OperatorPolicy.from_env()


def operator_endpoint(cls: type[Any], url: str) -> bool:
    """Whether ``url`` is an endpoint the operator configured (so its key may go there)."""
    kinds = operator_fields(cls)
    return any(url in operator_values(cls, n) for n, k in kinds.items() if k == "endpoint") or (
        url == env_value("base_url")
    )


def _model_endpoint(name: str) -> str:
    return name[: -len("model")] + "base_url"


def _method(ctx: Any) -> str:
    return str(getattr(type(ctx), "method_name", type(ctx).__module__.split(".")[-2]))


def admit(ctx: T) -> T:
    """``ctx`` if its operator settings are the operator's or changes the policy allows (run-time
    paths come back resolved, defaults above a cap lowered to it); else an InputError."""
    cls = type(ctx)
    policy = policy_of(cls)
    method = _method(ctx)
    changes: dict[str, Any] = {}
    kinds = operator_fields(cls)
    for name, kind in kinds.items():
        value = getattr(ctx, name)
        if kind == "path" and value == HIDDEN_PATH:  # the schema's stand-in for the operator's
            changes[name] = _default(cls, name)
            continue
        if value in operator_values(cls, name):
            continue
        if kind == "path" and isinstance(value, str):
            _check_path_text(method, name, value)
        if policy.dev_allow_runtime_settings:
            continue
        if kind == "endpoint" and value and policy.endpoint(str(value)):
            continue
        if kind == "model":
            url = getattr(ctx, _model_endpoint(name), None)
            runtime_url = isinstance(url, str) and url not in operator_values(
                cls, _model_endpoint(name)
            )
            if runtime_url and policy.endpoint(str(url)):
                continue
        if kind == "path" and is_store_address(value):
            if policy.store_allowed(str(value)):
                continue
            raise InputError(
                f"{method}: {name}={_shown(value)} is not a store address the operator allows",
                hint=f"the operator sets it with {env_name(name)} or build_graph({name}=...); "
                "or allows run-time store addresses with GAPRAG_ALLOWED_STORES "
                "(GAPRAG_DEV_ALLOW_RUNTIME_SETTINGS=1 on a developer's machine)",
            )
        if kind == "path" and value and policy.store_root is not None:
            changes[name] = str(policy.inside_root(method, name, str(value)))
            continue
        raise InputError(
            f"{method}: {name}={_shown(value)} is the operator's setting and cannot be set per run",
            hint=_hint(name, kind),
        )
    for name, cap in policy.max_bounds.items():
        value = getattr(ctx, name, None)
        if not isinstance(value, int | float) or isinstance(value, bool) or value <= cap:
            continue
        if value != _default(cls, name):
            raise InputError(
                f"{method}: {name}={value} is above the operator's cap of {cap}",
                hint=f"set {name}={cap} or less (GAPRAG_MAX_BOUNDS)",
            )
        changes[name] = type(value)(cap)
    return dataclasses.replace(ctx, **changes) if changes else ctx  # type: ignore[type-var]


def _hint(name: str, kind: OperatorKind) -> str:
    channel = f"the operator sets it with {env_name(name)} or build_graph({name}=...)"
    if kind == "switch":
        channel = f"the operator sets it with build_graph({name}=...)"
    allow = {
        "endpoint": "; or allows run-time endpoints with GAPRAG_ALLOWED_ENDPOINTS",
        "model": "; a run may name a model only with an endpoint GAPRAG_ALLOWED_ENDPOINTS allows",
        "path": "; or allows run-time paths under GAPRAG_STORE_ROOT",
        "switch": "",
    }[kind]
    return channel + allow + " (GAPRAG_DEV_ALLOW_RUNTIME_SETTINGS=1 on a developer's machine)"


def with_policy(cls: type[T], policy: OperatorPolicy) -> type[T]:
    """``cls`` carrying ``policy`` (a subclass with the same fields, name and module). With
    ``hide_paths`` its JSON schema shows :data:`HIDDEN_PATH` as the default of every path
    setting the operator set."""
    namespace = {
        "__operator_policy__": policy,
        "__doc__": cls.__doc__,
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
    }
    derived = type(cls.__name__, (cls,), namespace)
    hidden = [
        f
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        if policy.hide_paths and operator_kind(f) == "path" and _default(cls, f.name)
    ]
    if not hidden:
        return derived
    specs = [
        (f.name, f.type, field(default=_default(cls, f.name),
                               metadata={**f.metadata, "json_schema_extra": _hidden_default}))
        for f in hidden
    ]  # fmt: skip
    made = dataclasses.make_dataclass(
        cls.__name__, specs, bases=(derived,), kw_only=True, namespace=namespace
    )
    made.__module__, made.__qualname__ = cls.__module__, cls.__qualname__
    return made


def _hidden_default(schema: dict[str, Any]) -> None:
    schema["default"] = HIDDEN_PATH


def env_settings(cls: type[Any], given: Mapping[str, Any], injected: set[str]) -> dict[str, str]:
    """The operator settings the environment sets for a graph built with ``given`` settings:
    ``GAPRAG_<NAME>`` of every path and role-endpoint setting the build left unset and no
    injected object replaces (``base_url`` and ``model`` are read by the LLM layer itself)."""
    replaced_by = {
        "store": "retriever",
        "feedback_store": "pair_store",
        "qa_store": "kb_pairs",
        "rf_weights": "sufficiency_model",
        "reranker": "scorer",
        "keywords_base_url": "keywords_llm",
        "keywords_model": "keywords_llm",
        "validator_base_url": "validator_llm",
        "validator_model": "validator_llm",
    }
    out = {}
    for name in operator_fields(cls):
        if name in given or name not in replaced_by or replaced_by[name] in injected:
            continue
        value = env_value(name)
        if value:
            out[name] = value
    return out
