"""What every file loader shares: its file, its source name, and how it says "skip me"."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from langchain_core.document_loaders import BaseLoader
from langchain_core.documents import Document


class SkipFile(Exception):
    """A file that cannot be indexed (no text, not UTF-8...): reported, not fatal."""


class FileLoader(BaseLoader):
    """Reads one file into LangChain ``Document``s.

    ``source`` is the name the documents carry in ``metadata["source"]`` (the file's path
    relative to the folder being indexed); it defaults to the file name. Every document also
    carries a ``title``. A subclass implements :meth:`lazy_load`.
    """

    #: file name suffixes this loader reads (lower case, with the dot)
    suffixes: ClassVar[tuple[str, ...]] = ()
    #: True when each document is already one passage (JSONL): never split, ids kept
    passages: ClassVar[bool] = False

    def __init__(self, path: str | Path, source: str | None = None) -> None:
        self.path = Path(path)
        self.source = source or self.path.name

    def metadata(self, **extra: Any) -> dict[str, Any]:
        return {"source": self.source, "title": self.path.stem, **extra}

    def read_text(self) -> str:
        """The file as UTF-8 text; :class:`SkipFile` when it is binary or another encoding."""
        data = self.path.read_bytes()
        if b"\x00" in data[:8192]:
            raise SkipFile("binary or not UTF-8")
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise SkipFile("binary or not UTF-8") from None

    def lazy_load(self) -> Iterator[Document]:  # pragma: no cover - every subclass has its own
        raise NotImplementedError
