"""RAG-EF: answers from a store of (question, answer, chunk) pairs that experts can correct."""

from gaprag.graphs.rag_ef.graph import Context, build, build_with_store, open_pair_store

__all__ = ["Context", "build", "build_with_store", "open_pair_store"]
