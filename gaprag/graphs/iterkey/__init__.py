"""IterKey: iterative keyword generation with LLMs for BM25 retrieval-augmented generation."""

from gaprag.graphs.iterkey.context import Context
from gaprag.graphs.iterkey.graph import build
from gaprag.graphs.iterkey.state import OutputState, State

__all__ = ["Context", "OutputState", "State", "build"]
