"""Deprecated alias of :mod:`gaprag.metrics` (moved there; this name is kept for one release)."""

import warnings

from gaprag.metrics import *  # noqa: F403

warnings.warn(
    "gaprag.eval.metrics is deprecated: import gaprag.metrics instead",
    DeprecationWarning,
    stacklevel=2,
)
