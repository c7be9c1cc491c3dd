"""RFM-RAG: retrieval feedback (a tiny trained sufficiency MLP) and a persistent evidence pool."""

from gaprag.graphs.rfm_rag.context import Context
from gaprag.graphs.rfm_rag.deps import RfmRagDeps
from gaprag.graphs.rfm_rag.graph import build
from gaprag.graphs.rfm_rag.state import OutputState, State

__all__ = ["Context", "OutputState", "RfmRagDeps", "State", "build"]
