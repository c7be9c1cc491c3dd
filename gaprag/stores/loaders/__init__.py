"""Documents in: a LangChain ``BaseLoader`` per file type, the passage splitter, and
:func:`load_corpus`, which ``gaprag index`` runs over folders and files."""

from gaprag.stores.loaders.base import FileLoader, SkipFile
from gaprag.stores.loaders.corpus import (
    CHUNK_WORDS,
    LOADERS,
    OVERLAP_WORDS,
    Corpus,
    FileReport,
    keep_apart,
    load_corpus,
    load_documents,
    split_documents,
    splitter,
    supported,
)
from gaprag.stores.loaders.docx import DocxLoader
from gaprag.stores.loaders.html import HTMLLoader
from gaprag.stores.loaders.jsonl import JSONLLoader
from gaprag.stores.loaders.markdown import MarkdownLoader
from gaprag.stores.loaders.pdf import PDFLoader
from gaprag.stores.loaders.table import CSVLoader
from gaprag.stores.loaders.text import TextLoader

__all__ = [
    "CHUNK_WORDS",
    "LOADERS",
    "OVERLAP_WORDS",
    "CSVLoader",
    "Corpus",
    "DocxLoader",
    "FileLoader",
    "FileReport",
    "HTMLLoader",
    "JSONLLoader",
    "MarkdownLoader",
    "PDFLoader",
    "SkipFile",
    "TextLoader",
    "keep_apart",
    "load_corpus",
    "load_documents",
    "split_documents",
    "splitter",
    "supported",
]
