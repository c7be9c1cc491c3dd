"""Sparse retrieval: BM25 over the same document ids as the dense store.

Engines: ``bm25s`` (default; sparse-matrix scoring, sub-millisecond queries) and
``rank_bm25`` (the reference implementation the design card names). Both share one tokenizer.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any, Literal

import numpy as np

Engine = Literal["bm25s", "rank_bm25"]
ENGINES: tuple[Engine, ...] = ("bm25s", "rank_bm25")

_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "for",
        "if",
        "in",
        "into",
        "is",
        "it",
        "no",
        "not",
        "of",
        "on",
        "or",
        "such",
        "that",
        "the",
        "their",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "will",
        "with",
        "what",
        "which",
        "who",
        "whom",
        "when",
        "where",
        "why",
        "how",
        "did",
        "do",
        "does",
        "from",
        "has",
        "have",
        "had",
        "were",
        "been",
        "its",
    ]
)
_WORD = re.compile(r"\w+", re.UNICODE)


def tokenize(text: str) -> list[str]:
    tokens = [t for t in _WORD.findall(text.lower()) if t not in _STOP]
    # CJK text has no spaces: index single characters so Chinese corpora still match
    out: list[str] = []
    for t in tokens:
        if any("\u4e00" <= ch <= "\u9fff" for ch in t):
            out.extend(t)
        else:
            out.append(t)
    return out


class BM25Index:
    def __init__(self, engine: Engine, model: Any, size: int) -> None:
        self.engine = engine
        self._model = model
        self.size = size

    @classmethod
    def build(cls, texts: list[str], engine: Engine = "bm25s") -> BM25Index:
        corpus = [tokenize(t) for t in texts]
        if engine == "bm25s":
            import bm25s

            model: Any = bm25s.BM25()
            model.index(corpus, show_progress=False)
        elif engine == "rank_bm25":
            from rank_bm25 import BM25Okapi

            model = BM25Okapi([c or [""] for c in corpus])
        else:
            raise ValueError(f"unknown BM25 engine {engine!r}; use one of {ENGINES}")
        return cls(engine, model, len(texts))

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        if self.engine == "bm25s":
            self._model.save(str(directory), show_progress=False)
        else:
            with (directory / "rank_bm25.pkl").open("wb") as fh:
                pickle.dump(self._model, fh)

    @classmethod
    def load(cls, directory: Path, engine: Engine, size: int) -> BM25Index:
        if engine == "bm25s":
            import bm25s

            model: Any = bm25s.BM25.load(str(directory), show_progress=False)
        else:
            with (directory / "rank_bm25.pkl").open("rb") as fh:
                model = pickle.load(fh)  # our own file, written by save()
        return cls(engine, model, size)

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        """(row, score) pairs, best first, only rows with a positive score."""
        tokens = tokenize(query)
        if not tokens or self.size == 0 or k <= 0:
            return []
        k = min(k, self.size)
        if self.engine == "bm25s":
            rows, scores = self._model.retrieve([tokens], k=k, show_progress=False, n_threads=1)
            pairs = zip(rows[0].tolist(), scores[0].tolist(), strict=True)
        else:
            all_scores = np.asarray(self._model.get_scores(tokens))
            top = np.argsort(-all_scores)[:k]
            pairs = zip(top.tolist(), all_scores[top].tolist(), strict=True)
        return [(int(r), float(s)) for r, s in pairs if s > 0]
