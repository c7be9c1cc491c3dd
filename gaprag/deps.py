"""Everything a graph uses that is an object rather than a setting, in one typed place.

``build_graph(method, llm=..., retriever=..., checkpointer=..., deps=Deps(...), **settings)``:
``llm`` and ``retriever`` are the common ones; the rest are injected only where a method uses
them (a separate keyword or validator model, a QA-pair knowledge base, RAG-EF's feedback
store). They can also be passed to ``build_graph`` as keywords of the same names. A method
with objects of its own declares them in its package, as a subclass of :class:`Deps` that its
``build`` takes (e.g. MIGRES's scorer and fact verifier); the registry finds it there.
Anything not given is resolved lazily from the
run's settings (endpoint, store path) on first use and cached (the :data:`CACHE_SIZE` most
recently used): building a graph is instant. An injected model is never replaced by an endpoint
a run names, and the operator's API key goes only to the operator's endpoints
(:mod:`gaprag.operator`).

Nodes ask with the async twins (:meth:`Deps.achat`, :meth:`Deps.aretriever`,
:meth:`Deps.acached`): an injected or already built object comes back at once, and resolving
one (opening or building a store, starting the embedded server, loading a model) runs through
:func:`gaprag.aio.to_thread`, so it never blocks the event loop of an async run.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, Self, TypeVar

from gaprag import config
from gaprag.aio import to_thread
from gaprag.context import BaseContext, explicit_value
from gaprag.errors import InputError
from gaprag.llm.client import LLM
from gaprag.llm.factory import default_llm, openai_llm, resolve_llm
from gaprag.llm.memo import current_run
from gaprag.operator import operator_endpoint, policy_of
from gaprag.stores.milvus import MilvusStore
from gaprag.stores.pairs import PairStore
from gaprag.stores.retriever import (
    LangChainRetrieverAdapter,
    Retriever,
    RunRetriever,
    as_retriever,
    unwrap,
)
from gaprag.stores.store import Store

T = TypeVar("T")
_LLM_FIELDS = ("llm", "keywords_llm", "validator_llm")
#: Objects built from settings (clients, stores, models) kept per graph, least recently used
#: dropped first.
CACHE_SIZE = 8
_ENDPOINT_ENV = ("GAPRAG_", "OPENAI_")
_MISSING = object()
#: The stop reason of a run whose metadata filter keeps no passage (no model is called).
NO_MATCH = "no_matching_passages"


@dataclass(kw_only=True)
class Deps:
    """A graph's injected objects. Every field is optional; see the module docstring."""

    llm: LLM | None = None
    """The main chat model (any LangChain chat model is wrapped in :class:`LLM`)."""
    retriever: Retriever | None = None
    """The passage store or any retriever (a LangChain retriever is adapted)."""
    keywords_llm: LLM | None = None
    """IterKey: the model for keyword generation and regeneration (paper's Table 7)."""
    validator_llm: LLM | None = None
    """IterKey: the model for answer validation (paper's Table 8)."""
    kb_pairs: Any = None
    """Missing-Knowledge: a QA-pair knowledge base (a PairStore or a Retriever)."""
    pair_store: PairStore | None = None
    """RAG-EF: the expert-feedback (question, answer, chunk) store."""
    _cache: OrderedDict[Any, Any] = field(default_factory=OrderedDict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _resolved: set[Any] = field(default_factory=set, repr=False)

    @classmethod
    def names(cls) -> set[str]:
        return {f.name for f in fields(cls) if not f.name.startswith("_")}

    @classmethod
    def of(cls, **objects: Any) -> Self:
        """Normalise user objects: chat models become :class:`LLM`, retrievers are adapted."""
        values = {k: v for k, v in objects.items() if v is not None}
        for name in _LLM_FIELDS:
            if name in values:
                values[name] = resolve_llm(values[name])
        if "retriever" in values:
            values["retriever"] = as_retriever(values["retriever"])
        return cls(**values)

    def cached(self, key: Any, make: Callable[[], T]) -> T:
        """The one lazy, lock-guarded cache for objects built from settings (bounded: the
        :data:`CACHE_SIZE` most recently used). An object already built is returned without
        the lock, which a build holds while it runs."""
        built = self._cache.get(key, _MISSING)  # one atomic lookup
        if built is not _MISSING:
            return built  # type: ignore[no-any-return]
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
            else:
                self._cache[key] = make()
                while len(self._cache) > CACHE_SIZE:
                    self._cache.popitem(last=False)
                    self._resolved.clear()  # a client may be gone: resolve off the loop again
            return self._cache[key]  # type: ignore[no-any-return]

    def chat(
        self, ctx: BaseContext, *, role: LLM | None = None, base_url: str = "", model: str = ""
    ) -> LLM:
        """The model for a call: an injected role model, else a role endpoint from the
        settings, else the main model (injected, the run's endpoint, or the default). A role
        endpoint a run named (not the operator's) never replaces an injected main model."""
        if role is not None:
            return role
        if base_url and (self.llm is None or operator_endpoint(type(ctx), base_url)):
            return self._client(ctx, base_url, model)
        if self.llm is not None:
            return self.llm
        if ctx.base_url:
            return self._client(ctx, ctx.base_url, ctx.model)
        return default_llm()

    def _client(self, ctx: BaseContext, base_url: str, model: str) -> LLM:
        """A client of ``base_url``: with the operator's key if it is an operator endpoint,
        else with the key the operator tied to its prefix, or none; the configured endpoint's
        calls take turns at its slots (``GAPRAG_ENDPOINT_SLOTS``)."""
        trusted = operator_endpoint(type(ctx), base_url)
        key = None if trusted else policy_of(type(ctx)).key_for(base_url)
        configured = base_url.rstrip("/") == (config.base_url() or "").rstrip("/")
        slots = config.endpoint_slots() if configured else None
        return self.cached(
            ("llm", base_url, model, trusted),
            lambda: openai_llm(base_url, model or None, api_key=key, slots=slots),
        )

    def search(self, ctx: BaseContext) -> Retriever:
        """The passage retriever: injected, the store at ``ctx.store`` (``GAPRAG_STORE`` when the
        graph was built without one), or the demo corpus; as the run uses it
        (:meth:`for_run`)."""
        if self.retriever is not None:
            return self.for_run(self.retriever, ctx)
        return self.for_run(self.cached(("store", ctx.store), lambda: _open_store(ctx.store)), ctx)

    @staticmethod
    def for_run(retriever: Retriever, ctx: BaseContext) -> Retriever:
        """``retriever`` with the run's metadata ``filter`` on every search; a LangChain
        retriever also warns, once per run, about settings it cannot honour."""
        where = getattr(ctx, "filter", None) or {}
        if isinstance(retriever, LangChainRetrieverAdapter):
            mode = explicit_value(ctx, "retrieval_mode")
            return RunRetriever(retriever, filter=where, run=current_run(), explicit_mode=mode)
        return RunRetriever(retriever, filter=where) if where else retriever

    async def afilter_stop(self, ctx: BaseContext) -> str:
        """:data:`NO_MATCH` when the run's metadata ``filter`` keeps no passage of its gaprag
        store, else ''. A key no passage carries is an :class:`InputError` naming the keys the
        store has, unless the operator hides the store from its callers (a served graph): they
        get the stop alone. A retriever that is not a gaprag store is not checked."""
        where = getattr(ctx, "filter", None) or {}
        if not where:
            return ""
        store = unwrap(await self.aretriever(ctx))
        if not isinstance(store, Store | MilvusStore):
            return ""
        keys = await to_thread(store.metadata_keys)
        unknown = [k for k in where if k not in keys]
        if unknown and not policy_of(type(ctx)).hide_paths:
            raise InputError(
                f"no passage in the store has the metadata key(s) {', '.join(unknown)}",
                hint=f"filter on the keys the store has: {', '.join(sorted(keys)) or '(none)'}",
            )
        if unknown or await to_thread(store.count_matching, where) == 0:
            return NO_MATCH
        return ""

    # -- the same lookups for nodes: never block the event loop ---------------------------
    async def acached(self, key: Any, make: Callable[[], T]) -> T:
        """:meth:`cached` for nodes: built in a worker thread the first time."""
        built = self._cache.get(key, _MISSING)
        if built is not _MISSING:  # built: no thread
            return built  # type: ignore[no-any-return]
        return await to_thread(self.cached, key, make)

    async def achat(
        self, ctx: BaseContext, *, role: LLM | None = None, base_url: str = "", model: str = ""
    ) -> LLM:
        """:meth:`chat` for nodes: an injected model at once; any other is resolved in a worker
        thread (making a client, starting the embedded server) the first time for its
        endpoint settings, and directly after that, when :meth:`chat` only finds the clients
        it made (no thread hop per call: under load, the worker threads are busy searching)."""
        if role is not None:
            return role
        if self.llm is not None and not base_url:
            return self.llm
        key = ("chat resolved", base_url, model, ctx.base_url, ctx.model, _endpoint_env())
        if key in self._resolved:
            return self.chat(ctx, base_url=base_url, model=model)
        llm = await to_thread(self.chat, ctx, base_url=base_url, model=model)
        with self._lock:
            if len(self._resolved) >= 4 * CACHE_SIZE:  # bounded like the cache
                self._resolved.clear()
            self._resolved.add(key)
        return llm

    async def aretriever(self, ctx: BaseContext) -> Retriever:
        """:meth:`search` for nodes: the store is opened (or the demo store built) in a worker
        thread the first time."""
        if self.retriever is not None:
            return self.for_run(self.retriever, ctx)
        store = await self.acached(("store", ctx.store), lambda: _open_store(ctx.store))
        return self.for_run(store, ctx)


def _endpoint_env() -> tuple[tuple[str, str], ...]:
    """The environment that decides the default client (endpoint, model, key, local server)."""
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(_ENDPOINT_ENV)))


def _open_store(path: str) -> Retriever:
    """The store at ``path`` (a directory or a ``milvus://`` address), or the bundled demo
    corpus's (built on first use)."""
    from gaprag.stores.demo import demo_store
    from gaprag.stores.opening import open_store

    return open_store(path) if path else demo_store()
