"""Deprecated alias of :mod:`gaprag.graphs.rfm_rag.feedback_model.model` (moved there; this
name is kept for one release)."""

import warnings

from gaprag.graphs.rfm_rag.feedback_model.model import *  # noqa: F403

warnings.warn(
    "gaprag.graphs.rfm_rag.model is deprecated: "
    "import gaprag.graphs.rfm_rag.feedback_model.model instead",
    DeprecationWarning,
    stacklevel=2,
)
