"""Plain text files: one document per file (the splitter cuts it into passages)."""

from __future__ import annotations

from collections.abc import Iterator

from langchain_core.documents import Document

from gaprag.stores.loaders.base import FileLoader


class TextLoader(FileLoader):
    """A UTF-8 ``.txt`` file; its title is the file name without its suffix."""

    suffixes = (".txt", ".text")

    def lazy_load(self) -> Iterator[Document]:
        text = self.read_text()
        if text.strip():
            yield Document(page_content=text, metadata=self.metadata())
