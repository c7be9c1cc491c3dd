"""One record per retrieval: the retriever that ran a search records it once, and the node's
meter and an evaluation's per-question log both see that one record."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from gaprag.accounting import metered, retrieval_log
from gaprag.aio import run_sync
from gaprag.nodes import retrieve
from gaprag.state.base import Evidence
from gaprag.stores import HashingEmbedder, Store, as_retriever
from gaprag.stores.documents import Document
from gaprag.stores.store import RetrievalMode


class PlainRetriever:
    """A retriever of the user's own, which records nothing itself."""

    def __init__(self) -> None:
        self.seen_by = "plain"

    def search(
        self,
        query: str,
        k: int = 5,
        *,
        mode: RetrievalMode | None = None,
        exclude: Collection[str] = (),
    ) -> list[Evidence]:
        hits = [
            Evidence(id=i, title=i, text=f"{i} text", source="plain", score=1.0, round=0)
            for i in ("a", "b", "c")
            if i not in exclude
        ]
        return hits[:k]


def test_a_store_search_is_recorded_once_in_the_meter_and_the_log(
    tmp_path: Path, tiny_docs: list[Document]
) -> None:
    store = Store.build(tmp_path / "s", tiny_docs, embedder=HashingEmbedder(), progress=False)
    with metered() as meter, retrieval_log() as log:
        hits = run_sync(retrieve(store, ["Paris", "  ", "Berlin"], k=2, mode="bm25"))
    returned = [*log[0]["ids"], *log[1]["ids"]]
    assert meter.retrieval_calls == 2 and len(log) == 2  # the blank query is no search
    assert [entry["query"] for entry in log] == ["Paris", "Berlin"]
    assert all(entry["mode"] == "bm25" for entry in log)
    assert meter.retrieved == returned and {h["id"] for h in hits} <= set(returned)


def test_a_retriever_of_ones_own_is_recorded_by_its_adapter(tmp_path: Path) -> None:
    plain = PlainRetriever()
    adapted = as_retriever(plain)
    assert adapted is not plain and adapted.seen_by == "plain"  # type: ignore[attr-defined]
    with metered() as meter, retrieval_log() as log:
        run_sync(retrieve(adapted, ["q"], k=2, exclude={"a"}))
    assert meter.retrieval_calls == 1 and meter.retrieved == ["b", "c"]
    assert log == [{"query": "q", "mode": None, "ids": ["b", "c"]}]


def test_gaprags_own_retrievers_are_not_wrapped(tmp_path: Path, tiny_docs: list[Document]) -> None:
    store = Store.build(tmp_path / "s", tiny_docs, embedder=HashingEmbedder(), progress=False)
    assert as_retriever(store) is store
    adapted = as_retriever(PlainRetriever())
    assert as_retriever(adapted) is adapted
