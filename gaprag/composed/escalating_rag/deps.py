"""escalating_rag's injected objects: the composed methods' graphs, beside the common ones
(:class:`gaprag.deps.Deps`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gaprag.deps import Deps


@dataclass(kw_only=True)
class EscalatingDeps(Deps):
    """escalating_rag's objects: every field of :class:`gaprag.deps.Deps`, and the composed
    methods' compiled graphs (built by :func:`gaprag.composed.escalating_rag.build` from the
    same objects, each with its model profile)."""

    loops: Mapping[str, Any] = field(default_factory=dict)


__all__ = ["EscalatingDeps"]
