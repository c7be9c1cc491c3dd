"""MIGRES's knowledge filter: passage-level then sentence-level relevance filtering.

The scorer is pluggable (:class:`Scorer`): anything that scores (query, passage) pairs, higher
meaning more relevant. Two ship with gaprag:

* :class:`EmbeddingScorer` (the default): cosine similarity of sentence embeddings, using the
  store's own embedder (the packaged MiniLM), so no extra model is needed. Scores are in
  [-1, 1]; the default threshold comes from ``benchmarks/calibrate_migres_filter.py``.
* :class:`CrossEncoderScorer`: a local ``sentence_transformers.CrossEncoder`` (the paper uses
  ``BAAI/bge-reranker-base``), scored as raw logits like the paper, so the paper's thresholds
  (multi-hop 3.0, ODQA 5.0, StrategyQA 0.0) apply to that model.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
from typing_extensions import TypedDict  # pydantic needs it for JSON schemas on 3.11

from gaprag.config import apply_torch_threads
from gaprag.graphs.migres.state import Snippet
from gaprag.state.base import Evidence, carry_metadata
from gaprag.stores.embeddings import Embedder, Vectors

# Default threshold delta of the embedding scorer (cosine similarity, packaged MiniLM).
# Calibrated with `nice -n 19 python benchmarks/calibrate_migres_filter.py --limit 40` on
# held-out questions (index 60 on of HotpotQA, 2Wiki and MuSiQue; 120 questions): round 1 of
# the graph simulated (BM25 top-50, this filter, the top-5 display); 0.37 is the largest delta
# that loses at most 5% of the gold the display cap alone shows (gold shown 0.67 against 0.70
# uncut; the former 0.47, chosen by F1 over each question's own paragraphs, showed 0.55), see
# benchmarks/results_migres_calibration.json and docs/methods/migres.md.
DEFAULT_EMBEDDING_DELTA = 0.37


class ScoreDoc(TypedDict):
    """A passage or sentence to score; ``id`` is the corpus id, or "" for a sentence."""

    id: str
    title: str
    text: str


@runtime_checkable
class Scorer(Protocol):
    """Relevance of each doc to ``query``; one float per doc, higher is more relevant."""

    name: str

    def score(self, query: str, docs: Sequence[ScoreDoc]) -> list[float]: ...


def _doc_text(doc: ScoreDoc) -> str:
    # the same text the store embeds for its dense index, so stored vectors can be reused
    return f"{doc['title']}: {doc['text']}"


class EmbeddingScorer:
    """Cosine similarity between query and doc embeddings, with a bounded vector cache.

    ``store`` (optional): a gaprag ``Store`` whose Chroma index already holds the passage
    vectors made by this same embedder; those are read instead of re-embedding passages.
    """

    def __init__(self, embedder: Embedder, *, store: Any = None, cache_size: int = 20000) -> None:
        self.embedder = embedder
        self.name = f"cosine:{embedder.name}"
        self.default_delta = DEFAULT_EMBEDDING_DELTA
        self._store = store
        self._cache: OrderedDict[str, Vectors] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def _from_store(self, docs: Sequence[ScoreDoc]) -> dict[str, Vectors]:
        store = self._store
        ids = [d["id"] for d in docs if d["id"]]
        if store is None or not ids:
            return {}
        try:
            if store.manifest.get("embedder") != self.embedder.name:
                return {}
            got = store.dense_index().collection.get(ids=ids, include=["embeddings"])
            by_id = {
                str(i): np.asarray(v, dtype=np.float32)
                for i, v in zip(got["ids"], got["embeddings"], strict=True)
            }
        except Exception:  # a remote or older index: embed instead
            return {}
        out: dict[str, Vectors] = {}
        for d in docs:
            vec, doc = by_id.get(d["id"]), store.get(d["id"])
            # only when the text is the stored one (the graph may have cleaned it)
            if (
                vec is not None
                and doc is not None
                and (doc["title"], doc["text"])
                == (
                    d["title"],
                    d["text"],
                )
            ):
                out[_doc_text(d)] = vec
        return out

    def _vectors(self, texts: list[str], docs: Sequence[ScoreDoc] = ()) -> Vectors:
        local: dict[str, Vectors] = {}
        with self._lock:
            for t in dict.fromkeys(texts):
                if t in self._cache:
                    self._cache.move_to_end(t)
                    local[t] = self._cache[t]
        missing = [t for t in dict.fromkeys(texts) if t not in local]
        if missing and docs:
            wanted = set(missing)
            local.update(self._from_store([d for d in docs if _doc_text(d) in wanted]))
            missing = [t for t in missing if t not in local]
        if missing:
            local.update(zip(missing, self.embedder.embed(missing), strict=True))
        with self._lock:
            for t in dict.fromkeys(texts):
                self._cache[t] = local[t]
                self._cache.move_to_end(t)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        if not texts:
            return np.zeros((0, self.embedder.dim), dtype=np.float32)
        return np.stack([local[t] for t in texts])

    def score(self, query: str, docs: Sequence[ScoreDoc]) -> list[float]:
        if not docs:
            return []
        q = self._vectors([query])[0]  # cached: the sentence filter asks again per passage
        vecs = self._vectors([_doc_text(d) for d in docs], docs)
        return [round(float(s), 6) for s in vecs @ q]


class CrossEncoderScorer:
    """A local ``sentence_transformers.CrossEncoder`` returning raw logits (no sigmoid)."""

    def __init__(self, path: str, *, max_length: int = 512, batch_size: int = 32) -> None:
        self.name = f"cross-encoder:{path}"
        self.path = path
        self.max_length = max_length
        self.batch_size = batch_size
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                import torch
                from sentence_transformers import CrossEncoder

                self._model = CrossEncoder(
                    self.path,
                    max_length=self.max_length,
                    activation_fn=torch.nn.Identity(),
                    local_files_only=True,
                )
            return self._model

    def score(self, query: str, docs: Sequence[ScoreDoc]) -> list[float]:
        if not docs:
            return []
        pairs = [(query, f"{d['title']} [SEP] {d['text']}") for d in docs]
        model = self._load()
        apply_torch_threads()
        scores = model.predict(pairs, batch_size=self.batch_size, show_progress_bar=False)
        return [round(float(s), 6) for s in np.asarray(scores).reshape(-1)]


# -- sentences -------------------------------------------------------------------------------
_ABBREV = re.compile(
    r"(?:\b(?:Mr|Mrs|Ms|Dr|Prof|St|Jr|Sr|Inc|Ltd|Co|Corp|vs|etc|No|Vol|Gen|Col|Lt|Sgt|Capt|"
    r"Rev|Hon|Mt|Ft|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)|\b[A-Z])\.$"
)
_SPLIT = re.compile(r"(?<=[.!?])[\"')\]]?\s+")


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``, with the repairs MIGRES applies to punkt's output.

    Splits after ``.``/``!``/``?`` followed by whitespace, re-joins pieces that end in a known
    abbreviation or an initial ("Dr.", "J."), and joins any piece that does not start with an
    uppercase letter (or a digit-free opening quote) onto the previous sentence ("e.g. ...").
    """
    pieces = [p.strip() for p in _SPLIT.split(text.strip()) if p.strip()]
    out: list[str] = []
    for piece in pieces:
        if out and (_ABBREV.search(out[-1]) or not piece[0].isupper()):
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
    return out


# -- the filter ------------------------------------------------------------------------------
def _key(ev: Evidence) -> str:
    return ev["text"]


def _best_scores(
    docs: Sequence[ScoreDoc], queries: Sequence[str], scorer: Scorer
) -> tuple[list[float], list[str]]:
    """Each doc's maximum score over ``queries``, and the query that gave it."""
    best = [float("-inf")] * len(docs)
    best_query = [""] * len(docs)
    for query in queries:
        for i, s in enumerate(scorer.score(query, docs)):
            if s > best[i]:
                best[i], best_query[i] = s, query
    return best, best_query


def _filter_sentences(
    cand: Evidence,
    query: str,
    passage_score: float,
    scorer: Scorer,
    *,
    delta: float,
    chosen: list[str],
) -> tuple[str, bool] | None:
    """The text to show for ``cand`` and whether it is the whole passage; None drops it.

    Sentences picked are appended (lower-cased) to ``chosen``.
    """
    low_query = query.lower()
    sentences = [s for s in split_sentences(cand["text"]) if s.lower() not in low_query]
    sent_docs = [ScoreDoc(id="", title=cand["title"], text=s) for s in sentences]
    scores = scorer.score(query, sent_docs)
    if not scores:
        return None
    if max(scores) < passage_score:
        return cand["text"], True
    picked = []
    for sentence, s in zip(sentences, scores, strict=True):
        low = sentence.lower()
        if s < delta or any(low in c or c in low for c in chosen):
            continue
        picked.append(sentence)
        chosen.append(low)
    if not picked:
        return None
    return " ".join(picked), False


def knowledge_filter(
    candidates: Sequence[Evidence],
    queries: Sequence[str],
    scorer: Scorer,
    *,
    delta: float,
    seen_counts: dict[str, int],
    sentence_filter: bool = True,
    max_shown: int = 2,
) -> tuple[list[Snippet], dict[str, Any]]:
    """Snippets that clear ``delta``, best first, and a small log for the trace.

    Passage level: each passage's score is the maximum over ``queries`` (the query that gave
    it is kept); a passage is kept if its score is at least ``delta`` and it was shown fewer
    than ``max_shown`` times. Sentence level: if no sentence of the passage beats the passage's
    own score, the whole passage is kept; otherwise every sentence scoring at least ``delta``
    (in original order, skipping repeats of sentences already chosen this round).
    """
    queries = [q for q in queries if q.strip()]
    docs = [ScoreDoc(id=c["id"], title=c["title"], text=c["text"]) for c in candidates]
    best, best_query = _best_scores(docs, queries, scorer)
    kept = [
        i
        for i in range(len(docs))
        if best[i] >= delta and seen_counts.get(_key(candidates[i]), 0) < max_shown
    ]
    kept.sort(key=lambda i: -best[i])
    snippets: list[Snippet] = []
    chosen: list[str] = []  # sentences chosen this round (lower-cased)
    whole = 0
    for i in kept:
        cand, query = candidates[i], best_query[i]
        text = cand["text"]
        if sentence_filter:
            shown = _filter_sentences(cand, query, best[i], scorer, delta=delta, chosen=chosen)
            if shown is None:
                continue
            text, is_whole = shown
            whole += is_whole
        snippets.append(
            carry_metadata(
                Snippet(
                    id=cand["id"],
                    title=cand["title"],
                    text=text,
                    origin_text=cand["text"],
                    score=best[i],
                    query=query,
                    source="corpus",
                ),
                cand,
            )
        )
    log = {
        "candidates": len(docs),
        "above_delta": sum(1 for s in best if s >= delta),
        "kept": len(snippets),
        "whole_passages": whole,
        "delta": delta,
        "scorer": scorer.name,
        "top_scores": sorted((round(s, 3) for s in best), reverse=True)[:5],
    }
    return snippets, log
