"""IRCoT: interleaving retrieval with chain-of-thought reasoning (Trivedi et al., arXiv 2212.10509)."""

from gaprag.graphs.ircot.context import Context
from gaprag.graphs.ircot.graph import build
from gaprag.graphs.ircot.state import OutputState, State

__all__ = ["Context", "OutputState", "State", "build"]
