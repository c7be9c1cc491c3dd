"""gaprag: iterative retrieval-augmented generation methods as LangGraph state machines."""

from gaprag.errors import GapragError
from gaprag.graphs import build_graph, list_methods
from gaprag.tool import as_tool

__version__ = "0.1.0"
__all__ = ["GapragError", "__version__", "as_tool", "build_graph", "list_methods"]
