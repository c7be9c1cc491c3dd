"""Markdown files, split at their headings: a heading path becomes the passage's section."""

from __future__ import annotations

import re
from collections.abc import Iterator

from langchain_core.documents import Document
from langchain_text_splitters import MarkdownHeaderTextSplitter

from gaprag.stores.loaders.base import FileLoader

_LEVELS = [("#" * n, f"h{n}") for n in range(1, 7)]


class MarkdownLoader(FileLoader):
    """A UTF-8 Markdown file, one document per heading section (LangChain's
    ``MarkdownHeaderTextSplitter``). The title is the file's first top-level heading (else its
    name); ``section`` is the path of headings above the passage, joined by " > "."""

    suffixes = (".md", ".markdown")

    def lazy_load(self) -> Iterator[Document]:
        splitter = MarkdownHeaderTextSplitter(_LEVELS, strip_headers=True)
        sections = splitter.split_text(self.read_text())
        title = next((s.metadata["h1"] for s in sections if "h1" in s.metadata), self.path.stem)
        for part in sections:
            # the splitter joins a section's lines with "  \n" (a Markdown line break)
            text = re.sub(r"[ \t]+\n", "\n", part.page_content).strip()
            if not text:
                continue
            path = [part.metadata[key] for _, key in _LEVELS if key in part.metadata]
            extra = {"section": " > ".join(path)} if path else {}
            yield Document(page_content=text, metadata={**self.metadata(title=title), **extra})
