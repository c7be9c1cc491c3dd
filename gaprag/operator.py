"""What the operator of a graph decides, and the one check of a run's settings against it.

Whoever builds a graph (``build_graph``, the ``gaprag`` command, ``gaprag eval``, the
environment of a served graph) is its *operator*. Whoever runs it (``invoke(...,
context={...})``, Studio's form, a LangGraph server's runs, assistants and MCP calls) sets only
*run settings*. The settings that name an endpoint, a model, a file or a spend switch are the
operator's: their fields are made with ``describe(..., operator=KIND)`` and a run may not
change them unless the operator allowed it (:class:`OperatorPolicy`):

- ``endpoint`` (``base_url``, ``keywords_base_url``, ``validator_base_url``): a URL that starts
  with one of ``allowed_endpoints`` (``GAPRAG_ALLOWED_ENDPOINTS``). The operator's API key is
  never sent to such an endpoint: it gets the key the operator tied to that prefix, or none.
- ``model`` (``model``, ``keywords_model``, ``validator_model``): only together with an allowed
  run-time endpoint for it.
- ``path`` (``store``, ``feedback_store``, ``qa_store``, ``rf_weights``, ``reranker``): inside
  ``store_root`` (``GAPRAG_STORE_ROOT``) after resolving ``..`` and symbolic links; without a
  root, never.
- ``switch`` (``calibration``): never.

A run-time value equal to the operator's (the build-time value, or the ``GAPRAG_<NAME>``
variable when the build left it empty) is no change. ``dev_allow_runtime_settings``
(``GAPRAG_DEV_ALLOW_RUNTIME_SETTINGS=1``) allows every change, for a developer's own machine.

Spend: ``max_bounds`` (``GAPRAG_MAX_BOUNDS="max_iterations=3,max_steps=5"``) caps numeric
settings (a run asking for more is refused; a default above the cap is lowered to it);
``deadline_s`` (``GAPRAG_RUN_DEADLINE``) and ``token_budget`` (``GAPRAG_RUN_TOKEN_BUDGET``) end
a run early with ``stop_reason`` ``deadline`` or ``token_budget``: the LLM layer keeps them for
the run and checks them before every call (:mod:`gaprag.llm.spend`);
``feedback_writes`` (``GAPRAG_FEEDBACK_WRITES``) lets resumed expert reviews write to RAG-EF's
shared feedback store.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from gaprag import config
from gaprag.errors import GapragError, InputError

OperatorKind = Literal["endpoint", "model", "path", "switch"]
T = TypeVar("T")

#: The stop reasons of a run the operator's limits ended.
LIMIT_REASONS = ("deadline", "token_budget")
_TRUE = ("1", "true", "yes", "on")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _flag(name: str, default: bool) -> bool:
    value = (os.environ.get(name) or "").strip().lower()
    return default if not value else value in _TRUE


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
class AllowedEndpoint:
    """A URL prefix runs may name as an endpoint, and the variable holding its key (if any)."""

    prefix: str
    key_env: str | None = None


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
        if "://" not in entry.prefix:
            raise GapragError(
                f"GAPRAG_ALLOWED_ENDPOINTS: {entry.prefix!r} is not a URL prefix",
                hint="list prefixes like https://api.example.com/v1/ (optionally =KEY_VARIABLE)",
            )
    return tuple(out)


def parse_bounds(text: str) -> dict[str, int]:
    """``"max_iterations=3,max_steps=5"`` -> ``{"max_iterations": 3, "max_steps": 5}``."""
    out: dict[str, int] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        name, _, raw = item.partition("=")
        try:
            out[name.strip()] = int(raw)
        except ValueError:
            raise GapragError(
                f"GAPRAG_MAX_BOUNDS: {item!r} is not NAME=NUMBER",
                hint='e.g. GAPRAG_MAX_BOUNDS="max_iterations=3,max_steps=5"',
            ) from None
    return out


@dataclass(frozen=True)
class OperatorPolicy:
    """What runs may change and spend; read once from the environment (:meth:`from_env`) when
    a graph is built, or given to ``build_graph(..., policy=OperatorPolicy(...))``."""

    allowed_endpoints: tuple[AllowedEndpoint, ...] = ()
    """URL prefixes a run may name as an endpoint (``GAPRAG_ALLOWED_ENDPOINTS``)."""
    store_root: Path | None = None
    """The directory under which a run may name stores and model files (``GAPRAG_STORE_ROOT``)."""
    dev_allow_runtime_settings: bool = False
    """A developer's own machine: runs may change every operator setting."""
    max_bounds: Mapping[str, int] = field(default_factory=dict)
    """Caps on numeric settings by name (``GAPRAG_MAX_BOUNDS``)."""
    deadline_s: float | None = None
    """Seconds of node time a run may spend before it answers with what it has."""
    token_budget: int | None = None
    """LLM tokens (prompt + completion) a run may spend before it answers with what it has."""
    feedback_writes: bool = True
    """Resumed expert reviews may add pairs to RAG-EF's feedback store."""

    @classmethod
    def from_env(cls, *, served: bool = False) -> OperatorPolicy:
        """The policy the environment sets. ``served``: for LangGraph's server
        (:mod:`gaprag.studio`), where feedback writes are off unless
        ``GAPRAG_FEEDBACK_WRITES=1``."""
        root = (os.environ.get("GAPRAG_STORE_ROOT") or "").strip()
        return cls(
            allowed_endpoints=parse_endpoints(os.environ.get("GAPRAG_ALLOWED_ENDPOINTS") or ""),
            store_root=Path(root).expanduser().resolve() if root else None,
            dev_allow_runtime_settings=_flag("GAPRAG_DEV_ALLOW_RUNTIME_SETTINGS", False),
            max_bounds=parse_bounds(os.environ.get("GAPRAG_MAX_BOUNDS") or ""),
            deadline_s=_number("GAPRAG_RUN_DEADLINE", float),
            token_budget=_number("GAPRAG_RUN_TOKEN_BUDGET", int),
            feedback_writes=_flag("GAPRAG_FEEDBACK_WRITES", not served),
        )

    def endpoint(self, url: str) -> AllowedEndpoint | None:
        """The allow-list entry ``url`` falls under, if any."""
        return next((e for e in self.allowed_endpoints if url.startswith(e.prefix)), None)

    def key_for(self, url: str) -> str:
        """The key sent to a run-time endpoint: the one tied to its prefix, else none (a
        placeholder)."""
        entry = self.endpoint(url)
        key = os.environ.get(entry.key_env) if entry and entry.key_env else None
        return key or config.PLACEHOLDER_API_KEY

    def inside_root(self, method: str, name: str, value: str) -> Path:
        """``value`` resolved under the store root (relative to it, ``..`` and symbolic links
        followed); an InputError when it leaves the root."""
        assert self.store_root is not None
        root = self.store_root.resolve()
        path = (root / Path(value).expanduser()).resolve()
        if not path.is_relative_to(root):
            raise InputError(
                f"{method}: {name}={value!r} is outside the store root {root}",
                hint=f"name a path under {root}",
            )
        return path


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
        if value in operator_values(cls, name) or policy.dev_allow_runtime_settings:
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
        if kind == "path" and value and policy.store_root is not None:
            changes[name] = str(policy.inside_root(method, name, str(value)))
            continue
        raise InputError(
            f"{method}: {name}={value!r} is the operator's setting and cannot be set per run",
            hint=_hint(name, kind),
        )
    for name, cap in policy.max_bounds.items():
        value = getattr(ctx, name, None)
        if not isinstance(value, int) or isinstance(value, bool) or value <= cap:
            continue
        if value != _default(cls, name):
            raise InputError(
                f"{method}: {name}={value} is above the operator's cap of {cap}",
                hint=f"set {name}={cap} or less (GAPRAG_MAX_BOUNDS)",
            )
        changes[name] = cap
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
    """``cls`` carrying ``policy`` (a subclass with the same fields, name and module)."""
    derived = type(
        cls.__name__,
        (cls,),
        {
            "__operator_policy__": policy,
            "__doc__": cls.__doc__,
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
        },
    )
    return derived


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
