"""gaprag: iterative retrieval-augmented generation methods as LangGraph state machines."""

from gaprag.config import offline_env

offline_env()

from gaprag.errors import GapragError  # noqa: E402
from gaprag.graphs import build_graph, list_methods  # noqa: E402
from gaprag.tool import as_tool  # noqa: E402

__version__ = "0.1.0"
__all__ = ["GapragError", "__version__", "as_tool", "build_graph", "list_methods"]
