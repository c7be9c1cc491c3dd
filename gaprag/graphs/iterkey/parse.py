"""Deprecated alias of :mod:`gaprag.graphs.iterkey.parsing` (renamed; kept for one release)."""

import warnings

from gaprag.graphs.iterkey.parsing import *  # noqa: F403

warnings.warn(
    "gaprag.graphs.iterkey.parse is deprecated: import gaprag.graphs.iterkey.parsing instead",
    DeprecationWarning,
    stacklevel=2,
)
