"""The one retriever interface the graphs use, and adapters to and from LangChain."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Collection, Mapping
from typing import Any, Protocol, runtime_checkable

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document as LCDocument
from langchain_core.retrievers import BaseRetriever

from gaprag.accounting import record_retrieval, retrievals_recorded
from gaprag.aio import to_thread
from gaprag.state.base import Evidence
from gaprag.stores.documents import content_id
from gaprag.stores.filters import check_filter, matches
from gaprag.stores.store import RetrievalMode, Store


@runtime_checkable
class Retriever(Protocol):
    def search(
        self,
        query: str,
        k: int = 5,
        *,
        mode: RetrievalMode | None = None,
        exclude: Collection[str] = (),
    ) -> list[Evidence]: ...


class LangChainRetrieverAdapter:
    """Use any LangChain ``BaseRetriever`` where gaprag expects a :class:`Retriever`.

    The retriever decides how it searches: ``mode`` cannot change that (a mode the user set is
    warned about, :class:`RunRetriever`). ``k`` is passed through where the retriever takes it
    (``search_kwargs["k"]``, as vector-store retrievers do, or a ``k`` attribute, as
    ``BM25Retriever``); a retriever that returns fewer than ``k`` passages otherwise is
    warned about, once per run. A document keeps its own id (``doc.id``, else
    ``metadata["id"]``, else a content hash), title (``metadata["title"]``) and metadata.
    """

    records_retrievals = True
    fires_callbacks = True  # a LangChain retriever reports its own runs to the callbacks
    takes_filter = True

    def __init__(self, retriever: BaseRetriever, source: str = "retriever") -> None:
        self.retriever = retriever
        self.source = source
        self._warned: set[tuple[str, str]] = set()
        self._warn_lock = threading.Lock()

    def warn_once(self, run: str, kind: str, message: str) -> None:
        """Say ``message`` as a :class:`UserWarning`, once per run and kind."""
        with self._warn_lock:
            if (run, kind) in self._warned:
                return
            if len(self._warned) >= 1024:
                self._warned.clear()
            self._warned.add((run, kind))
        warnings.warn(message, UserWarning, stacklevel=3)

    def takes_k(self) -> bool:
        """Whether the retriever has a setting for how many documents it returns."""
        retriever: Any = self.retriever
        return isinstance(getattr(retriever, "search_kwargs", None), dict) or isinstance(
            getattr(retriever, "k", None), int
        )

    def _with_k(self, k: int) -> BaseRetriever:
        """The retriever returning ``k`` documents, where it has a setting for that (a
        shallow copy: the user's object is not changed)."""
        retriever = self.retriever
        search_kwargs = getattr(retriever, "search_kwargs", None)
        update: dict[str, Any] = {}
        if isinstance(search_kwargs, dict) and search_kwargs.get("k") != k:
            update = {"search_kwargs": {**search_kwargs, "k": k}}
        elif isinstance(current := getattr(retriever, "k", None), int) and current != k:
            update = {"k": k}
        return retriever.model_copy(update=update) if update else retriever

    def search(  # the Retriever protocol's search, with a filter and the run it serves
        self, query: str, k: int = 5, *, filter: Mapping[str, Any] | None = None, run: str = "",
        exclude: Collection[str] = (), mode: RetrievalMode | None = None,
    ) -> list[Evidence]:  # fmt: skip
        """Top-``k`` documents as evidence; ``filter`` keeps those whose metadata matches
        (applied to what the retriever returns; the retriever is asked for more to make up)."""
        want = k + len(exclude) + (3 * k if filter else 0)
        docs = self._with_k(want).invoke(query)
        if len(docs) < k and not self.takes_k():
            self.warn_once(
                run,
                "top_k",
                f"top_k={k} but the LangChain retriever {type(self.retriever).__name__} "
                f"returned {len(docs)} documents and has no k setting gaprag can raise; "
                "configure it to return at least top_k",
            )
        out: list[Evidence] = []
        for doc in docs:
            hit = document_evidence(doc, self.source)
            if hit["id"] in exclude or (filter and not matches(hit.get("metadata"), filter)):
                continue
            out.append(hit)
            if len(out) >= k:
                break
        record_retrieval(query, [h["id"] for h in out], mode=mode)
        return out


def document_evidence(doc: LCDocument, source: str) -> Evidence:
    """A LangChain document as evidence: its id, title and score from the document, every
    other metadata field in ``metadata``."""
    meta = dict(doc.metadata or {})
    title = str(meta.pop("title", "") or "")
    meta_id = meta.pop("id", None)
    doc_id = str(doc.id or meta_id or content_id(title, doc.page_content))
    try:
        score = float(meta.pop("score", 0.0) or 0.0)
    except (TypeError, ValueError):
        score = 0.0
    hit = Evidence(id=doc_id, title=title, text=doc.page_content, source=source, score=score,
                   round=0)  # fmt: skip
    if meta:
        hit["metadata"] = meta
    return hit


def evidence_document(hit: Evidence) -> LCDocument:
    """Evidence as a LangChain document: ``id``, and metadata with the passage's own fields
    plus ``id``, ``title`` and ``score``."""
    return LCDocument(
        id=hit["id"],
        page_content=hit["text"],
        metadata={
            **hit.get("metadata", {}),
            "id": hit["id"],
            "title": hit["title"],
            "score": hit["score"],
        },
    )


class _Around:
    """A retriever around another (``inner``), whose other attributes pass through."""

    records_retrievals = True

    def __init__(self, inner: Retriever) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class RecordedRetriever(_Around):
    """Any other :class:`Retriever`, with each of its searches recorded once: here, unless the
    retriever recorded it itself (one that delegates to a gaprag store, say); other attributes
    pass through."""

    def search(self, query: str, k: int = 5, **options: Any) -> list[Evidence]:
        """The inner search (``mode``, ``exclude`` and any other options passed on)."""
        before = retrievals_recorded()
        hits: list[Evidence] = self.inner.search(query, k, **options)
        if retrievals_recorded() == before:
            record_retrieval(query, [h["id"] for h in hits], mode=options.get("mode"))
        return hits


class GapragRetriever(BaseRetriever):
    """A gaprag :class:`Store` as a LangChain retriever (for chains and agents).

    ``k``, ``mode`` and ``filter`` are the defaults; ``retriever.invoke(query, k=3,
    mode="bm25", filter={"department": "hr"})`` overrides them for one call. Each document
    carries its id (``doc.id`` and ``metadata["id"]``), ``title``, ``score`` and the passage's
    own metadata (``source``, ``page``...).
    """

    store: Any
    k: int = 5
    mode: RetrievalMode = "hybrid"
    filter: dict[str, Any] | None = None

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **per_call: Any
    ) -> list[LCDocument]:
        return self._search(query, **per_call)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **per_call: Any
    ) -> list[LCDocument]:
        """The store's search in a worker thread, off the event loop."""
        return await to_thread(self._search, query, **per_call)

    def _search(
        self,
        query: str,
        k: int | None = None,
        mode: RetrievalMode | None = None,
        filter: dict[str, Any] | None = None,
    ) -> list[LCDocument]:
        """One search: ``k``, ``mode`` and ``filter`` of this call, else the retriever's."""
        where = filter if filter is not None else self.filter
        options = {"filter": check_filter(where)} if where else {}
        hits = self.store.search(
            query, self.k if k is None else k, mode=mode or self.mode, **options
        )
        return [evidence_document(h) for h in hits]


class GapragSearch(BaseRetriever):
    """One search of a gaprag :class:`Retriever` as a LangChain retriever run, so callback
    handlers (LangSmith's tracer, say) see it: :func:`traced_search` invokes it with the
    caller's run configuration and hands the evidence back through ``sink``."""

    searcher: Any

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int = 5,
        mode: RetrievalMode | None = None,
        exclude: Collection[str] = (),
        sink: list[Evidence] | None = None,
    ) -> list[LCDocument]:
        hits = self.searcher.search(query, k, mode=mode, exclude=exclude)
        if sink is not None:
            sink.extend(hits)
        return [evidence_document(h) for h in hits]


def traced_search(
    retriever: Retriever,
    query: str,
    k: int,
    *,
    mode: RetrievalMode | None = None,
    exclude: Collection[str] = (),
) -> list[Evidence]:
    """``retriever.search`` as a retriever run in the current LangChain run tree (a node's
    callbacks see ``on_retriever_start``/``on_retriever_end`` with the documents); a
    LangChain retriever reports its own run."""
    if getattr(retriever, "fires_callbacks", False):
        return retriever.search(query, k, mode=mode, exclude=exclude)
    sink: list[Evidence] = []
    GapragSearch(searcher=retriever).invoke(query, k=k, mode=mode, exclude=exclude, sink=sink)
    return sink


class RunRetriever(_Around):
    """A retriever as one run uses it: the run's metadata ``filter`` on every search (by the
    retriever where it takes one, else on what it returns, fetched deeper), and a LangChain
    retriever's warnings said once for the run (``run``): a ``retrieval_mode`` the user set
    (``explicit_mode``) that it cannot honour, a ``top_k`` above what it returns."""

    def __init__(
        self,
        inner: Retriever,
        *,
        filter: Mapping[str, Any] | None = None,
        run: str = "",
        explicit_mode: str | None = None,
    ) -> None:
        super().__init__(inner)
        self.filter = dict(filter or {})
        self.run = run
        self.explicit_mode = explicit_mode

    @property
    def fires_callbacks(self) -> bool:
        return bool(getattr(self.inner, "fires_callbacks", False))

    def search(self, query: str, k: int = 5, **options: Any) -> list[Evidence]:
        """The inner search (``mode``, ``exclude``) within the run's filter."""
        inner = self.inner
        if isinstance(inner, LangChainRetrieverAdapter):
            if self.explicit_mode:
                inner.warn_once(
                    self.run,
                    "retrieval_mode",
                    f"retrieval_mode={self.explicit_mode!r} is ignored: the LangChain retriever "
                    f"{type(inner.retriever).__name__} decides how it searches",
                )
            return inner.search(query, k, **options, filter=self.filter or None, run=self.run)
        if not self.filter:
            return inner.search(query, k, **options)
        if getattr(inner, "takes_filter", False):
            filtering: Any = inner
            found: list[Evidence] = filtering.search(query, k, **options, filter=self.filter)
            return found
        deeper = 4 * k + len(options.get("exclude", ()))
        hits = inner.search(query, deeper, **options)
        return [h for h in hits if matches(h.get("metadata"), self.filter)][:k]


def unwrap(retriever: Retriever) -> Retriever:
    """The retriever a :class:`RunRetriever` serves (the store itself, say), else ``retriever``."""
    return retriever.inner if isinstance(retriever, RunRetriever) else retriever


def as_retriever(obj: Retriever | BaseRetriever | Store) -> Retriever:
    if isinstance(obj, BaseRetriever):
        return LangChainRetrieverAdapter(obj)
    if isinstance(obj, Retriever):
        return obj if getattr(obj, "records_retrievals", False) else RecordedRetriever(obj)
    raise TypeError(
        f"expected a gaprag Store/Retriever or a LangChain BaseRetriever, got {type(obj).__name__}"
    )
