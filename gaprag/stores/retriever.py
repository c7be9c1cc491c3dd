"""The one retriever interface the graphs use, and adapters to and from LangChain."""

from __future__ import annotations

from collections.abc import Collection
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

    ``mode`` is ignored (the retriever decides how it searches); ``k`` caps the results.
    Ids come from ``metadata['id']`` when present, else from a content hash.
    """

    records_retrievals = True

    def __init__(self, retriever: BaseRetriever, source: str = "retriever") -> None:
        self.retriever = retriever
        self.source = source

    def search(
        self,
        query: str,
        k: int = 5,
        *,
        mode: RetrievalMode | None = None,
        exclude: Collection[str] = (),
    ) -> list[Evidence]:
        out: list[Evidence] = []
        for doc in self.retriever.invoke(query):
            meta = doc.metadata or {}
            title = str(meta.get("title", ""))
            doc_id = str(meta.get("id") or content_id(title, doc.page_content))
            if doc_id in exclude:
                continue
            score = float(meta.get("score", 0.0) or 0.0)
            out.append(
                Evidence(
                    id=doc_id,
                    title=title,
                    text=doc.page_content,
                    source=self.source,
                    score=score,
                    round=0,
                )
            )
            if len(out) >= k:
                break
        record_retrieval(query, [h["id"] for h in out], mode=mode)
        return out


class RecordedRetriever:
    """Any other :class:`Retriever`, with each of its searches recorded once: here, unless the
    retriever recorded it itself (one that delegates to a gaprag store, say); other attributes
    pass through."""

    records_retrievals = True

    def __init__(self, inner: Retriever) -> None:
        self.inner = inner

    def search(
        self,
        query: str,
        k: int = 5,
        *,
        mode: RetrievalMode | None = None,
        exclude: Collection[str] = (),
    ) -> list[Evidence]:
        before = retrievals_recorded()
        hits = self.inner.search(query, k, mode=mode, exclude=exclude)
        if retrievals_recorded() == before:
            record_retrieval(query, [h["id"] for h in hits], mode=mode)
        return hits

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class GapragRetriever(BaseRetriever):
    """A gaprag :class:`Store` as a LangChain retriever (for chains and agents).

    ``k`` and ``mode`` are the defaults; ``retriever.invoke(query, k=3, mode="bm25")``
    overrides them for one call.
    """

    store: Any
    k: int = 5
    mode: RetrievalMode = "hybrid"

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        mode: RetrievalMode | None = None,
    ) -> list[LCDocument]:
        return self._search(query, k, mode)

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
        mode: RetrievalMode | None = None,
    ) -> list[LCDocument]:
        """The store's search in a worker thread, off the event loop."""
        return await to_thread(self._search, query, k, mode)

    def _search(self, query: str, k: int | None, mode: RetrievalMode | None) -> list[LCDocument]:
        hits = self.store.search(query, self.k if k is None else k, mode=mode or self.mode)
        return [
            LCDocument(
                page_content=h["text"],
                metadata={"id": h["id"], "title": h["title"], "score": h["score"]},
            )
            for h in hits
        ]


def as_retriever(obj: Retriever | BaseRetriever | Store) -> Retriever:
    if isinstance(obj, BaseRetriever):
        return LangChainRetrieverAdapter(obj)
    if isinstance(obj, Retriever):
        return obj if getattr(obj, "records_retrievals", False) else RecordedRetriever(obj)
    raise TypeError(
        f"expected a gaprag Store/Retriever or a LangChain BaseRetriever, got {type(obj).__name__}"
    )
