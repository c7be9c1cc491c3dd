"""missing_knowledge (MisK-RAG): one judge call finds missing knowledge and writes KB-aligned
queries; one extra retrieval round fills it. See docs/methods/missing_knowledge.md."""

from gaprag.graphs.missing_knowledge.graph import (
    Context,
    Judgement,
    KnowledgeBaseRetriever,
    build,
    build_missing_knowledge,
    format_options,
)

__all__ = [
    "Context",
    "Judgement",
    "KnowledgeBaseRetriever",
    "build",
    "build_missing_knowledge",
    "format_options",
]
