"""Word documents (``.docx``) with docx2txt: the text of the body, headers and footers."""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterator

from langchain_core.documents import Document

from gaprag.stores.loaders.base import FileLoader, SkipFile


class DocxLoader(FileLoader):
    """A ``.docx`` file's text (``docx2txt``, no dependencies of its own); the title is the
    file name."""

    suffixes = (".docx",)

    def lazy_load(self) -> Iterator[Document]:
        import docx2txt

        try:
            text = str(docx2txt.process(str(self.path)))
        except (zipfile.BadZipFile, KeyError, ValueError) as exc:
            raise SkipFile(f"not a readable .docx: {exc}") from None
        text = re.sub(r"\n{3,}", "\n\n", text).strip()
        if text:
            yield Document(page_content=text, metadata=self.metadata())
