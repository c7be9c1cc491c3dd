"""The R-Feedback Model's features: entity coverage S_f and question-pool relevance G_f.

* ``S_f`` (syntactic coverage, paper Eqs. 4 and 7): for each question entity k,
  ``min(C_kE / L_E, 1.0)`` where ``C_kE`` counts k's whole-word occurrences in the pool and
  ``L_E`` is the number of pool sentences; ``S_f`` is the mean over the entities.
* ``G_f`` (semantic relevance, Eq. 8): the paper uses an unnamed cross-encoder. We use an
  :class:`~gaprag.stores.embeddings.Embedder` (MiniLM from the store at run time, the hashing
  embedder in tests): the cosine of the question vector with the normalised mean of the pool's
  sentence vectors (a bi-encoder stand-in; see docs/methods/rfm_rag.md).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from gaprag.stores.embeddings import Embedder

Array = npt.NDArray[np.float64]
LengthUnit = Literal["sentences", "tokens"]
FEATURE_NAMES: tuple[str, str] = ("syntactic_coverage", "semantic_relevance")

_SENT_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9À-Ý])")
_PAREN = re.compile(r"\s*\([^)]*\)\s*")


def split_sentences(text: str) -> list[str]:
    """Sentences of a paragraph: split on sentence-final punctuation before a capital or digit."""
    out: list[str] = []
    for line in text.splitlines():
        out.extend(s.strip() for s in _SENT_SPLIT.split(line.strip()) if s.strip())
    return out


def normalise(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def strip_accents(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def entity_variants(entity: str) -> list[str]:
    """The full name, the name without a parenthetical qualifier, and accent-free forms."""
    base = normalise(entity).strip()
    variants = [base, _PAREN.sub(" ", base).strip()]
    variants += [strip_accents(v) for v in variants]
    out: list[str] = []
    for v in variants:
        v = " ".join(v.split())
        if v and v not in out:
            out.append(v)
    return out


def count_occurrences(entity: str, text: str) -> int:
    """Whole-word occurrences of ``entity`` in ``text``: the max over the entity's variants."""
    haystack = normalise(text)
    plain = strip_accents(haystack)
    best = 0
    for variant in entity_variants(entity):
        pattern = re.compile(r"(?<!\w)" + re.escape(variant) + r"(?!\w)")
        best = max(best, len(pattern.findall(haystack)), len(pattern.findall(plain)))
    return best


def pool_length(sentences: Sequence[str], unit: LengthUnit = "sentences") -> int:
    if unit == "tokens":
        return sum(len(s.split()) for s in sentences)
    return len([s for s in sentences if s.strip()])


def entity_coverage(entity: str, sentences: Sequence[str], unit: LengthUnit = "sentences") -> float:
    """``min(C_kE / L_E, 1.0)``; 0.0 for an empty pool."""
    length = pool_length(sentences, unit)
    if length == 0:
        return 0.0
    hits = count_occurrences(entity, "\n".join(sentences))
    return min(hits / length, 1.0)


def coverage_map(
    entities: Sequence[str], sentences: Sequence[str], unit: LengthUnit = "sentences"
) -> dict[str, float]:
    return {e: entity_coverage(e, sentences, unit) for e in entities}


def syntactic_coverage(coverages: dict[str, float]) -> float:
    """S_f: the mean of the per-entity coverages (0.0 with no entities)."""
    return float(np.mean(list(coverages.values()))) if coverages else 0.0


def relevance_from_vectors(question: npt.NDArray[Any], sentences: npt.NDArray[Any]) -> float:
    """Cosine of the question vector with the normalised centroid of the sentence vectors."""
    if sentences.shape[0] == 0:
        return 0.0
    centroid = sentences.mean(axis=0)
    norm = float(np.linalg.norm(centroid))
    qn = float(np.linalg.norm(question))
    if norm == 0.0 or qn == 0.0:
        return 0.0
    return float(centroid @ question / (norm * qn))


@dataclass
class Features:
    coverage: dict[str, float]
    syntactic_coverage: float  # S_f
    semantic_relevance: float  # G_f

    def vector(self) -> list[float]:
        return [self.syntactic_coverage, self.semantic_relevance]


class FeatureExtractor:
    """Computes (S_f, G_f) for a question and a pool of sentences with a given embedder."""

    def __init__(self, embedder: Embedder, unit: LengthUnit = "sentences") -> None:
        self.embedder = embedder
        self.unit: LengthUnit = unit

    def relevance(self, question: str, sentences: Sequence[str]) -> float:
        texts = [s for s in sentences if s.strip()]
        if not texts:
            return 0.0
        vecs = self.embedder.embed([question, *texts])
        return relevance_from_vectors(vecs[0], vecs[1:])

    def __call__(
        self, question: str, entities: Sequence[str], sentences: Sequence[str]
    ) -> Features:
        cov = coverage_map(entities, sentences, self.unit)
        return Features(cov, syntactic_coverage(cov), self.relevance(question, sentences))


class Pool(Protocol):
    """What the features are computed from: a question, its entities and the pool's sentences
    (a labelled training example is one)."""

    @property
    def question(self) -> str: ...
    @property
    def entities(self) -> Sequence[str]: ...
    @property
    def sentences(self) -> Sequence[str]: ...


def featurize(
    samples: Sequence[Pool],
    embedder: Embedder,
    *,
    unit: LengthUnit = "sentences",
    progress: bool = True,
    batch_size: int = 256,
) -> Array:
    """``[n, 2]`` features (S_f, G_f), embedding each distinct text once."""
    texts: dict[str, int] = {}
    for s in samples:
        for t in (s.question, *s.sentences):
            texts.setdefault(t, len(texts))
    ordered = list(texts)
    bar: Any = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(ordered) + len(samples), desc="rfm features", unit="item")
    chunks = []
    for start in range(0, len(ordered), batch_size):
        batch = ordered[start : start + batch_size]
        chunks.append(np.asarray(embedder.embed(batch), dtype=np.float64))
        if bar is not None:
            bar.update(len(batch))
    vectors = np.concatenate(chunks) if chunks else np.zeros((0, 1))
    out = np.zeros((len(samples), 2), dtype=np.float64)
    for i, s in enumerate(samples):
        s_f = syntactic_coverage(coverage_map(s.entities, s.sentences, unit))
        rows = [texts[t] for t in s.sentences]
        g_f = relevance_from_vectors(vectors[texts[s.question]], vectors[rows])
        out[i] = (s_f, g_f)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return out
