"""The store contract, the same tests for every back-end: a local store (bm25s + Chroma in a
folder) and a Milvus collection on a real Milvus server (``milvus_server``: Milvus Lite's
development server started for the session, or the one ``GAPRAG_TEST_MILVUS_URI`` names).

Both index with the hashing embedder and BM25 without stop words or stemming (bm25s's
``language="none"``, Milvus's standard analyzer), so the same passages come back for the same
questions. Scores are not compared: each engine has its own scale."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gaprag import build_graph
from gaprag.errors import InputError, StoreError
from gaprag.graphs import METHODS
from gaprag.operator import is_store_address, store_address
from gaprag.stores import HashingEmbedder, Store
from gaprag.stores.bm25 import BM25Settings
from gaprag.stores.documents import Document
from gaprag.stores.milvus import MilvusStore, connection
from gaprag.stores.opening import open_store
from gaprag.testing import scripted

pytestmark = pytest.mark.integration

HR = {"source": "hr/leave.md", "page": 2, "department": "hr"}
IT = {"source": "it/vpn.md", "page": 1, "department": "it"}
#: values that would change an expression if they were pasted into it
HOSTILE = [
    'hr" or meta["department"] != "x',
    "hr') or (1 == 1",
    'back\\slash" or true or "',
    "new\nline",
    "ünï©ødé ✓",
    '"]) or pk != ("',
]
ODD_ID = 'odd/it\'s "quoted" #1'

DOCS: list[Document] = [
    {"id": "hr1", "title": "Leave", "text": "Annual leave is 25 days for every employee.",
     "metadata": HR},
    {"id": "hr2", "title": "Sick leave", "text": "Sick leave needs a note after 3 days.",
     "metadata": {**HR, "page": 3}},
    {"id": "it1", "title": "Leave VPN", "text": "Leave the VPN on when you work remotely "
     "for more than 25 days.", "metadata": IT},
    {"id": "it2", "title": "Laptops", "text": "Every employee gets a laptop on day one.",
     "metadata": {**IT, "page": 4}},
    {"id": "plain", "title": "Old", "text": "An employee passage without metadata: leave."},
    {"id": "eiffel", "title": "Eiffel Tower", "text": "The Eiffel Tower in Paris was built by "
     "the engineer Gustave Eiffel.", "metadata": {"source": "paris.md", "department": "travel"}},
    {"id": ODD_ID, "title": "", "text": "A passage whose id and metadata hold quotes.",
     "metadata": {"source": "odd.md", "department": HOSTILE[0]}},
]  # fmt: skip


@dataclass
class Backend:
    """Where a test's stores go, and how it indexes into them."""

    name: str
    new: Callable[[], str]
    made: list[str] = field(default_factory=list)

    def address(self) -> str:
        made = self.new()
        self.made.append(made)
        return made

    def index(self, address: str, docs: list[Document], **options: Any) -> Any:
        """Index ``docs`` as ``gaprag index`` does (build, or update with ``options``)."""
        if is_store_address(address):
            return MilvusStore.index(
                address, docs, embedder=HashingEmbedder(), language="none", progress=False,
                **options,
            )  # fmt: skip
        return Store.index(
            address, docs, embedder=HashingEmbedder(), bm25=BM25Settings(language="none"),
            progress=False, **options,
        )  # fmt: skip

    def build(self, docs: list[Document] = DOCS) -> Any:
        return self.index(self.address(), docs)


def _drop(addresses: list[str]) -> None:
    from pymilvus import MilvusClient

    for address in addresses:
        where = store_address(address)
        client = MilvusClient(**connection(where))
        try:
            client.drop_collection(where.collection)
        finally:
            client.close()


@pytest.fixture(params=["local", "milvus"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "local":
        yield Backend("local", lambda: str(tmp_path / f"store-{uuid.uuid4().hex[:6]}"))
        return
    server = request.getfixturevalue("milvus_server")
    made = Backend("milvus", lambda: f"{server}/gaprag_test_{uuid.uuid4().hex[:10]}")
    yield made
    _drop(made.made)


def _ids(hits: list[Any]) -> list[str]:
    return [h["id"] for h in hits]


# -- ids, passages and metadata ----------------------------------------------------------------
def test_passages_keep_their_ids_titles_texts_and_metadata(backend: Backend) -> None:
    store = backend.build()
    assert len(store) == len(DOCS)
    for doc in DOCS:
        assert store.get(doc["id"]) == doc
    assert store.get("missing") is None
    assert store.metadata_keys() == {"source", "page", "department"}


def test_a_reopened_store_searches_the_same(backend: Backend) -> None:
    store = backend.build()
    again = open_store(str(store.address if backend.name == "milvus" else store.root))
    for mode in ("bm25", "dense", "hybrid"):
        assert _ids(again.search("annual leave days", 3, mode=mode)) == _ids(
            store.search("annual leave days", 3, mode=mode)
        )


# -- the three modes, top_k, exclusion ------------------------------------------------------------
@pytest.mark.parametrize("mode", ["bm25", "dense", "hybrid"])
def test_each_mode_finds_the_passage_with_the_words_asked(backend: Backend, mode: Any) -> None:
    store = backend.build()
    hits = store.search("Gustave Eiffel built the Eiffel Tower in Paris", 3, mode=mode)
    assert hits[0]["id"] == "eiffel"
    assert (len(hits) == 3 or mode == "bm25") and {h["source"] for h in hits} == {mode}
    assert hits[0]["title"] == "Eiffel Tower" and hits[0]["metadata"]["source"] == "paris.md"
    assert all(isinstance(h["score"], float) for h in hits)


@pytest.mark.parametrize("mode", ["bm25", "dense", "hybrid"])
def test_top_k_and_exclusion_hold_in_every_mode(backend: Backend, mode: Any) -> None:
    store = backend.build()
    first = store.search("leave days employee", 2, mode=mode)
    assert len(first) == 2
    rest = store.search("leave days employee", 2, mode=mode, exclude=_ids(first))
    assert len(rest) == 2 and not set(_ids(rest)) & set(_ids(first))
    assert store.search("leave", 0, mode=mode) == []


def test_the_same_passages_come_first_on_both_back_ends(milvus_server: str, tmp_path: Path) -> None:
    made = Backend("milvus", lambda: f"{milvus_server}/gaprag_test_{uuid.uuid4().hex[:10]}")
    try:
        milvus = made.build()
        local = Backend("local", lambda: str(tmp_path / "local")).build()
        for query in ("Gustave Eiffel tower Paris", "sick leave note", "laptop day one"):
            for mode in ("bm25", "dense", "hybrid"):
                assert (
                    milvus.search(query, 1, mode=mode)[0]["id"]
                    == local.search(query, 1, mode=mode)[0]["id"]
                ), (query, mode)
    finally:
        _drop(made.made)


# -- filters --------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["bm25", "dense", "hybrid"])
def test_a_filter_keeps_only_matching_passages(backend: Backend, mode: Any) -> None:
    store = backend.build()
    hits = store.search("leave days", 5, mode=mode, filter={"department": "hr"})
    assert sorted(_ids(hits)) == ["hr1", "hr2"]
    both = store.search("leave", 10, mode=mode, filter={"department": ["hr", "it"], "page": 3})
    assert _ids(both) == ["hr2"]
    assert store.search("leave", 5, mode=mode, filter={"department": "legal"}) == []


def test_counting_matches_follows_the_filter(backend: Backend) -> None:
    store = backend.build()
    assert store.count_matching({"department": "hr"}) == 2
    assert store.count_matching({"department": ["hr", "it"]}) == 4
    assert store.count_matching({"page": 4, "source": "it/vpn.md"}) == 1
    assert store.count_matching({"department": "nobody"}) == 0


@pytest.mark.parametrize("value", HOSTILE)
def test_a_filter_value_never_changes_the_expression(backend: Backend, value: str) -> None:
    store = backend.build()
    expected = ['odd/it\'s "quoted" #1'] if value == HOSTILE[0] else []
    for mode in ("bm25", "dense", "hybrid"):
        hits = store.search("passage quotes leave", 10, mode=mode, filter={"department": value})
        assert _ids(hits) == expected, mode
    assert store.count_matching({"department": value}) == len(expected)


def test_an_id_with_quotes_is_excluded_and_deleted_by_its_value(backend: Backend) -> None:
    store = backend.build()
    hits = store.search("passage quotes", 10, mode="bm25", exclude=[ODD_ID, 'x") or ("'])
    assert ODD_ID not in _ids(hits) and hits
    store = store.delete([ODD_ID], progress=False)
    assert store.get(ODD_ID) is None and len(store) == len(DOCS) - 1


def test_an_unknown_filter_key_is_refused_with_the_stores_keys(backend: Backend) -> None:
    store = backend.build()
    graph = build_graph("iterkey", llm=scripted(default="x"), retriever=store)
    with pytest.raises(InputError, match=r"metadata key\(s\) color") as err:
        graph.invoke({"question": "q?"}, context={"filter": {"color": "teal"}})
    assert err.value.hint == "filter on the keys the store has: department, page, source"


def test_a_filter_matching_nothing_stops_before_the_model(backend: Backend) -> None:
    store = backend.build()
    graph = build_graph("standard_rag", llm=scripted(default="x"), retriever=store)
    out = graph.invoke({"question": "q?"}, context={"filter": {"department": "legal"}})
    assert out["stop_reason"] == "no_matching_passages" and out["usage"]["llm_calls"] == 0


# -- incremental updates -----------------------------------------------------------------------
def _v2() -> list[Document]:
    """hr/leave.md read again: hr1 changed, hr2 gone, hr3 new; it/vpn.md and the rest not read."""
    return [
        {"id": "hr1", "title": "Leave", "text": "Annual leave is 30 days for every employee.",
         "metadata": HR},
        {"id": "hr3", "title": "Parental leave", "text": "Parental leave is 16 weeks.",
         "metadata": {**HR, "page": 5}},
    ]  # fmt: skip


def test_an_update_adds_changes_keeps_and_removes_by_id_and_hash(backend: Backend) -> None:
    address = backend.address()
    backend.index(address, DOCS)
    store = backend.index(address, _v2(), sources=["hr/leave.md"])
    assert store.update == {"num_added": 1, "num_updated": 1, "num_deleted": 1, "num_skipped": 0}
    assert store.touched == {"hr/leave.md"}
    assert store.get("hr2") is None and store.get("it1") == DOCS[2]
    assert store.get("hr1")["text"] == "Annual leave is 30 days for every employee."
    assert len(store) == len(DOCS)
    hits = store.search("annual leave 30 days", 1, mode="bm25", filter={"department": "hr"})
    assert _ids(hits) == ["hr1"] and "30 days" in hits[0]["text"]
    again = backend.index(address, _v2(), sources=["hr/leave.md"])
    assert again.update == {"num_added": 0, "num_updated": 0, "num_deleted": 0, "num_skipped": 2}


def test_cleanup_none_removes_nothing_and_full_keeps_only_what_is_indexed(
    backend: Backend,
) -> None:
    address = backend.address()
    backend.index(address, DOCS)
    kept = backend.index(address, _v2(), cleanup="none")
    assert kept.update["num_deleted"] == 0 and len(kept) == len(DOCS) + 1
    full = backend.index(address, _v2(), cleanup="full")
    assert full.update["num_deleted"] == len(DOCS) - 1 and len(full) == 2  # hr1 is indexed


def test_a_file_that_could_not_be_read_keeps_its_passages(backend: Backend) -> None:
    address = backend.address()
    backend.index(address, DOCS)
    store = backend.index(address, _v2(), cleanup="full", keep=["it/vpn.md"])
    assert store.get("it1") == DOCS[2] and store.get("it2") == DOCS[3]


def test_refusals_leave_the_store_as_it_was(backend: Backend) -> None:
    address = backend.address()
    store = backend.index(address, DOCS)
    with pytest.raises(StoreError, match="no document with id nope"):
        store.delete(["hr1", "nope"], progress=False)
    with pytest.raises(StoreError, match="leave the store empty"):
        store.delete([d["id"] for d in DOCS], progress=False)
    with pytest.raises(StoreError, match="not unique"):
        backend.index(address, [DOCS[0], DOCS[0]])
    with pytest.raises(StoreError, match="unknown retrieval mode"):
        store.search("leave", 2, mode="sparse")
    assert len(open_store(address)) == len(DOCS)


# -- every method on the store -----------------------------------------------------------------
@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_answers_with_the_stores_passages(backend: Backend, method: str) -> None:
    store = backend.build()
    out = build_graph(method, llm=scripted(default="25 days"), retriever=store).invoke(
        {"question": "How many days of annual leave?"}
    )
    assert out["answer"] and out["stop_reason"]
    assert out["retrieved_ids"] and all(store.get(i) for i in set(out["retrieved_ids"]))
    sources = {d.get("metadata", {}).get("source") for d in DOCS}
    for hit in out["evidence"]:
        doc = store.get(hit["id"])
        if doc is None:  # a fact MIGRES or RFM-RAG wrote from passages: their metadata
            assert (
                method in ("migres", "rfm_rag") and hit.get("metadata", {}).get("source") in sources
            )
            continue
        assert hit.get("metadata") == doc.get("metadata") and hit["text"] in doc["text"]
