"""CSV files with the ``csv`` module: one document per row, ``column: value`` lines."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

from langchain_core.documents import Document

from gaprag.stores.loaders.base import FileLoader, SkipFile


class CSVLoader(FileLoader):
    """A CSV file with a header row. Each row is one document: its non-empty cells as
    ``column: value`` lines, ``row`` its number (1 = the first row after the header); a
    ``title`` column, if there is one, is the title (else the file name)."""

    suffixes = (".csv",)

    def lazy_load(self) -> Iterator[Document]:
        text = self.read_text()
        try:
            dialect: type[csv.Dialect] | csv.Dialect = csv.Sniffer().sniff(text[:4096], ",;\t|")
        except csv.Error:
            dialect = csv.excel
        reader = csv.DictReader(io.StringIO(text), dialect=dialect)
        if not reader.fieldnames:
            return
        try:
            for number, row in enumerate(reader, 1):
                cells = {
                    (k or "").strip(): (v or "").strip()
                    for k, v in row.items()
                    if isinstance(v, str) and v.strip()
                }
                title = cells.pop("title", "") or self.path.stem
                if not cells:
                    continue
                body = "\n".join(f"{k}: {v}" if k else v for k, v in cells.items())
                yield Document(page_content=body, metadata=self.metadata(title=title, row=number))
        except csv.Error as exc:
            raise SkipFile(f"not a readable CSV: {exc}") from None
