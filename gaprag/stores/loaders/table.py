"""CSV files with the ``csv`` module: one document per row, ``column: value`` lines; the
row's cells are its metadata too, so a filter can select rows by column."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

from langchain_core.documents import Document

from gaprag.stores.filters import MAX_KEY_CHARS, MAX_VALUE_CHARS
from gaprag.stores.loaders.base import FileLoader, SkipFile

#: metadata keys the loaders set themselves: a column of that name stays in the text only
RESERVED = frozenset({"id", "title", "source", "page", "section", "row"})


def cell_value(text: str) -> str | int | float | bool:
    """A cell as metadata, typed as ``--filter`` types a value: a JSON number or boolean is
    one (``3``, ``2.5``, ``true``), anything else the text."""
    try:
        value: Any = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, int | float | bool) else text


class CSVLoader(FileLoader):
    """A CSV file with a header row. Each row is one document: its non-empty cells as
    ``column: value`` lines, ``row`` its number (1 = the first row after the header); a
    ``title`` column, if there is one, is the title (else the file name). Each cell of at most
    256 characters is also metadata under its column's name (at most 64 characters; ``id``,
    ``source``, ``page``, ``section`` and ``row`` stay gaprag's own), typed as ``--filter``
    types values, so ``--filter department=Legal`` selects the rows whose ``department`` is
    ``Legal``."""

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
                columns = {
                    k: cell_value(v)
                    for k, v in cells.items()
                    if k and k not in RESERVED and len(k) <= MAX_KEY_CHARS
                    and len(v) <= MAX_VALUE_CHARS
                }  # fmt: skip
                yield Document(
                    page_content=body,
                    metadata={**columns, **self.metadata(title=title, row=number)},
                )
        except csv.Error as exc:
            raise SkipFile(f"unreadable CSV: {exc}", "check its quoting and delimiter") from None
