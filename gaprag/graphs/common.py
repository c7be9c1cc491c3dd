"""Transition shim for methods not yet in the module-level node layout (issue 17)."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, TypeVar

from langchain_core.language_models import BaseChatModel

from gaprag.context import BaseContext, describe
from gaprag.errors import GapragError
from gaprag.llm.client import LLM
from gaprag.llm.factory import default_llm, openai_llm, resolve_llm
from gaprag.stores.retriever import Retriever, as_retriever

C = TypeVar("C", bound=BaseContext)
__all__ = ["BaseContext", "Resources", "describe", "make_context", "merge_context"]


def merge_context(build: C, run: Any) -> C:
    """Build-time settings, overridden by run-time fields that differ from the class default.

    ``run`` may be this method's context, a dict, or a parent graph's context object (when the
    graph runs as a subgraph): fields are matched by name and unknown ones are ignored.
    """
    if run is None:
        return build
    names = [f.name for f in dataclasses.fields(build)]
    if isinstance(run, dict):
        values = {k: v for k, v in run.items() if k in names}
    else:
        values = {k: getattr(run, k) for k in names if hasattr(run, k)}
    changes = {}
    for f in dataclasses.fields(build):
        if f.name not in values:
            continue
        if f.default is not dataclasses.MISSING:
            default: Any = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        if values[f.name] != default:
            changes[f.name] = values[f.name]
    return dataclasses.replace(build, **changes) if changes else build


def make_context(cls: type[C], overrides: dict[str, Any]) -> C:
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(overrides) - names
    if unknown:
        raise GapragError(
            f"unknown option(s) for this method: {', '.join(sorted(unknown))}",
            hint="valid options: " + ", ".join(sorted(names)),
        )
    return cls(**overrides)


class Resources:
    """The LLM and retriever a graph uses, resolved lazily (so building a graph is instant)."""

    def __init__(self, llm: LLM | BaseChatModel | None = None, retriever: Any = None) -> None:
        self._llm = resolve_llm(llm) if llm is not None else None
        self._retriever: Retriever | None = (
            as_retriever(retriever) if retriever is not None else None
        )
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, str], Any] = {}

    @property
    def given_retriever(self) -> Retriever | None:
        """The retriever passed to ``build_graph``, if any (None means: resolve from context)."""
        return self._retriever

    def llm(self, ctx: BaseContext) -> LLM:
        if self._llm is not None:
            return self._llm
        if not ctx.base_url:
            return default_llm()
        key = ("llm", f"{ctx.base_url}|{ctx.model}")
        with self._lock:
            if key not in self._cache:
                self._cache[key] = openai_llm(ctx.base_url, ctx.model or None)
            return self._cache[key]  # type: ignore[no-any-return]

    def retriever(self, ctx: BaseContext) -> Retriever:
        if self._retriever is not None:
            return self._retriever
        from gaprag.stores.demo import demo_store
        from gaprag.stores.store import Store

        if not ctx.store:
            return demo_store()
        key = ("store", ctx.store)
        with self._lock:
            if key not in self._cache:
                self._cache[key] = Store.open(ctx.store)
            return self._cache[key]  # type: ignore[no-any-return]
