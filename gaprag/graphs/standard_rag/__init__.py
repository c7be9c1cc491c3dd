"""standard_rag: the baseline. Retrieve top-k passages once, answer from them."""

from gaprag.graphs.standard_rag.context import Context
from gaprag.graphs.standard_rag.graph import build
from gaprag.graphs.standard_rag.state import OutputState, State

__all__ = ["Context", "OutputState", "State", "build"]
