"""Plain text files: read in blocks of whole paragraphs (the splitter cuts them into passages)."""

from __future__ import annotations

import codecs
from collections.abc import Iterator

from langchain_core.documents import Document

from gaprag.stores.loaders.base import FileLoader, empty_file

#: bytes read at a time: a file is never held whole, however large
BLOCK_BYTES = 1 << 20


class TextLoader(FileLoader):
    """A ``.txt``/``.text`` file in UTF-8 or any encoding ``charset-normalizer`` detects (from
    its first block); its title is the file name without its suffix. A large file is read one
    block of about 1 MB at a time, each cut at a paragraph (else line) break, so memory stays
    bounded."""

    suffixes = (".txt", ".text")

    def lazy_load(self) -> Iterator[Document]:
        found = False
        for block in self.blocks():
            if block.strip():
                found = True
                yield Document(page_content=block, metadata=self.metadata())
        if not found:
            raise empty_file()

    def blocks(self) -> Iterator[str]:
        """The file's text in blocks that end at a paragraph or line break."""
        with self.path.open("rb") as fh:
            head = fh.read(BLOCK_BYTES)
            if len(head) < BLOCK_BYTES:  # small: read whole
                yield self.decode(head)
                return
            decoder = codecs.getincrementaldecoder(self.encoding_of(head, final=False))("replace")
            fh.seek(0)
            rest = ""
            while data := fh.read(BLOCK_BYTES):
                rest += decoder.decode(data)
                cut = rest.rfind("\n\n")
                cut = cut if cut > 0 else rest.rfind("\n")
                if cut > 0:
                    yield rest[:cut]
                    rest = rest[cut:]
            rest += decoder.decode(b"", final=True)
            if rest.strip():
                yield rest
