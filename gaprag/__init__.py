"""gaprag: iterative retrieval-augmented generation methods as LangGraph state machines."""

from importlib.metadata import PackageNotFoundError, version

from gaprag.errors import GapragError
from gaprag.graphs import build_graph, list_methods
from gaprag.tool import as_tool

try:
    __version__ = version("gaprag")  # written once, in pyproject.toml
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["GapragError", "__version__", "as_tool", "build_graph", "list_methods"]
