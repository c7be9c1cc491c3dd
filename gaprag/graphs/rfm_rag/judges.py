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
    RFeedbackMLP,
    SufficiencyJudge,
    expected_embedder,
    shipped_weights_path,
)
from gaprag.stores.embeddings import Embedder, embedder_by_name


def mlp_judge(ctx: Context, deps: RfmRagDeps) -> SufficiencyJudge:
    """The R-Feedback MLP with the embedder its weights were trained with (the store's own
    embedder when it is that one, so a loaded MiniLM is shared), built once per settings."""
    path = ctx.rf_weights or str(shipped_weights_path())
    name = expected_embedder(path)
    store_embedder = getattr(deps.search(ctx), "embedder", None)

    def make() -> SufficiencyJudge:
        embedder: Embedder = (
            store_embedder
            if store_embedder is not None and getattr(store_embedder, "name", "") == name
            else embedder_by_name(name)
        )
        model = RFeedbackMLP.load(path, expect_embedder=embedder.name)
        extractor = FeatureExtractor(embedder, ctx.coverage_length_unit)
        return MLPJudge(model, extractor, threshold=ctx.rf_threshold)

    key = ("rfm_judge", path, name, ctx.rf_threshold, ctx.coverage_length_unit, id(store_embedder))
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
    return mlp_judge(ctx, deps)


def decision_path(judge: SufficiencyJudge, result: FeedbackResult) -> tuple[str, float | None]:
    """How a verdict was reached, for the decision record: ``("model", p)`` when the judge
    gives a probability that the pool is sufficient (the R-Feedback MLP, an injected model
    with a ``prob``): the graph stops on ``p`` against ``rf_threshold``; ``("rule", None)`` for
    the fixed rules (heuristic, never/always sufficient, an injected judge without ``prob``),
    whose own verdict decides."""
    if isinstance(judge, HeuristicJudge | FixedJudge) or result.prob is None:
        return "rule", None
    return "model", result.prob
