"""The labelled document set (tests/docset.py): each fact is found, by a method run with a
scripted model, among the three passages it is shown, in a passage that holds it as people wrote it: a table row on one line, a
column in its own order, a page without its navigation and footer, a DOCX under its title."""

from __future__ import annotations

import pytest

from gaprag import build_graph
from gaprag.stores import HashingEmbedder, Store, load_corpus
from gaprag.testing import scripted
from tests.docset import FACTS, Fact, write_docset


@pytest.fixture(scope="module")
def docset_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    folder = write_docset(tmp_path_factory.mktemp("docset") / "team")
    corpus = load_corpus([folder])
    assert not corpus.skipped
    return Store.build(
        folder.parent / "store", corpus.documents, embedder=HashingEmbedder(), progress=False
    )


@pytest.mark.parametrize("fact", FACTS, ids=[f.question for f in FACTS])
def test_each_fact_is_retrieved_as_written(docset_store: Store, fact: Fact) -> None:
    graph = build_graph(
        "standard_rag", llm=scripted(default="found"), retriever=docset_store, top_k=3
    )
    out = graph.invoke({"question": fact.question})
    assert out["stop_reason"] == "answered"
    found = [e for e in out["evidence"] if e["metadata"]["source"] == fact.source]
    assert found, [e["id"] for e in out["evidence"]]  # among the passages the model is shown
    first = found[0]
    if fact.line:
        assert any(all(w in line for w in fact.line) for line in first["text"].splitlines())
    if fact.phrase:
        assert fact.phrase in " ".join(first["text"].split())
    for word in fact.absent:
        assert not any(word in d["text"] for d in docset_store.docs)


def test_titles_are_the_documents_own(docset_store: Store) -> None:
    titles = {d["metadata"]["source"]: d["title"] for d in docset_store.docs}
    assert titles["oncall.docx"] == "On-call handbook"
    assert titles["offices.pdf"] == "Office directory"
    assert titles["it/vpn.html"] == "VPN access"
    assert titles["benefits.pdf"] == "benefits"  # no title of its own: the file name
