"""A Milvus store from the outside: ``gaprag index`` and ``gaprag ask --store milvus://...`` on
a folder of documents, copying a local store, the operator's allow-list of store addresses, and
the one-line errors for a server that is not there or a collection gaprag did not make (against
the session's Milvus server, ``milvus_server``)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gaprag import build_graph
from gaprag.cli import main
from gaprag.errors import InputError, StoreError
from gaprag.operator import OperatorPolicy, store_address
from gaprag.stores import HashingEmbedder, Store
from gaprag.stores.bm25 import BM25Settings
from gaprag.stores.milvus import MilvusStore, connection
from gaprag.testing import scripted
from tests.fake_openai import FakeOpenAI
from tests.integration.conftest import free_port

pytestmark = pytest.mark.integration


@pytest.fixture
def collection(milvus_server: str) -> Iterator[str]:
    """A new collection's address on the server, dropped afterwards."""
    from pymilvus import MilvusClient

    address = f"{milvus_server}/gaprag_test_{uuid.uuid4().hex[:10]}"
    yield address
    where = store_address(address)
    client = MilvusClient(**connection(where))
    client.drop_collection(where.collection)
    client.close()


def _folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    (docs / "travel").mkdir(parents=True)
    (docs / "travel" / "eiffel.md").write_text(
        "# Eiffel Tower\n\nThe Eiffel Tower in Paris was built by the engineer Gustave Eiffel "
        "and opened in 1889.\n"
    )
    (docs / "hamlet.txt").write_text("Hamlet is a tragedy written by William Shakespeare.\n")
    return docs


def test_index_then_ask_answers_with_sources_from_a_folder(
    tmp_path: Path,
    collection: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    docs = _folder(tmp_path)
    index = ["index", str(docs), "--store", collection, "--embedder", "hashing-64",
             "--bm25-language", "none"]  # fmt: skip
    assert main(index) == 0
    first = capsys.readouterr().out
    assert "indexed   " in first and "2 added, 0 updated, 0 deleted, 0 unchanged" in first
    assert main(index[:4]) == 0
    assert "is up to date (2 passages; 0 added, 0 updated, 0 deleted, 2 unchanged)" in (
        capsys.readouterr().out
    )
    (docs / "hamlet.txt").write_text("Hamlet is a tragedy by Shakespeare, written about 1600.\n")
    assert main(index[:4]) == 0
    assert "0 added, 1 updated, 0 deleted, 1 unchanged" in capsys.readouterr().out
    with FakeOpenAI(reply="Gustave Eiffel") as server:
        monkeypatch.setenv("GAPRAG_BASE_URL", server.base_url)
        ask = ["ask", "Who built the Eiffel Tower?", "--method", "iterkey", "--store", collection]
        assert main([*ask, "--json"]) == 0, capsys.readouterr().err
        out = json.loads(capsys.readouterr().out)
        assert main(ask) == 0
        shown = capsys.readouterr()
    assert out["answer"] == "Gustave Eiffel"
    sources = {e["metadata"]["source"] for e in out["evidence"]}
    assert "travel/eiffel.md" in sources
    assert out["settings"]["store"] == {"value": collection, "source": "explicit"}
    assert shown.out.startswith("Gustave Eiffel") and "travel/eiffel.md" in shown.err


def test_a_local_store_moves_to_milvus_without_embedding_again(
    tmp_path: Path, collection: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    from tests.integration.test_store_contract import DOCS

    local = Store.build(tmp_path / "local", DOCS, embedder=HashingEmbedder(),
                        bm25=BM25Settings(language="none"), progress=False)  # fmt: skip

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("a copied passage was embedded again")

    monkeypatch.setattr(HashingEmbedder, "embed", refuse)
    assert main(["index", "--from-store", str(tmp_path / "local"), "--store", collection]) == 0
    assert f"{len(DOCS)} added" in capsys.readouterr().out
    monkeypatch.undo()
    moved = MilvusStore.open(collection)
    assert moved.record["bm25_language"] == "none" and moved.embedder.name == "hashing-256"
    for doc in DOCS:
        assert moved.get(doc["id"]) == doc
    for query in ("annual leave", "Gustave Eiffel Paris"):  # the same vectors: the same cosines
        there, here = moved.search(query, 3, mode="dense"), local.search(query, 3, mode="dense")
        assert there[0]["id"] == here[0]["id"]
        assert [round(h["score"], 4) for h in there] == [round(h["score"], 4) for h in here]


def test_a_served_run_names_only_the_store_addresses_the_operator_allows(
    collection: str, milvus_server: str
) -> None:
    from tests.integration.test_store_contract import DOCS

    MilvusStore.index(collection, DOCS, embedder=HashingEmbedder(), language="none",
                      progress=False)  # fmt: skip
    question = {"question": "How many days of annual leave?"}
    closed = build_graph("standard_rag", llm=scripted(default="25 days"), policy=OperatorPolicy())
    with pytest.raises(InputError, match="not a store address the operator allows"):
        closed.invoke(question, context={"store": collection})
    with pytest.raises(InputError, match="not a store address the operator allows"):
        policy = OperatorPolicy(store_root=Path("/"))  # a store root admits paths only
        build_graph("standard_rag", llm=scripted(), policy=policy).invoke(
            question, context={"store": collection}
        )
    for entry in (milvus_server, collection):
        policy = OperatorPolicy(allowed_stores=(store_address(entry, collection=False),))
        graph = build_graph("standard_rag", llm=scripted(default="25 days"), policy=policy)
        out = graph.invoke(question, context={"store": collection})
        assert out["evidence"] and out["evidence"][0]["id"] in {d["id"] for d in DOCS}
    other = OperatorPolicy(allowed_stores=(store_address(f"{milvus_server}/another"),))
    with pytest.raises(InputError, match="not a store address the operator allows"):
        build_graph("standard_rag", llm=scripted(), policy=other).invoke(
            question, context={"store": collection}
        )
    built = build_graph("standard_rag", llm=scripted(default="25 days"), store=collection)
    assert built.invoke(question)["evidence"]  # the operator's own store: no allow-list needed


def test_a_server_that_is_not_there_is_one_line() -> None:
    start = time.monotonic()
    with pytest.raises(
        StoreError, match=r"cannot reach the Milvus server at milvus://127\.0\.0\.1"
    ):
        MilvusStore.open(f"milvus://127.0.0.1:{free_port()}/docs")
    assert time.monotonic() - start < 30


def test_a_collection_made_by_something_else_is_refused(collection: str) -> None:
    from pymilvus import MilvusClient

    where = store_address(collection)
    client = MilvusClient(**connection(where))
    client.create_collection(where.collection, dimension=4)
    client.close()
    with pytest.raises(StoreError, match="was not made by gaprag") as err:
        MilvusStore.open(collection)
    assert "retriever=" in err.value.hint
    with pytest.raises(StoreError, match="was not made by gaprag"):
        MilvusStore.index(collection, [{"id": "a", "title": "", "text": "x"}],
                          embedder=HashingEmbedder(), progress=False)  # fmt: skip


def test_a_store_with_another_embedder_or_analyzer_is_not_updated_with_them(
    collection: str,
) -> None:
    docs = [{"id": "a", "title": "A", "text": "alpha"}]
    MilvusStore.index(collection, docs, embedder=HashingEmbedder(), language="none", progress=False)
    with pytest.raises(StoreError, match="uses the embedder hashing-256, not hashing-8"):
        MilvusStore.index(collection, docs, embedder=HashingEmbedder(8), progress=False)
    with pytest.raises(StoreError, match="BM25 language none, not french"):
        MilvusStore.index(collection, docs, language="french", progress=False)


def test_milvus_analyzer_parameters_are_the_collections_own(collection: str) -> None:
    analyzer = {"tokenizer": "standard", "filter": ["lowercase"]}
    docs = [
        {"id": "a", "title": "A", "text": "Running fast"},
        {"id": "b", "title": "B", "text": "x"},
    ]
    store = MilvusStore.index(
        collection, docs, embedder=HashingEmbedder(), analyzer=analyzer, progress=False
    )
    assert store.record["analyzer"] == analyzer and store.record["bm25_language"] == "custom"
    assert [h["id"] for h in MilvusStore.open(collection).search("RUNNING", 2, mode="bm25")] == [
        "a"
    ]


def test_a_served_graph_answers_from_the_operators_milvus_store(
    tmp_path: Path, milvus_server: str
) -> None:
    """``langgraph dev`` with ``GAPRAG_STORE=milvus://...``: runs search it, a run names another
    collection only as ``GAPRAG_ALLOWED_STORES`` allows."""
    import httpx

    from tests.integration.conftest import serve

    names = [f"{milvus_server}/gaprag_test_{uuid.uuid4().hex[:10]}" for _ in range(3)]
    operators, allowed, refused = names
    for address, text in (
        (operators, "Annual leave is 25 days."),
        (allowed, "Laptops on day one."),
    ):
        MilvusStore.index(address, [{"id": address[-6:], "title": "T", "text": text}],
                          embedder=HashingEmbedder(), language="none", progress=False)  # fmt: skip
    env = {"GAPRAG_STORE": operators, "GAPRAG_ALLOWED_STORES": allowed}
    run = {"assistant_id": "standard_rag", "input": {"question": "How many days of leave?"}}
    try:
        with serve(tmp_path, env) as server, httpx.Client(base_url=server.url, timeout=120) as http:
            own = http.post("/runs/wait", json=run).json()
            other = http.post("/runs/wait", json={**run, "context": {"store": allowed}}).json()
            no = http.post("/runs/wait", json={**run, "context": {"store": refused}}).json()
    finally:
        from pymilvus import MilvusClient

        client = MilvusClient(**connection(store_address(operators)))
        for address in (operators, allowed):
            client.drop_collection(store_address(address).collection)
        client.close()
    assert [e["id"] for e in own["evidence"]] == [operators[-6:]]
    assert [e["id"] for e in other["evidence"]] == [allowed[-6:]]
    assert no["__error__"]["error"] == "InputError"
    assert "not a store address the operator allows" in no["__error__"]["message"]


def test_an_analyzer_the_server_refuses_is_one_line_and_leaves_no_collection(
    collection: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """English stemming on a server with only the standard analyzer (Milvus Lite): refused with
    the way out, nothing created; a Milvus server with the English analyzer indexes."""
    docs = [{"id": "a", "title": "A", "text": "Running fast"}]
    try:
        store = MilvusStore.index(collection, docs, embedder=HashingEmbedder(), progress=False)
    except StoreError as err:
        assert "refused the BM25 analyzer" in err.message and "--bm25-language none" in err.hint
        with pytest.raises(StoreError, match="no gaprag store"):
            MilvusStore.open(collection)
        assert "Traceback" not in capsys.readouterr().err  # the libraries' logs stay quiet
    else:
        assert [h["id"] for h in store.search("run", 1, mode="bm25")] == ["a"]  # stemmed


def test_a_corpus_is_written_and_updated_batch_by_batch(
    collection: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gaprag.stores import milvus
    from tests.integration.test_store_contract import DOCS

    monkeypatch.setattr(milvus, "BATCH", 2)  # 7 passages: a creating batch, then upserts
    store = MilvusStore.index(collection, DOCS, embedder=HashingEmbedder(), language="none",
                              progress=False)  # fmt: skip
    assert len(store) == len(DOCS) and all(store.get(d["id"]) == d for d in DOCS)
    changed = [{**d, "text": d["text"] + " Revised."} for d in DOCS[:5]]
    again = MilvusStore.index(collection, changed, cleanup="full", progress=False)
    assert again.update == {"num_added": 0, "num_updated": 5, "num_deleted": 2, "num_skipped": 0}
    assert sorted(d["id"] for d in changed) == sorted(
        h["id"] for h in again.search("revised", 10, mode="bm25")
    )
