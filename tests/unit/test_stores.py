"""Stores: round trips, shared ids, atomic rebuild, reopen without re-embedding, loaders."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from langchain_core.documents import Document as LCDocument
from langchain_core.retrievers import BaseRetriever

from gaprag.accounting import metered
from gaprag.errors import InputError, StoreError
from gaprag.stores import GapragRetriever, HashingEmbedder, Store, as_retriever, load_documents
from gaprag.stores.bm25 import BM25Index
from gaprag.stores.documents import Document
from gaprag.stores.embeddings import Vectors
from gaprag.stores.hybrid import rrf


class CountingEmbedder(HashingEmbedder):
    def __init__(self) -> None:
        super().__init__(256)
        self.name = "hashing-256"
        self.texts = 0

    def embed(
        self, texts: Sequence[str], *, batch_size: int = 64, progress: bool = False
    ) -> Vectors:
        self.texts += len(texts)
        return super().embed(texts)


@pytest.mark.parametrize("mode", ["bm25", "dense", "hybrid"])
def test_search_finds_the_right_passage(store: Store, mode: str) -> None:
    hits = store.search("Who wrote the tragedy Hamlet?", 2, mode=mode)  # type: ignore[arg-type]
    assert hits[0]["id"] == "hamlet"
    assert all(h["source"] == mode for h in hits)


def test_bm25_and_dense_share_ids(store: Store, tiny_docs: list[Document]) -> None:
    ids = {d["id"] for d in tiny_docs}
    sparse = {h["id"] for h in store.search("capital city", 5, mode="bm25")}
    dense = {h["id"] for h in store.search("capital city", 5, mode="dense")}
    assert sparse <= ids and dense <= ids and sparse & dense


def test_exclude_skips_seen_passages(store: Store) -> None:
    hits = store.search("capital largest city tower", 2, mode="bm25", exclude={"fr"})
    assert "fr" not in {h["id"] for h in hits} and len(hits) == 2
    # BM25 returns only passages sharing a term with the query, never zero-score filler
    assert [h["id"] for h in store.search("capital largest city", 5, mode="bm25")] in (
        ["fr", "de"],
        ["de", "fr"],
    )


def test_retrieval_is_counted(store: Store) -> None:
    with metered() as meter:
        store.search("Paris", 1, mode="bm25")
        store.search("Paris", 1, mode="hybrid")
    assert meter.retrieval_calls == 2


def test_reopen_does_not_re_embed(tmp_path: Path, tiny_docs: list[Document]) -> None:
    emb = CountingEmbedder()
    Store.build(tmp_path / "s", tiny_docs, embedder=emb, progress=False)
    assert emb.texts == len(tiny_docs)
    emb2 = CountingEmbedder()
    reopened = Store.open(tmp_path / "s", embedder=emb2)
    assert len(reopened) == len(tiny_docs)
    assert reopened.search("Eiffel", 1, mode="dense")[0]["id"] == "eiffel"
    assert emb2.texts == 1  # only the query


def test_rebuild_swaps_atomically_and_prunes_versions_no_reader_holds(
    tmp_path: Path, tiny_docs: list[Document]
) -> None:
    root = tmp_path / "s"
    first = Store.build(root, tiny_docs[:2], embedder=HashingEmbedder(), progress=False)
    second = Store.build(root, tiny_docs, embedder=HashingEmbedder(), progress=False)
    assert first.version_dir != second.version_dir
    assert len(Store.open(root)) == len(tiny_docs)
    # the first store is still open: its version stays, and it still answers
    assert first.version_dir.is_dir()
    assert first.search("Paris", 1, mode="hybrid")[0]["id"] == "fr"
    first.close()
    third = Store.build(root, tiny_docs[:3], embedder=HashingEmbedder(), progress=False)
    # the released first version is gone; the second, still open, stays
    held = sorted([second.version_dir.name, third.version_dir.name])
    assert sorted(p.name for p in root.glob("v-*")) == held


def test_interrupted_build_leaves_previous_index(tmp_path: Path, tiny_docs: list[Document]) -> None:
    root = tmp_path / "s"
    Store.build(root, tiny_docs[:2], embedder=HashingEmbedder(), progress=False)

    class Boom(HashingEmbedder):
        def embed(
            self, texts: Sequence[str], *, batch_size: int = 64, progress: bool = False
        ) -> Vectors:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Store.build(root, tiny_docs, embedder=Boom(), progress=False)
    again = Store.open(root)
    assert len(again) == 2 and again.search("Paris", 1, mode="bm25")[0]["id"] == "fr"
    assert not list(root.glob(".building-*"))


def test_missing_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError) as err:
        Store.open(tmp_path / "nope")
    assert "gaprag index" in err.value.hint


def test_duplicate_ids_refused(tmp_path: Path, tiny_docs: list[Document]) -> None:
    with pytest.raises(StoreError):
        Store.build(
            tmp_path / "s", [tiny_docs[0], tiny_docs[0]], embedder=HashingEmbedder(), progress=False
        )


@pytest.mark.parametrize("engine", ["bm25s", "rank_bm25"])
def test_bm25_engines_agree_and_round_trip(
    tmp_path: Path, engine: str, tiny_docs: list[Document]
) -> None:
    texts = [f"{d['title']} {d['text']}" for d in tiny_docs]
    index = BM25Index.build(texts, engine)  # type: ignore[arg-type]
    index.save(tmp_path / engine)
    loaded = BM25Index.load(tmp_path / engine, len(texts))
    assert loaded.engine == engine
    top = loaded.search("Shakespeare playwright", 2)
    assert top and texts[top[0][0]].startswith("William Shakespeare")
    assert loaded.search("zzzz unknownword", 3) == []


def test_rrf_orders_by_fused_rank() -> None:
    fused = rrf([["a", "b", "c"], ["b", "a", "d"]])
    assert [i for i, _ in fused][:2] in (["a", "b"], ["b", "a"])
    assert fused[-1][0] in {"c", "d"}
    assert np.isclose(fused[0][1], 1 / 61 + 1 / 62)


def test_loaders(tmp_path: Path) -> None:
    passages = tmp_path / "p.jsonl"
    passages.write_text('{"id": "a", "title": "T", "text": "alpha"}\n\n{"text": "beta"}\n')
    dataset = tmp_path / "d.jsonl"
    rec = {
        "id": "q1",
        "question": "?",
        "paragraphs": [
            {"id": "a", "title": "T", "text": "alpha"},
            {"id": "c", "title": "", "text": "gamma"},
        ],
    }
    dataset.write_text(json.dumps(rec) + "\n")
    folder = tmp_path / "txt"
    folder.mkdir()
    (folder / "doc.md").write_text(" ".join(f"w{i}" for i in range(250)))
    docs = load_documents([passages, dataset, folder], chunk_size=100, overlap=20)
    ids = [d["id"] for d in docs]
    assert ids[:2] == ["a", ids[1]] and ids[1].startswith("d_")  # content-hash id when none given
    assert "c" in ids and ids.count("a") == 1
    assert [i for i in ids if i.startswith("doc.md#")] == ["doc.md#0", "doc.md#1", "doc.md#2"]


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ('{"id": "a", "text": "x"}\n{oops}\n', "b.jsonl:2: not valid JSON"),
        ('{"id": "a", "title": "t"}\n', "b.jsonl:1: field 'text' is missing"),
        ("[1, 2]\n", "b.jsonl:1: expected a JSON object"),
        (
            '{"question": "q", "paragraphs": [{"title": "t"}]}\n',
            "b.jsonl:1: paragraphs[0]: field 'text'",
        ),
    ],
)
def test_malformed_jsonl_names_the_line(tmp_path: Path, content: str, needle: str) -> None:
    bad = tmp_path / "b.jsonl"
    bad.write_text(content)
    with pytest.raises(InputError) as err:
        load_documents([bad])
    assert needle in str(err.value)


def test_langchain_adapters(store: Store) -> None:
    lc = GapragRetriever(store=store, k=2, mode="bm25")
    docs = lc.invoke("Eiffel Tower")
    assert docs[0].metadata["id"] == "eiffel"

    class Fixed(BaseRetriever):
        def _get_relevant_documents(self, query: str, *, run_manager: object) -> list[LCDocument]:  # type: ignore[override]
            return [
                LCDocument(page_content="one", metadata={"id": "x1"}),
                LCDocument(page_content="two"),
            ]

    adapted = as_retriever(Fixed())
    with pytest.warns(UserWarning, match="top_k=5 but the LangChain retriever Fixed returned 2"):
        hits = adapted.search("anything", 5)
    assert next(h["id"] for h in hits) == "x1" and hits[1]["id"].startswith("d_")
    assert adapted.search("anything", 5, exclude={"x1"})[0]["text"] == "two"
    assert as_retriever(store) is store


def test_cached_embedder_uses_cache_and_falls_back() -> None:
    from gaprag.stores.embeddings import CachedEmbedder

    base = CountingEmbedder()
    vec = np.ones(256, dtype=np.float32) / 16
    emb = CachedEmbedder(base, {"known": vec})
    out = emb.embed(["known", "unknown text"])
    assert np.allclose(out[0], vec) and base.texts == 1  # only the miss was embedded
    assert np.allclose(out[1], HashingEmbedder().embed(["unknown text"])[0])


def test_shipped_demo_vectors_cover_the_demo_corpus() -> None:
    from gaprag.stores.demo import demo_corpus_path, demo_vectors_path
    from gaprag.stores.documents import load_jsonl

    data = np.load(demo_vectors_path())
    ids = [d["id"] for d in load_jsonl(demo_corpus_path())]
    assert [str(i) for i in data["ids"]] == ids
    vectors = data["vectors"].astype(np.float32)
    assert vectors.shape == (len(ids), 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-2)


def test_demo_corpus_store_uses_the_shipped_vectors(monkeypatch: pytest.MonkeyPatch) -> None:
    from gaprag.stores import demo
    from gaprag.stores.documents import load_jsonl

    counting = CountingEmbedder()
    counting.dim = 384
    monkeypatch.setattr(demo, "default_embedder", lambda: counting)
    docs = load_jsonl(demo.demo_corpus_path())[:40]
    store = demo.store_for(docs, "demo-test", progress=False)
    assert counting.texts == 0  # every passage vector came from the shipped file
    assert len(store) == 40 and store.manifest["dim"] == 384  # MiniLM-sized shipped vectors


def test_store_embeds_a_few_texts_at_a_time_into_the_same_vectors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write path hands the embedder :data:`ENCODE_CHUNK` texts at a time (no list of
    every text), and Chroma gets the vectors of embedding them all at once, in order and in
    its batches."""
    from gaprag.stores import store as store_module
    from gaprag.stores.dense import DenseIndex

    docs = [
        Document(id=f"p{i}", title=f"T{i % 3}", text=f"passage {i} about topic {i % 5}")
        for i in range(23)
    ]
    monkeypatch.setattr(store_module, "ENCODE_CHUNK", 5)
    monkeypatch.setattr(store_module, "BATCH", 7)
    sizes: list[int] = []
    written: list[tuple[list[str], Vectors]] = []

    class Spy(CountingEmbedder):
        def embed(
            self, texts: Sequence[str], *, batch_size: int = 64, progress: bool = False
        ) -> Vectors:
            sizes.append(len(texts))
            return super().embed(texts)

    def add(self: DenseIndex, ids: Sequence[str], vectors: Vectors, metadatas: object) -> None:
        if ids:
            written.append((list(ids), vectors.copy()))
        original(self, ids, vectors, metadatas)  # type: ignore[arg-type]

    original = DenseIndex.add
    monkeypatch.setattr(DenseIndex, "add", add)
    built = Store.build(tmp_path / "s", docs, embedder=Spy(), progress=False)
    assert sizes == [5, 5, 5, 5, 3]
    whole = HashingEmbedder(256).embed([f"{d['title']}: {d['text']}" for d in docs])
    assert [len(ids) for ids, _ in written] == [7, 7, 7, 2]
    assert [i for ids, _ in written for i in ids] == [d["id"] for d in docs]
    assert np.array_equal(np.concatenate([v for _, v in written]), whole)
    written.clear()
    # an update embeds only the changed text, and writes only its vector
    sizes.clear()
    changed = [*docs[:7], Document(id="p7", title="T1", text="a new text"), *docs[8:]]
    built.add(changed, progress=False)
    assert sizes == [1]
    assert [ids for ids, _ in written] == [["p7"]]
    assert np.array_equal(written[0][1], HashingEmbedder(256).embed(["T1: a new text"]))
    # a new passage with a text the store has keeps that text's stored vector, unembedded
    sizes.clear()
    written.clear()
    twin = Document(id="p99", title=docs[3]["title"], text=docs[3]["text"])
    after = built.add([twin], progress=False)
    assert sizes == [] and [ids for ids, _ in written] == [["p99"]]
    assert np.array_equal(written[0][1][0], after.vectors(["p3"])["p3"])


def test_built_store_holds_its_passages_as_read_back_and_apart_from_the_input(
    tmp_path: Path,
) -> None:
    """The new version's passages are the given ones (not read again when they read back
    from docs.jsonl as they are) but their own: changing the input later changes nothing;
    metadata JSON changes (a tuple) is as a reopened store has it."""
    docs = [
        Document(id="a", title="A", text="alpha text", metadata={"source": "a.txt", "page": 1}),
        Document(id="b", title="B", text="beta text", metadata={"tags": ("x", "y")}),
    ]
    built = Store.build(tmp_path / "s", docs[:1], embedder=HashingEmbedder(), progress=False)
    docs[0]["metadata"]["page"] = 2
    docs[0]["text"] = "changed"
    assert built.docs == Store.open(tmp_path / "s").docs
    assert built.get("a") == {
        "id": "a", "title": "A", "text": "alpha text", "metadata": {"source": "a.txt", "page": 1}
    }  # fmt: skip
    again = Store.build(tmp_path / "s", docs, embedder=HashingEmbedder(), progress=False)
    assert again.docs == Store.open(tmp_path / "s").docs
    assert again.get("b")["metadata"]["tags"] == ["x", "y"]  # type: ignore[index]
