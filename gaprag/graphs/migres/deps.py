"""MIGRES's injected objects: the knowledge filter's scorer and the fact verifier, beside the
common ones (:class:`gaprag.deps.Deps`).

``build_graph("migres", scorer=..., fact_verifier=...)`` or
``build_graph("migres", deps=MigresDeps(scorer=...))``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gaprag.deps import Deps
from gaprag.graphs.migres.context import Context
from gaprag.graphs.migres.filter import CrossEncoderScorer, EmbeddingScorer, Scorer
from gaprag.graphs.migres.verify import Verifier
from gaprag.stores.embeddings import default_embedder
from gaprag.stores.milvus import MilvusStore
from gaprag.stores.retriever import unwrap
from gaprag.stores.store import Store


@dataclass(kw_only=True)
class MigresDeps(Deps):
    """MIGRES's objects: every field of :class:`gaprag.deps.Deps` and its own."""

    scorer: Scorer | None = None
    """The knowledge filter's relevance scorer (e.g. a cross-encoder); default: a
    cross-encoder at the ``reranker`` setting, else cosine similarity of the store's
    embeddings."""
    fact_verifier: Verifier | None = None
    """The fact verifier (e.g. an NLI model); default: the ``verifier`` setting."""


def scorer_for(ctx: Context, deps: MigresDeps) -> Scorer:
    """The knowledge filter's scorer: injected, a cross-encoder at ``ctx.reranker``, or cosine
    similarity with the store's own embedder (the packaged one for other retrievers)."""
    if deps.scorer is not None:
        return deps.scorer
    if ctx.reranker:
        path = ctx.reranker
        return deps.cached(("migres.cross_encoder", path), lambda: CrossEncoderScorer(path))
    retriever = unwrap(deps.search(ctx))

    def make() -> Scorer:
        if isinstance(retriever, Store):
            return EmbeddingScorer(retriever.embedder, store=retriever)
        if isinstance(retriever, MilvusStore):
            return EmbeddingScorer(retriever.embedder)
        return EmbeddingScorer(default_embedder())

    return deps.cached(("migres.embedding_scorer", id(retriever)), make)


__all__ = ["MigresDeps", "scorer_for"]
