"""rfm_rag's sufficiency judges: which one a run uses, and the optional LLM judge.

The R-Feedback MLP (the paper's judge) and the rule judges live in
:mod:`gaprag.graphs.rfm_rag.feedback_model.model`; an injected ``RfmRagDeps.sufficiency_model``
replaces them all.
"""

from __future__ import annotations

from gaprag.graphs.rfm_rag.context import Context
from gaprag.graphs.rfm_rag.deps import RfmRagDeps
from gaprag.graphs.rfm_rag.feedback_model.features import FeatureExtractor
from gaprag.graphs.rfm_rag.feedback_model.model import (
    FeedbackResult,
    FixedJudge,
    HeuristicJudge,
    MLPJudge,
    RelevanceJudge,
    RFeedbackMLP,
    SufficiencyJudge,
    expected_embedder,
    shipped_weights_path,
)
from gaprag.stores.embeddings import Embedder, embedder_by_name


def _feature_extractor(ctx: Context, deps: RfmRagDeps, name: str) -> FeatureExtractor:
    """Features with embedder ``name`` (the store's own embedder when it is that one, so a
    loaded MiniLM is shared)."""
    store_embedder = getattr(deps.search(ctx), "embedder", None)
    embedder: Embedder = (
        store_embedder
        if store_embedder is not None and getattr(store_embedder, "name", "") == name
        else embedder_by_name(name)
    )
    return FeatureExtractor(embedder, ctx.coverage_length_unit)


def _weights(ctx: Context) -> tuple[str, str]:
    """The R-Feedback weights' path and the embedder they were trained with."""
    path = ctx.rf_weights or str(shipped_weights_path())
    return path, expected_embedder(path)


def mlp_judge(ctx: Context, deps: RfmRagDeps) -> SufficiencyJudge:
    """The R-Feedback MLP with the embedder its weights were trained with, built once per
    settings."""
    path, name = _weights(ctx)

    def make() -> SufficiencyJudge:
        extractor = _feature_extractor(ctx, deps, name)
        model = RFeedbackMLP.load(path, expect_embedder=extractor.embedder.name)
        return MLPJudge(model, extractor, threshold=ctx.rf_threshold)

    store_id = id(getattr(deps.search(ctx), "embedder", None))
    key = ("rfm_judge", path, name, ctx.rf_threshold, ctx.coverage_length_unit, store_id)
    return deps.cached(key, make)


def relevance_judge(ctx: Context, deps: RfmRagDeps) -> RelevanceJudge:
    """Relevance only: G_f as the R-Feedback MLP computes it (the embedder its weights name)
    against ``relevance_threshold``, built once per settings."""
    _, name = _weights(ctx)

    def make() -> RelevanceJudge:
        return RelevanceJudge(_feature_extractor(ctx, deps, name), ctx.relevance_threshold)

    store_id = id(getattr(deps.search(ctx), "embedder", None))
    key = ("rfm_relevance", name, ctx.relevance_threshold, store_id)
    return deps.cached(key, make)


def choose_judge(ctx: Context, deps: RfmRagDeps) -> SufficiencyJudge | None:
    """The judge for this run; None means the LLM judge (an async model call)."""
    if deps.sufficiency_model is not None:
        return deps.sufficiency_model
    if ctx.feedback_mode == "never_sufficient":
        return FixedJudge(False)
    if ctx.feedback_mode == "always_sufficient":
        return FixedJudge(True)
    if ctx.feedback_mode == "heuristic":
        return HeuristicJudge()
    if ctx.feedback_mode == "llm_judge":
        return None
    if ctx.feedback_mode == "relevance":
        return relevance_judge(ctx, deps)
    return mlp_judge(ctx, deps)


def decision_path(judge: SufficiencyJudge, result: FeedbackResult) -> tuple[str, float | None]:
    """How a verdict was reached, for the decision record: ``("model", p)`` when the judge
    gives a probability that the pool is sufficient (the R-Feedback MLP, an injected model
    with a ``prob``): the graph stops on ``p`` against ``rf_threshold``; ``("relevance", p)``
    for the relevance-only judge (``p = sigmoid(G_f)``, its own verdict ``G_f >=
    relevance_threshold`` decides); ``("rule", None)`` for the fixed rules (heuristic,
    never/always sufficient, an injected judge without ``prob``), whose own verdict decides."""
    if isinstance(judge, RelevanceJudge):
        return "relevance", result.prob
    if isinstance(judge, HeuristicJudge | FixedJudge) or result.prob is None:
        return "rule", None
    return "model", result.prob
