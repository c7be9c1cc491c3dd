"""The method registry: ``build_graph(name, ...)`` for every method graph."""

from __future__ import annotations

import importlib
from typing import Any

from langchain_core.language_models import BaseChatModel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph

from gaprag.errors import GapragError
from gaprag.graphs.common import Resources, make_context
from gaprag.llm.client import LLM

# name -> module with ``Context`` and ``build(resources, context, checkpointer)``
METHODS: dict[str, str] = {
    "standard_rag": "gaprag.graphs.standard_rag.graph",
    "missing_knowledge": "gaprag.graphs.missing_knowledge.graph",
    "iterkey": "gaprag.graphs.iterkey.graph",
    "rag_ef": "gaprag.graphs.rag_ef.graph",
    "migres": "gaprag.graphs.migres.graph",
    "rfm_rag": "gaprag.graphs.rfm_rag.graph",
}


def _module(method: str) -> Any:
    if method not in METHODS:
        raise GapragError(f"unknown method {method!r}", hint="choose one of: " + ", ".join(METHODS))
    try:
        return importlib.import_module(METHODS[method])
    except ModuleNotFoundError as exc:
        if exc.name and METHODS[method].startswith(exc.name):
            raise GapragError(
                f"method {method!r} is not implemented yet", hint="see `gaprag --help`"
            ) from None
        raise


def list_methods(*, available_only: bool = True) -> list[str]:
    """Method names; with ``available_only``, only those whose module imports."""
    if not available_only:
        return list(METHODS)
    out = []
    for name in METHODS:
        try:
            _module(name)
            out.append(name)
        except GapragError:
            pass
    return out


def context_class(method: str) -> type[Any]:
    return _module(method).Context  # type: ignore[no-any-return]


def build_graph(
    method: str,
    *,
    llm: LLM | BaseChatModel | None = None,
    retriever: Any = None,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    **options: Any,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Compile a method's graph.

    ``llm``: any LangChain chat model (default: the configured endpoint or the embedded local
    server, started on first use). ``retriever``: a gaprag store or any LangChain retriever
    (default: the bundled demo corpus). ``options``: fields of the method's context schema,
    e.g. ``max_iterations=3``; per-run overrides go in ``invoke(..., context={...})``.
    """
    module = _module(method)
    context = make_context(module.Context, options)
    resources = Resources(llm=llm, retriever=retriever)
    return module.build(resources, context, checkpointer)  # type: ignore[no-any-return]
