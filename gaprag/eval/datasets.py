"""Deprecated alias of :mod:`gaprag.datasets` (moved there; this name is kept for one release)."""

import warnings

from gaprag.datasets import *  # noqa: F403

warnings.warn(
    "gaprag.eval.datasets is deprecated: import gaprag.datasets instead",
    DeprecationWarning,
    stacklevel=2,
)
