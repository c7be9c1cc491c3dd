"""Deprecated alias of :mod:`gaprag.accounting` (moved there; this name is kept for one release)."""

import warnings

from gaprag.accounting import *  # noqa: F403

warnings.warn(
    "gaprag.llm.accounting is deprecated: import gaprag.accounting instead",
    DeprecationWarning,
    stacklevel=2,
)
