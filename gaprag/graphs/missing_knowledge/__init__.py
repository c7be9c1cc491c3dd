"""missing_knowledge (MisK-RAG): one judge call finds missing knowledge and writes KB-aligned
queries; one extra retrieval round fills it. See docs/methods/missing_knowledge.md.

Build it with ``build_graph("missing_knowledge", llm=..., retriever=..., kb_pairs=...)``.
"""

from gaprag.graphs.missing_knowledge.context import Context
from gaprag.graphs.missing_knowledge.graph import build
from gaprag.graphs.missing_knowledge.judge import Judgement
from gaprag.graphs.missing_knowledge.knowledge_base import KnowledgeBaseRetriever
from gaprag.graphs.missing_knowledge.question import format_options
from gaprag.graphs.missing_knowledge.state import OutputState, State

__all__ = [
    "Context",
    "Judgement",
    "KnowledgeBaseRetriever",
    "OutputState",
    "State",
    "build",
    "format_options",
]
