"""PDF files with pdfplumber: one document per page with text, ``page`` numbered from 1; a
ruled table is read row by row, each row one line."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from langchain_core.documents import Document

from gaprag.stores.loaders.base import FileLoader, SkipFile


class PDFLoader(FileLoader):
    """A PDF's text layer, page by page (``pdfplumber``). Text is taken in the order the PDF
    draws it, so the columns of a multi-column page are not mixed; each table pdfplumber finds
    becomes one line per row, ``header: value`` pairs joined by ``; `` when the table has a
    header row (else its cells joined by `` | ``), in its place on the page. A PDF without any
    text (a scan) is skipped with that reason, an encrypted one too; the title is the PDF's own
    title, else the file name."""

    suffixes = (".pdf",)

    def lazy_load(self) -> Iterator[Document]:
        import pdfplumber
        from pdfminer.pdfdocument import PDFEncryptionError
        from pdfplumber.utils.exceptions import PdfminerException

        try:
            with pdfplumber.open(self.path) as pdf:
                info = pdf.metadata or {}
                title = str(info.get("Title") or "").strip() or self.path.stem
                pages = [(n, page_text(page)) for n, page in enumerate(pdf.pages, 1)]
        except PdfminerException as exc:
            cause = exc.args[0] if exc.args else exc
            if isinstance(cause, PDFEncryptionError):
                raise SkipFile(
                    "encrypted", "save a copy without a password and index that"
                ) from None
            raise SkipFile(
                f"unreadable PDF: {cause}", "open and save it again, or export it to PDF anew"
            ) from None
        if not any(text.strip() for _, text in pages):
            raise SkipFile(
                "no text layer (a scanned PDF?)", "run OCR first, e.g. `ocrmypdf`", failed=False
            )
        for number, text in pages:
            if text.strip():
                yield Document(
                    page_content=text.strip(), metadata=self.metadata(title=title, page=number)
                )


def page_text(page: Any) -> str:
    """A page's text top to bottom: the text between tables in drawing order, each table as
    its rows."""
    tables = sorted(page.find_tables(), key=lambda t: t.bbox[1])
    rest = page
    for table in tables:
        rest = rest.outside_bbox(table.bbox)
    parts: list[str] = []
    top = float(page.bbox[1])
    for table in [*tables, None]:
        bottom = float(table.bbox[1]) if table is not None else float(page.bbox[3])
        if bottom > top:
            band = rest.crop((page.bbox[0], top, page.bbox[2], bottom))
            parts.append(band.extract_text(use_text_flow=True) or "")
        if table is not None:
            parts.append(table_lines(table.extract()))
            top = max(top, float(table.bbox[3]))
    return "\n\n".join(p.strip() for p in parts if p.strip())


def table_lines(rows: Sequence[Sequence[str | None]]) -> str:
    """A table as one line per row: ``header: value; ...`` under a header row of names, else
    the cells joined by `` | ``."""
    cells = [[" ".join((c or "").split()) for c in row] for row in rows]
    cells = [row for row in cells if any(row)]
    if not cells:
        return ""
    header = cells[0]
    if len(cells) > 1 and all(header) and len(set(header)) == len(header):
        return "\n".join(
            "; ".join(f"{h}: {v}" for h, v in zip(header, row, strict=False) if v)
            for row in cells[1:]
        )
    return "\n".join(" | ".join(c for c in row if c) for row in cells)
