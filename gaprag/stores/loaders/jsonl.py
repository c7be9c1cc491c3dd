"""JSONL corpora (``.jsonl``, ``.json``, ``.ndjson``): each record is one passage, as is."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from langchain_core.documents import Document

from gaprag.stores.documents import load_jsonl
from gaprag.stores.loaders.base import FileLoader


class JSONLLoader(FileLoader):
    """Records ``{"id", "title", "text", ...}`` or dataset records with ``paragraphs``
    (:func:`gaprag.stores.documents.load_jsonl`): ids, titles and texts exactly as read, every
    other field a metadata key (a record's own ``source`` wins over the file's name). Passages
    are never split; a repeated id keeps its first record and is listed in ``duplicates``."""

    suffixes = (".jsonl", ".json", ".ndjson")
    passages = True

    def __init__(self, path: str | Path, source: str | None = None) -> None:
        super().__init__(path, source)
        self.duplicates: list[str] = []

    def lazy_load(self) -> Iterator[Document]:
        for doc in load_jsonl(self.path, duplicates=self.duplicates):
            metadata = {"source": self.source, **doc.get("metadata", {}), "title": doc["title"]}
            yield Document(id=doc["id"], page_content=doc["text"], metadata=metadata)
