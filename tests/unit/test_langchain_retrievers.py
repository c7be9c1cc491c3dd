"""LangChain retrievers in and out: ids and metadata kept, top_k passed through, what a
retriever cannot honour said once per run, and gaprag's own searches as retriever runs."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document as LCDocument
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import InMemoryVectorStore

from gaprag import build_graph
from gaprag.context import explicit_value, with_defaults
from gaprag.graphs.standard_rag.context import Context as PlainContext
from gaprag.stores import Store
from gaprag.stores.retriever import LangChainRetrieverAdapter, RunRetriever, as_retriever
from gaprag.testing import scripted

TEXTS = ["Paris is in France.", "Berlin is in Germany.", "Rome is in Italy.",
         "Madrid is in Spain.", "Lisbon is in Portugal.", "Vienna is in Austria."]  # fmt: skip


class Two(BaseRetriever):
    """A retriever with no k setting: always its two documents."""

    def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[LCDocument]:
        return [
            LCDocument(
                page_content="one",
                id="doc-1",
                metadata={"source": "a.pdf", "page": 3, "title": "A", "score": 0.5},
            ),
            LCDocument(page_content="two", metadata={"id": "m2", "url": "https://x"}),
        ]


def vector_retriever(k: int) -> BaseRetriever:
    vs = InMemoryVectorStore(embedding=DeterministicFakeEmbedding(size=16))
    vs.add_documents([LCDocument(page_content=t, metadata={"source": f"{i}.txt"})
                      for i, t in enumerate(TEXTS)])  # fmt: skip
    return vs.as_retriever(search_kwargs={"k": k})


def caught(fn: Any) -> tuple[Any, list[str]]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = fn()
    return out, [str(w.message) for w in seen if issubclass(w.category, UserWarning)]


def test_documents_keep_their_ids_titles_and_metadata() -> None:
    hits, _ = caught(lambda: as_retriever(Two()).search("q", 2))
    assert hits[0]["id"] == "doc-1" and hits[0]["title"] == "A" and hits[0]["score"] == 0.5
    assert hits[0]["metadata"] == {"source": "a.pdf", "page": 3}
    assert hits[1]["id"] == "m2" and hits[1]["metadata"] == {"url": "https://x"}
    assert hits[0]["source"] == "retriever"


def test_top_k_is_passed_to_a_retriever_that_takes_k() -> None:
    retriever = vector_retriever(k=2)
    graph = build_graph("standard_rag", llm=scripted(default="x"), retriever=retriever, top_k=5)
    out, said = caught(lambda: graph.invoke({"question": "Which city is in Spain?"}))
    assert len(out["evidence"]) == 5 and not said
    assert retriever.search_kwargs == {"k": 2}  # type: ignore[attr-defined]  # the user's object is unchanged


def test_a_retriever_returning_fewer_than_top_k_is_said_once_per_run() -> None:
    adapter = as_retriever(Two())
    assert isinstance(adapter, LangChainRetrieverAdapter)
    run_a = RunRetriever(adapter, run="a")
    _, said = caught(lambda: [run_a.search("q", 5), run_a.search("other", 5)])
    assert len(said) == 1 and "top_k=5" in said[0] and "Two" in said[0]
    _, again = caught(lambda: RunRetriever(adapter, run="b").search("q", 5))
    assert len(again) == 1
    _, enough = caught(lambda: RunRetriever(adapter, run="c").search("q", 2))
    assert not enough


def test_an_explicit_retrieval_mode_is_said_once_a_default_is_not() -> None:
    graph = build_graph(
        "standard_rag", llm=scripted(default="x"), retriever=vector_retriever(5),
        retrieval_mode="bm25", top_k=2,
    )  # fmt: skip
    _, said = caught(lambda: graph.invoke({"question": "Spain?"}))
    assert len(said) == 1 and "retrieval_mode='bm25'" in said[0]
    quiet = build_graph("standard_rag", llm=scripted(default="x"), retriever=vector_retriever(5))
    _, nothing = caught(lambda: quiet.invoke({"question": "Spain?"}, context={"top_k": 2}))
    assert not nothing
    _, at_run_time = caught(
        lambda: quiet.invoke({"question": "Spain?"}, context={"retrieval_mode": "dense"})
    )
    assert len(at_run_time) == 1


def test_a_profile_value_is_not_explicit() -> None:
    profiled = with_defaults(
        PlainContext, {"retrieval_mode": "bm25"}, sources={"retrieval_mode": "profile m"}
    )
    assert explicit_value(profiled(), "retrieval_mode") is None
    assert explicit_value(profiled(retrieval_mode="dense"), "retrieval_mode") == "dense"
    built = with_defaults(PlainContext, {"retrieval_mode": "bm25"})
    assert explicit_value(built(), "retrieval_mode") == "bm25"


class Counting(BaseCallbackHandler):
    def __init__(self) -> None:
        self.starts: list[str] = []
        self.ends: list[list[str]] = []

    def on_retriever_start(self, serialized: Any, query: str, **kw: Any) -> None:
        self.starts.append(query)

    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kw: Any) -> None:
        self.ends.append([d.id for d in documents])


def test_store_searches_are_retriever_runs_in_the_callback_tree(store: Store) -> None:
    handler = Counting()
    graph = build_graph("standard_rag", llm=scripted(default="x"), retriever=store, top_k=2)
    out = graph.invoke({"question": "Who wrote Hamlet?"}, {"callbacks": [handler]})
    assert handler.starts == ["Who wrote Hamlet?"]
    assert handler.ends == [[e["id"] for e in out["evidence"]]]


def test_store_searches_are_retriever_runs_under_ainvoke(store: Store) -> None:
    handler = Counting()
    graph = build_graph("iterkey", llm=scripted(default="x"), retriever=store, max_iterations=2)
    out = asyncio.run(graph.ainvoke({"question": "Who wrote Hamlet?"}, {"callbacks": [handler]}))
    assert len(handler.starts) == len(handler.ends) == out["usage"]["retrieval_calls"] > 0


def test_a_langchain_retriever_is_one_retriever_run_per_search() -> None:
    handler = Counting()
    graph = build_graph("standard_rag", llm=scripted(default="x"), retriever=vector_retriever(2))
    graph.invoke({"question": "Spain?"}, {"callbacks": [handler]})
    assert len(handler.starts) == 1 and len(handler.ends[0]) == 5


@pytest.mark.parametrize("where", [{"source": "3.txt"}, {"source": ["3.txt", "4.txt"]}])
def test_a_filter_applies_to_a_langchain_retriever(where: dict[str, Any]) -> None:
    graph = build_graph("standard_rag", llm=scripted(default="x"), retriever=vector_retriever(2))
    out = graph.invoke({"question": "Spain?"}, context={"filter": where, "top_k": 6})
    allowed = where["source"] if isinstance(where["source"], list) else [where["source"]]
    assert {e["metadata"]["source"] for e in out["evidence"]} == set(allowed)
