"""HTML pages with BeautifulSoup (Python's own ``html.parser``): the visible text."""

from __future__ import annotations

import re
from collections.abc import Iterator

from langchain_core.documents import Document

from gaprag.stores.loaders.base import FileLoader, SkipFile

_INVISIBLE = ("script", "style", "noscript", "template", "head")


class HTMLLoader(FileLoader):
    """An HTML file's visible text, one line per block; the title is the page's ``<title>``
    (else its first ``<h1>``, else the file name)."""

    suffixes = (".html", ".htm", ".xhtml")

    def lazy_load(self) -> Iterator[Document]:
        from bs4 import BeautifulSoup

        data = self.path.read_bytes()
        if b"\x00" in data[:8192]:
            raise SkipFile("binary, not HTML")
        soup = BeautifulSoup(data, "html.parser")
        heading = soup.title or soup.find("h1")
        title = heading.get_text(" ", strip=True) if heading is not None else ""
        for tag in soup(_INVISIBLE):
            tag.decompose()
        text = soup.get_text("\n", strip=True)
        text = re.sub(r"\n{3,}", "\n\n", text)
        if text:
            yield Document(page_content=text, metadata=self.metadata(title=title or self.path.stem))
