"""escalating_rag: plain RAG once; when unsure, a method's loop; when still unsure, a stronger
one; the answer chosen among every candidate the run produced."""

from gaprag.composed.escalating_rag.context import Context
from gaprag.composed.escalating_rag.deps import EscalatingDeps
from gaprag.composed.escalating_rag.graph import build
from gaprag.composed.escalating_rag.state import OutputState, State

__all__ = ["Context", "EscalatingDeps", "OutputState", "State", "build"]
