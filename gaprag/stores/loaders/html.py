"""HTML pages with trafilatura: the page's main content, without navigation, sidebars and
footers."""

from __future__ import annotations

import re
from collections.abc import Iterator

from langchain_core.documents import Document

from gaprag.stores.loaders.base import FileLoader


class HTMLLoader(FileLoader):
    """An HTML file's main content (``trafilatura``: menus, sidebars, cookie banners and
    footers left out; tables kept), one line per block; a page too small for it to tell
    content from boilerplate is read whole (trafilatura's baseline). The title is the page's
    own (``<title>``, else its first heading), else the file name."""

    suffixes = (".html", ".htm", ".xhtml")

    def lazy_load(self) -> Iterator[Document]:
        import trafilatura

        html = self.read_text()
        found = trafilatura.bare_extraction(
            html, include_tables=True, favor_recall=True, with_metadata=True
        )
        text = str(getattr(found, "text", "") or "")
        title = str(getattr(found, "title", "") or "")
        if not text.strip():
            text = trafilatura.baseline(html)[1]
        text = re.sub(r"\n{3,}", "\n\n", text).strip()
        if text:
            yield Document(page_content=text, metadata=self.metadata(title=title or self.path.stem))
