"""PDF files with pypdf: one document per page with text, ``page`` numbered from 1."""

from __future__ import annotations

from collections.abc import Iterator

from langchain_core.documents import Document

from gaprag.stores.loaders.base import FileLoader, SkipFile


class PDFLoader(FileLoader):
    """A PDF's text layer, page by page (``pypdf``). A PDF without any text (a scan) is skipped
    with that reason; the title is the PDF's own title, else the file name."""

    suffixes = (".pdf",)

    def lazy_load(self) -> Iterator[Document]:
        from pypdf import PdfReader
        from pypdf.errors import PdfReadError

        try:
            reader = PdfReader(self.path)
            info = reader.metadata
            title = (info.title if info is not None and info.title else "") or self.path.stem
            pages = [(n, page.extract_text() or "") for n, page in enumerate(reader.pages, 1)]
        except (PdfReadError, ValueError, KeyError) as exc:
            raise SkipFile(f"not a readable PDF: {exc}") from None
        if not any(text.strip() for _, text in pages):
            raise SkipFile("no text layer (a scanned PDF?)")
        for number, text in pages:
            if text.strip():
                yield Document(
                    page_content=text.strip(), metadata=self.metadata(title=title, page=number)
                )
