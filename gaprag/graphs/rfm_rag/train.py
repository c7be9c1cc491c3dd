"""Deprecated alias of the R-Feedback Model's training, now in two modules (this name is kept
for one release): the labelled examples in :mod:`gaprag.graphs.rfm_rag.feedback_model.examples`
and fitting in :mod:`gaprag.graphs.rfm_rag.feedback_model.train`. Renamed there:
``Dataset`` -> ``FeedbackSplits``, ``build_dataset`` -> ``build_splits``,
``graph_pool_dataset`` -> ``graph_pool_splits``, ``evaluate`` -> ``score_model``;
``featurize`` is in :mod:`gaprag.graphs.rfm_rag.feedback_model.features`."""

import warnings

from gaprag.graphs.rfm_rag.feedback_model.examples import *  # noqa: F403
from gaprag.graphs.rfm_rag.feedback_model.examples import (
    FeedbackSplits,
    build_splits,
    graph_pool_splits,
)
from gaprag.graphs.rfm_rag.feedback_model.features import featurize as featurize
from gaprag.graphs.rfm_rag.feedback_model.train import *  # noqa: F403
from gaprag.graphs.rfm_rag.feedback_model.train import score_model

Dataset = FeedbackSplits
build_dataset = build_splits
graph_pool_dataset = graph_pool_splits
evaluate = score_model

warnings.warn(
    "gaprag.graphs.rfm_rag.train is deprecated: import gaprag.graphs.rfm_rag.feedback_model.train "
    "instead (labelled examples: gaprag.graphs.rfm_rag.feedback_model.examples)",
    DeprecationWarning,
    stacklevel=2,
)
