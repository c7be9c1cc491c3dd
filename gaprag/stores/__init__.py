"""Documents and ids, BM25, Chroma, hybrid fusion, embeddings, the retriever interface."""

from gaprag.stores.documents import Document, make_document
from gaprag.stores.embeddings import Embedder, HashingEmbedder, MiniLMEmbedder, default_embedder
from gaprag.stores.loaders import load_corpus, load_documents, split_documents
from gaprag.stores.pairs import PairStore, QAPair
from gaprag.stores.retriever import (
    GapragRetriever,
    LangChainRetrieverAdapter,
    Retriever,
    as_retriever,
)
from gaprag.stores.store import MODES, RetrievalMode, Store

__all__ = [
    "MODES",
    "Document",
    "Embedder",
    "GapragRetriever",
    "HashingEmbedder",
    "LangChainRetrieverAdapter",
    "MiniLMEmbedder",
    "PairStore",
    "QAPair",
    "RetrievalMode",
    "Retriever",
    "Store",
    "as_retriever",
    "default_embedder",
    "load_corpus",
    "load_documents",
    "make_document",
    "split_documents",
]
