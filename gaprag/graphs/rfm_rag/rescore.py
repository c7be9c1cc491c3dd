"""Deprecated alias of :mod:`gaprag.graphs.rfm_rag.feedback_model.rescore` (moved there; this
name is kept for one release)."""

import warnings

from gaprag.graphs.rfm_rag.feedback_model.rescore import *  # noqa: F403

warnings.warn(
    "gaprag.graphs.rfm_rag.rescore is deprecated: "
    "import gaprag.graphs.rfm_rag.feedback_model.rescore instead",
    DeprecationWarning,
    stacklevel=2,
)
