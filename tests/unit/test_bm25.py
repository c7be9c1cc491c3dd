"""BM25 by bm25s's own tokenisation: stemming, stop words per language, settings, engines."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gaprag.errors import StoreError
from gaprag.stores import HashingEmbedder, Store
from gaprag.stores import bm25 as bm25_module
from gaprag.stores.bm25 import BM25Index, BM25Settings, _top_positive, languages, tokenize
from gaprag.stores.documents import Document

TEXTS = [
    "The runners were running through the cities of France",
    "A city council meets in Paris",
    "William Shakespeare wrote plays and poems",
    "Die Katzen schlafen im Garten",
    "Mount Everest is the highest mountain above sea level",
    "The violin has four strings tuned in fifths",
    "Photosynthesis turns light into chemical energy",
    "The Danube flows through ten countries",
]  # enough passages that Okapi's idf of a term in two of them is positive


def test_tokenize_stems_drops_stopwords_and_splits_cjk() -> None:
    assert tokenize("What is the capital of France?") == ["what", "capit", "franc"]
    assert tokenize("running cities") == tokenize("runs city")  # one stem each
    assert tokenize("多囊卵巢 PCOS女性") == ["多", "囊", "卵", "巢", "pcos", "女", "性"]
    assert tokenize("the of a", BM25Settings(language="none")) == ["the", "of"]  # 1-char dropped
    assert tokenize("running", BM25Settings(stemmer=False)) == ["running"]


def test_language_picks_stemmer_and_stop_words() -> None:
    german = BM25Settings(language="de")
    assert german.language == "german"
    assert tokenize("Die Katzen schlafen", german) == ["katz", "schlaf"]
    assert tokenize("Die Katzen schlafen") == ["die", "katzen", "schlafen"]  # English rules
    assert "english" in languages() and "none" in languages()


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"language": "klingon"}, "unknown BM25 language"),
        ({"engine": "lucene"}, "unknown BM25 engine"),
        ({"method": "okapi"}, "unknown BM25 method"),
        ({"b": 1.5}, "out of range"),
    ],
)
def test_bad_settings_are_refused_with_a_hint(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(StoreError) as err:
        BM25Settings(**kwargs)  # type: ignore[arg-type]
    assert needle in str(err.value) and err.value.hint


@pytest.mark.parametrize("engine", ["bm25s", "rank_bm25"])
def test_stemmed_query_matches_inflected_passage(engine: str, tmp_path: Path) -> None:
    index = BM25Index.build(TEXTS, BM25Settings(engine=engine))  # type: ignore[arg-type]
    hits = index.search("city run", 4)
    assert [r for r, _ in hits][:2] in ([0, 1], [1, 0])
    assert all(s > 0 for _, s in hits) and len(hits) == 2  # only passages sharing a term
    index.save(tmp_path)
    again = BM25Index.load(tmp_path, len(TEXTS))
    assert again.settings == index.settings
    assert again.search("city run", 4) == hits
    assert again.search("the of", 4) == []  # stop words only


def test_settings_are_stored_with_the_index(tmp_path: Path) -> None:
    s = BM25Settings(language="german", k1=1.2, b=0.5, method="bm25+")
    BM25Index.build(TEXTS, s).save(tmp_path)
    assert json.loads((tmp_path / "settings.json").read_text())["language"] == "german"
    loaded = BM25Index.load(tmp_path, len(TEXTS))
    assert loaded.settings == s
    assert loaded.search("Katze Garten", 1)[0][0] == 3


def test_k1_and_b_change_the_scores() -> None:
    plain = BM25Index.build(TEXTS).search("city", 2)
    flat = BM25Index.build(TEXTS, BM25Settings(b=0.0, k1=0.1)).search("city", 2)
    assert {r for r, _ in plain} == {r for r, _ in flat} == {0, 1}
    assert not np.allclose([s for _, s in plain], [s for _, s in flat])


def test_numpy_and_numba_paths_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1)
    words = [f"w{i}" for i in range(60)]
    texts = [" ".join(rng.choice(words, 12)) for _ in range(300)]
    index = BM25Index.build(texts)
    fast = index.search("w1 w2 w3 w40", 10)
    monkeypatch.setattr(index._model, "backend", "numpy")
    slow = index.search("w1 w2 w3 w40", 10)
    assert len(fast) == len(slow) == 10
    assert np.allclose([s for _, s in fast], [s for _, s in slow], rtol=1e-5)  # ties may swap
    scores = dict(slow)
    assert all(np.isclose(scores[r], s, rtol=1e-5) for r, s in fast if r in scores)


def test_top_positive_keeps_only_positive_scores_best_first() -> None:
    scores = np.zeros(1000, dtype=np.float32)
    scores[[5, 17, 900, 3]] = [0.5, 2.0, 1.0, 0.1]
    assert _top_positive(scores, 3) == [(17, 2.0), (900, 1.0), (5, 0.5)]
    assert [r for r, _ in _top_positive(scores, 10)] == [17, 900, 5, 3]
    assert _top_positive(np.zeros(4), 2) == []


def test_store_records_settings_and_old_format_is_rebuilt(
    tmp_path: Path, tiny_docs: list[Document]
) -> None:
    root = tmp_path / "s"
    store = Store.build(
        root, tiny_docs, bm25=BM25Settings(language="english", k1=1.2), bm25_engine="rank_bm25",
        embedder=HashingEmbedder(), progress=False,
    )  # fmt: skip
    assert store.manifest["bm25"]["k1"] == 1.2 and store.bm25.engine == "rank_bm25"
    assert Store.open(root).search("capitals", 1, mode="bm25")[0]["id"] in {"fr", "de"}
    manifest = store.version_dir / "manifest.json"
    manifest.write_text(json.dumps({**store.manifest, "format": 1}))  # as written by gaprag 0.1
    assert not Store.exists(root)  # so a cached store is rebuilt, not reopened
    with pytest.raises(StoreError) as err:
        Store.open(root)
    assert "format 1" in str(err.value) and "gaprag index" in err.value.hint


def test_numba_unavailable_falls_back_to_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bm25_module, "_numba_ready", False)
    index = BM25Index.build(TEXTS)
    assert index._model.backend == "numpy"
    assert index.search("Shakespeare poem", 1)[0][0] == 2


def _eval_texts(n: int) -> list[str]:
    """``n`` "title text" strings of the bundled evaluation paragraphs, plus texts with no term."""
    root = Path(__file__).resolve().parents[2] / "gaprag" / "data" / "eval"
    texts: list[str] = []
    for line in (root / "hotpotqa.dev.jsonl").open(encoding="utf-8"):
        texts += [f"{p['title']} {p['text']}" for p in json.loads(line)["paragraphs"]]
        if len(texts) >= n:
            break
    return [*texts[:n], "", "the of a", "多囊卵巢 women"]


@pytest.mark.parametrize(
    "settings", [BM25Settings(), BM25Settings(language="none"), BM25Settings(method="bm25+")]
)
def test_streamed_tokens_score_as_bm25s_tokenize(
    monkeypatch: pytest.MonkeyPatch, settings: BM25Settings
) -> None:
    """Tokenised a few texts at a time from a stream, one shared vocabulary: every passage's
    score for every query equals that of bm25s's one-shot ``bm25s.tokenize`` of all texts."""
    import bm25s

    texts = _eval_texts(300)
    monkeypatch.setattr(bm25_module, "TOKENIZE_CHUNK", 7)  # many chunks
    calls: list[int] = []
    tokenizer_cls = bm25s.tokenization.Tokenizer
    original = tokenizer_cls.tokenize

    def spy(self: object, chunk: list[str], *args: object, **kwargs: object) -> object:
        calls.append(len(chunk))
        return original(self, chunk, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(tokenizer_cls, "tokenize", spy)
    streamed = BM25Index.build(iter(texts), settings)
    assert max(calls) == 7 and sum(calls) == len(texts) and streamed.size == len(texts)
    reference = bm25s.BM25(k1=settings.k1, b=settings.b, method=settings.method)
    reference.index(
        bm25s.tokenize(
            texts,
            token_pattern=bm25_module.TOKEN_PATTERN,
            stopwords=settings.stopwords,  # type: ignore[arg-type]
            stemmer=bm25_module._stemmer(settings.stemmer_language),
            show_progress=False,
        ),
        show_progress=False,
    )
    model = streamed._model
    assert set(model.vocab_dict) == set(reference.vocab_dict)
    for query in ("Which genus has more species", "film director born", "多囊", "the"):
        terms = tokenize(query, settings)
        if not terms:  # "the" is an English stop word
            continue
        mine = model.get_scores([model.vocab_dict[t] for t in terms if t in model.vocab_dict])
        theirs = reference.get_scores([t for t in terms if t in reference.vocab_dict])
        assert np.array_equal(mine, theirs), query


@pytest.mark.parametrize("numba", [True, False])
def test_memory_mapped_store_answers_as_one_read_into_memory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, numba: bool
) -> None:
    """``Store.open`` memory-maps bm25s's score arrays by default; ``bm25_mmap=False`` reads
    them into memory. Both answer every query with the same ids and scores, on either backend,
    and an update of a store keeps the loading it was opened with."""
    if not numba:
        monkeypatch.setattr(bm25_module, "_numba_ready", False)
    texts = _eval_texts(300)[:300]
    docs: list[Document] = [{"id": f"p{i}", "title": "", "text": t} for i, t in enumerate(texts)]
    root = tmp_path / "s"
    Store.build(root, docs, embedder=HashingEmbedder(), progress=False).close()
    mapped, loaded = Store.open(root), Store.open(root, bm25_mmap=False)
    arrays = ("data", "indices", "indptr")
    assert all(isinstance(mapped.bm25._model.scores[a], np.memmap) for a in arrays)
    assert not any(isinstance(loaded.bm25._model.scores[a], np.memmap) for a in arrays)
    assert mapped.bm25._model.backend == ("numba" if numba else "numpy")
    for query in ("Scott Derrickson director", "American film", "Ed Wood 1994", "river city"):
        for mode in ("bm25", "hybrid"):
            got = mapped.search(query, 8, mode=mode)
            want = loaded.search(query, 8, mode=mode)
            assert got, query
            assert [(e["id"], e["score"]) for e in got] == [(e["id"], e["score"]) for e in want]
    more: list[Document] = [{"id": "new", "title": "", "text": "a new passage on glaciers"}]
    updated = loaded.add(more, progress=False)
    assert not isinstance(updated.bm25._model.scores["data"], np.memmap)
    assert updated.search("glaciers", 1, mode="bm25")[0]["id"] == "new"
    for store in (mapped, loaded, updated):
        store.close()


def test_memory_mapping_setting_is_checked_before_the_store_is_read(tmp_path: Path) -> None:
    with pytest.raises(StoreError) as err:
        Store.open(tmp_path / "no-store-here", bm25_mmap="yes")  # type: ignore[arg-type]
    assert "bm25_mmap must be True or False" in str(err.value) and err.value.hint
