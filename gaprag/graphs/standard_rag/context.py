"""standard_rag's settings (Studio's form)."""

from __future__ import annotations

from dataclasses import dataclass

from gaprag.context import MAX_PASSAGES, BaseContext, describe
from gaprag.stores.store import RetrievalMode


@dataclass(kw_only=True)
class Context(BaseContext):
    top_k: int = describe(
        5, "Passages retrieved for the question.", minimum=1, maximum=MAX_PASSAGES
    )
    retrieval_mode: RetrievalMode = describe(
        "hybrid", "bm25, dense or hybrid (reciprocal-rank fusion of both)."
    )
