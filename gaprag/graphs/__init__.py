"""The registry: ``build_graph(name, ...)`` for every method graph and composed graph.

Each graph is loaded by one small function with a plain ``import`` inside it, so the CLI
starts without importing any method and the import contract (``lint-imports``) sees every
import the registry makes. A composed graph (:mod:`gaprag.composed`) names the graphs it runs
as subgraphs (its module's ``subgraphs(context)``); the registry builds them, each with its
model profile, and hands them to it (its deps' ``loops``), so a composed graph never imports
the registry.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from collections.abc import Callable
from types import ModuleType
from typing import Any

from langchain_core.language_models import BaseChatModel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph

from gaprag.context import Calibration, field_names, with_defaults
from gaprag.deps import Deps
from gaprag.errors import GapragError
from gaprag.llm.client import LLM
from gaprag.operator import OperatorPolicy, env_name, env_settings, with_policy
from gaprag.validate import check_llm, check_retriever


def _standard_rag() -> ModuleType:
    from gaprag.graphs.standard_rag import graph

    return graph


def _missing_knowledge() -> ModuleType:
    from gaprag.graphs.missing_knowledge import graph

    return graph


def _iterkey() -> ModuleType:
    from gaprag.graphs.iterkey import graph

    return graph


def _rag_ef() -> ModuleType:
    from gaprag.graphs.rag_ef import graph

    return graph


def _migres() -> ModuleType:
    from gaprag.graphs.migres import graph

    return graph


def _rfm_rag() -> ModuleType:
    from gaprag.graphs.rfm_rag import graph

    return graph


def _ircot() -> ModuleType:
    from gaprag.graphs.ircot import graph

    return graph


def _escalating_rag() -> ModuleType:
    from gaprag.composed.escalating_rag import graph

    return graph


# name -> the function that loads the module with ``Context`` and
# ``build(deps, context, checkpointer)``
METHODS: dict[str, Callable[[], ModuleType]] = {
    "standard_rag": _standard_rag,
    "missing_knowledge": _missing_knowledge,
    "iterkey": _iterkey,
    "rag_ef": _rag_ef,
    "migres": _migres,
    "rfm_rag": _rfm_rag,
    "ircot": _ircot,
    "escalating_rag": _escalating_rag,
}

#: the iterative methods: each starts with the shared gate (``gate``) and can end with the
#: shared reader (``reader="ranked"``), see gaprag.nodes.gate and gaprag.nodes.reader
ITERATIVE: tuple[str, ...] = ("missing_knowledge", "iterkey", "migres", "rfm_rag", "ircot")


def graph_module(method: str) -> ModuleType:
    """The module of ``method``'s graph (its ``Context`` and ``build``), loaded on first use."""
    if method not in METHODS:
        raise GapragError(f"unknown method {method!r}", hint="choose one of: " + ", ".join(METHODS))
    return METHODS[method]()


def deps_class(method: str) -> type[Deps]:
    """The class of the objects ``method``'s graph takes (its ``build``'s ``deps``):
    :class:`gaprag.deps.Deps`, or the method's own subclass with its own objects."""
    found = typing.get_type_hints(graph_module(method).build).get("deps", Deps)
    if found is Any:  # unannotated in effect: the shared objects
        return Deps
    if not (isinstance(found, type) and issubclass(found, Deps)):
        raise TypeError(f"{method}: build's deps must be gaprag.deps.Deps or a subclass")
    return found


def _as_class(deps: Deps, kind: type[Deps]) -> Deps:
    """``deps`` as a ``kind`` (a method's own class): the fields both have, the cache shared."""
    if isinstance(deps, kind):
        return deps
    own = {f.name for f in dataclasses.fields(kind)}
    return kind(
        **{f.name: getattr(deps, f.name) for f in dataclasses.fields(deps) if f.name in own}
    )


def list_methods() -> list[str]:
    """The method names."""
    return list(METHODS)


def context_class(method: str) -> type[Any]:
    return graph_module(method).Context  # type: ignore[no-any-return]


def calibration(method: str) -> Calibration | None:
    """What ``gaprag calibrate`` replays for ``method``: the ``CALIBRATION`` its context module
    declares, or None for a method without a loop decision taken by a model."""
    module = sys.modules[context_class(method).__module__]  # loaded with its graph
    found = getattr(module, "CALIBRATION", None)
    return found if isinstance(found, Calibration) else None


def calibrated() -> dict[str, Calibration]:
    """Every registered method with a calibrated decision, and what calibration needs."""
    return {m: c for m in METHODS if (c := calibration(m)) is not None}


def build_graph(
    method: str,
    *,
    llm: LLM | BaseChatModel | None = None,
    retriever: Any = None,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    deps: Deps | None = None,
    profile: Any = "auto",
    policy: OperatorPolicy | None = None,
    **options: Any,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Compile a method's graph.

    ``llm``: any LangChain chat model (default: the configured endpoint or the embedded local
    server, started on first use). ``retriever``: a gaprag store or any LangChain retriever
    (default: the bundled demo corpus). ``deps``: a :class:`gaprag.deps.Deps` with the other
    objects a method can use, or the method's own subclass (:func:`deps_class`, e.g.
    ``MigresDeps`` with MIGRES's ``scorer``); their fields may also be given as keywords, e.g.
    ``validator_llm=...`` or ``scorer=...``. ``options``: fields of the method's context
    schema, e.g. ``max_iterations=3``; per-run values go in ``invoke(..., context={...})``
    and win, except for the operator's settings (endpoints, models, paths, ``calibration``),
    which a run may change only as ``policy`` allows.
    ``profile``: the model profile whose thresholds and switches apply under ``options``
    (:mod:`gaprag.profiles`): ``"auto"`` (the shipped profile of the model in use, if any),
    None (none), a model name or a ``.toml`` path. The graph's context class reports every
    setting and its source (:func:`gaprag.context.effective_settings`).
    ``policy``: what runs may change and spend (:class:`gaprag.operator.OperatorPolicy`;
    default: read from the environment now). Operator settings the build leaves unset come
    from their ``GAPRAG_<NAME>`` variables (source ``env``).
    """
    from gaprag.profiles import apply_profile, resolve

    module = graph_module(method)
    check_llm(llm)
    check_retriever(retriever, method=method)
    kind = deps_class(method)
    names = kind.names()
    objects = {k: options.pop(k) for k in list(options) if k in names}
    given = kind.of(llm=llm, retriever=retriever, **objects)
    if deps is not None:
        chosen = {f.name: getattr(given, f.name) for f in dataclasses.fields(given)}
        given = dataclasses.replace(
            _as_class(deps, kind),
            **{k: v for k, v in chosen.items() if v is not None and k in names},
        )
    chosen_profile = resolve(profile, given.llm)
    merged, sources = apply_profile(method, options, chosen_profile, field_names(module.Context))
    injected = {k for k in names if getattr(given, k) is not None}
    env = env_settings(module.Context, merged, injected)
    merged.update(env)
    sources.update({k: f"env {env_name(k)}" for k in env})
    policy = policy if policy is not None else OperatorPolicy.from_env()
    context = with_policy(with_defaults(module.Context, merged, sources=sources), policy)
    composes = getattr(module, "subgraphs", None)
    if composes is not None and not getattr(given, "loops", None):
        loops = {
            name: build_graph(name, deps=given, policy=policy, **opts)
            for name, opts in composes(context).items()
        }
        given = dataclasses.replace(given, loops=loops)  # type: ignore[call-arg]
    return module.build(given, context, checkpointer)  # type: ignore[no-any-return]
