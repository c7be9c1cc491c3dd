"""What every file loader shares: its file, its source name, how it reads text in any
encoding, and how it says "skip me"."""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from langchain_core.document_loaders import BaseLoader
from langchain_core.documents import Document

#: byte-order marks of the encodings whose text holds NUL bytes
_WIDE_BOMS = (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


class SkipFile(Exception):
    """A file that cannot be indexed: reported with ``reason`` and ``hint``, not fatal.

    ``failed``: the file exists but could not be read this time (unreadable, encrypted, not
    parseable), so the passages a store holds of it are kept; a file with nothing to index
    (empty, no text) is not ``failed``, and an update removes its old passages.
    """

    def __init__(self, reason: str, hint: str = "", *, failed: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.hint = hint
        self.failed = failed


def empty_file() -> SkipFile:
    return SkipFile("empty", "the file has no text to index", failed=False)


class FileLoader(BaseLoader):
    """Reads one file into LangChain ``Document``s.

    ``source`` is the name the documents carry in ``metadata["source"]`` (the file's path
    relative to the folder being indexed); it defaults to the file name. Every document also
    carries a ``title``. A subclass implements :meth:`lazy_load`; what it noticed while reading
    (the encoding of a file that was not UTF-8) is in ``notes``.
    """

    #: file name suffixes this loader reads (lower case, with the dot)
    suffixes: ClassVar[tuple[str, ...]] = ()
    #: True when each document is already one passage (JSONL): never split, ids kept
    passages: ClassVar[bool] = False

    def __init__(self, path: str | Path, source: str | None = None) -> None:
        self.path = Path(path)
        self.source = source or self.path.name
        self.notes: list[str] = []

    def metadata(self, **extra: Any) -> dict[str, Any]:
        return {"source": self.source, "title": self.path.stem, **extra}

    def read_text(self) -> str:
        """The file's text: UTF-8, else the encoding ``charset-normalizer`` detects (named in
        ``notes``); :class:`SkipFile` when it is empty, binary or no known encoding."""
        return self.decode(self.path.read_bytes())

    def decode(self, data: bytes) -> str:
        """``data`` as text (see :meth:`read_text`)."""
        return data.decode(self.encoding_of(data), errors="replace")

    def encoding_of(self, data: bytes, *, final: bool = True) -> str:
        """The encoding of ``data`` (the whole file, or its first block with ``final=False``):
        ``utf-8-sig`` when it reads as UTF-8, else the one ``charset-normalizer`` detects (named
        in ``notes``); :class:`SkipFile` when it is empty, binary or no known encoding."""
        if not data.strip():
            raise empty_file()
        if b"\x00" in data[:8192] and not data.startswith(_WIDE_BOMS):
            raise SkipFile(
                "binary, not text", "save it as text, or leave it out of the folder", failed=False
            )
        try:
            codecs.getincrementaldecoder("utf-8-sig")().decode(data, final=final)
            return "utf-8-sig"
        except UnicodeDecodeError:
            pass
        from charset_normalizer import from_bytes

        found = from_bytes(data)
        best = found.best()
        if best is not None:  # among equally good guesses, the most common Western one
            ties = [m for m in found if (m.chaos, m.coherence) == (best.chaos, best.coherence)]
            best = next((m for m in ties if "cp1252" in m.could_be_from_charset), best)
        if best is None:
            raise SkipFile(
                "encoding: not UTF-8 and no other text encoding fits",
                "save the file as UTF-8 (e.g. `iconv -t UTF-8`)",
            )
        encoding = "cp1252" if "cp1252" in best.could_be_from_charset else str(best.encoding)
        self.notes.append(f"read as {encoding}")
        return encoding

    def lazy_load(self) -> Iterator[Document]:  # pragma: no cover - every subclass has its own
        raise NotImplementedError
