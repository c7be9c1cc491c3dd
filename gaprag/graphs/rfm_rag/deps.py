"""RFM-RAG's injected objects: the sufficiency model, beside the common ones
(:class:`gaprag.deps.Deps`).

``build_graph("rfm_rag", sufficiency_model=...)`` or
``build_graph("rfm_rag", deps=RfmRagDeps(sufficiency_model=...))``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gaprag.deps import Deps
from gaprag.graphs.rfm_rag.feedback_model.model import SufficiencyJudge


@dataclass(kw_only=True)
class RfmRagDeps(Deps):
    """RFM-RAG's objects: every field of :class:`gaprag.deps.Deps` and its own."""

    sufficiency_model: SufficiencyJudge | None = None
    """The R-Feedback sufficiency model; default: the ``feedback_mode`` setting's judge."""


__all__ = ["RfmRagDeps"]
