"""Word documents (``.docx``) with docx2txt: the text of the body, headers and footers, and
the title from the document's core properties."""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterator
from pathlib import Path
from xml.etree import ElementTree

from langchain_core.documents import Document

from gaprag.stores.loaders.base import FileLoader, SkipFile, empty_file

#: the first bytes of an OLE compound file: a password-protected Office file (or a .doc)
_OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_DC_TITLE = "{http://purl.org/dc/elements/1.1/}title"


class DocxLoader(FileLoader):
    """A ``.docx`` file's text (``docx2txt``, no dependencies of its own); the title is the
    document's own (its core properties' ``dc:title``), else the file name without its
    suffix. A password-protected file is skipped as encrypted."""

    suffixes = (".docx",)

    def lazy_load(self) -> Iterator[Document]:
        import docx2txt

        with self.path.open("rb") as fh:
            head = fh.read(8)
        if not head:
            raise empty_file()
        if head == _OLE:
            raise SkipFile(
                "encrypted (a password-protected Office file, or an old .doc)",
                "save a copy without a password as .docx and index that",
            )
        try:
            text = str(docx2txt.process(str(self.path)))
            title = core_title(self.path)
        except (zipfile.BadZipFile, KeyError, ValueError, ElementTree.ParseError) as exc:
            raise SkipFile(
                f"unreadable .docx: {exc}", "open and save it again in a word processor"
            ) from None
        text = re.sub(r"\n{3,}", "\n\n", text).strip()
        if not text:
            raise empty_file()
        yield Document(page_content=text, metadata=self.metadata(title=title or self.path.stem))


def core_title(path: Path) -> str:
    """The title in a .docx's core properties ('' when it has none)."""
    with zipfile.ZipFile(path) as zf:
        if "docProps/core.xml" not in zf.namelist():
            return ""
        root = ElementTree.fromstring(zf.read("docProps/core.xml"))
    found = root.find(_DC_TITLE)
    return " ".join((found.text or "").split()) if found is not None else ""
