"""Deprecated alias of :mod:`gaprag.graphs.rfm_rag.feedback_model.features` (moved there; this
name is kept for one release). ``heuristic_entities`` is now in
:mod:`gaprag.graphs.rfm_rag.feedback_model.examples`."""

import warnings

from gaprag.graphs.rfm_rag.feedback_model.examples import heuristic_entities as heuristic_entities
from gaprag.graphs.rfm_rag.feedback_model.features import *  # noqa: F403

warnings.warn(
    "gaprag.graphs.rfm_rag.features is deprecated: "
    "import gaprag.graphs.rfm_rag.feedback_model.features instead",
    DeprecationWarning,
    stacklevel=2,
)
