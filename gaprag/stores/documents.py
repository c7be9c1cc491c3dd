"""Documents with stable ids, and the JSONL reader behind ``gaprag index``.

A JSONL corpus is either:
* a JSONL of ``{"id", "title", "text"}`` (``id`` optional: a content hash is used); any other
  field of a record is kept in the document's ``metadata``;
* a dataset JSONL (records with ``paragraphs``): the union of the paragraphs.

Every other file type is read by the loaders in :mod:`gaprag.stores.loaders`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NotRequired

from langchain_core.documents import Document as LCDocument
from typing_extensions import TypedDict  # pydantic needs it for JSON schemas on 3.11

from gaprag.config import max_line_bytes
from gaprag.errors import InputError


class Document(TypedDict):
    """A passage. ``metadata`` holds where it comes from and any fields of its own: ``source``
    (its path relative to the indexed folder, or a URL), ``page`` (int), ``section``, and
    extra fields of a JSONL record (``url``, ``department``...)."""

    id: str
    title: str
    text: str
    metadata: NotRequired[dict[str, Any]]


#: Record fields that are the passage itself (every other field is its metadata).
PASSAGE_FIELDS = ("id", "title", "text")


def content_id(title: str, text: str) -> str:
    return "d_" + hashlib.sha1(f"{title}\n{text}".encode()).hexdigest()[:16]


def passage_text(doc: Document) -> str:
    """The text embedded for a passage: its title, then its text."""
    return f"{doc['title']}: {doc['text']}"


def make_document(
    text: str,
    title: str = "",
    doc_id: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> Document:
    doc = Document(id=doc_id or content_id(title, text), title=title, text=text)
    if metadata:
        doc["metadata"] = dict(metadata)
    return doc


def from_langchain(doc: LCDocument) -> Document:
    """A LangChain ``Document`` as a passage: ``metadata["title"]`` is its title, its id is
    ``doc.id`` (else ``metadata["id"]``, else a content hash), every other key its metadata."""
    metadata = dict(doc.metadata)
    title = metadata.pop("title", None) or ""
    meta_id = metadata.pop("id", None)
    doc_id = doc.id or (str(meta_id) if meta_id not in (None, "") else None)
    return make_document(doc.page_content, str(title), doc_id, metadata)


def as_document(doc: Document | LCDocument) -> Document:
    """A passage from either kind of document (gaprag's own are returned as they are)."""
    return from_langchain(doc) if isinstance(doc, LCDocument) else doc


def read_jsonl(
    path: str | Path, *, hint: str = "each line must be one JSON object"
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line; malformed input raises InputError naming the line.

    Lines are read one at a time and refused beyond ``GAPRAG_MAX_LINE_BYTES`` (4 MiB), so
    memory stays bounded whatever the file holds.
    """
    path = Path(path)
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise InputError(
            f"cannot read {path}: {exc.strerror}", hint="check the path and its permissions"
        ) from None
    limit = max_line_bytes()
    with fh:
        lineno = 0
        while True:
            # read at most limit+1 bytes: a huge line is refused without ever being held whole
            raw = fh.readline(limit + 1)
            if not raw:
                break
            lineno += 1
            if len(raw) > limit and not raw.endswith(b"\n"):
                raise InputError(
                    f"{path}:{lineno}: line longer than {limit:,} bytes",
                    hint="split the record (e.g. one passage per line), or raise the limit "
                    "with GAPRAG_MAX_LINE_BYTES",
                )
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise InputError(
                    f"{path}:{lineno}: not UTF-8 text", hint="save the file as UTF-8 JSONL"
                ) from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(
                    f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})",
                    hint=hint,
                ) from None
            if not isinstance(record, dict):
                raise InputError(
                    f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}",
                    hint=hint,
                )
            yield lineno, record


def _passage(path: Path, lineno: int, record: dict[str, Any], where: str = "") -> Document:
    text = record.get("text")
    if not isinstance(text, str) or not text.strip():
        raise InputError(
            f"{path}:{lineno}: {where}field 'text' is missing or empty",
            hint="records need a non-empty 'text' (and optionally 'id' and 'title')",
        )
    title = record.get("title") or ""
    if not isinstance(title, str):
        raise InputError(
            f"{path}:{lineno}: {where}field 'title' must be a string", hint="fix the record"
        )
    doc_id = record.get("id")
    extra = {k: v for k, v in record.items() if k not in PASSAGE_FIELDS and v is not None}
    return make_document(
        text.strip(), title.strip(), str(doc_id) if doc_id not in (None, "") else None, extra
    )


def load_jsonl(path: Path, *, duplicates: list[str] | None = None) -> list[Document]:
    """Passages from a passage JSONL or a dataset JSONL (paragraph union, first id wins).

    A record whose id was already read is left out; ``duplicates`` collects them as
    ``"file:line: id"`` (a dataset's paragraphs shared by several questions are not counted).
    """
    docs: dict[str, Document] = {}
    for lineno, record in read_jsonl(path):
        if "paragraphs" in record:
            paragraphs = record["paragraphs"]
            if not isinstance(paragraphs, list):
                raise InputError(
                    f"{path}:{lineno}: field 'paragraphs' must be a list", hint="fix the record"
                )
            for i, para in enumerate(paragraphs):
                if not isinstance(para, dict):
                    raise InputError(
                        f"{path}:{lineno}: paragraphs[{i}] must be an object", hint="fix the record"
                    )
                doc = _passage(path, lineno, para, f"paragraphs[{i}]: ")
                docs.setdefault(doc["id"], doc)
        else:
            doc = _passage(path, lineno, record)
            if duplicates is not None and doc["id"] in docs:
                duplicates.append(f"{path}:{lineno}: {doc['id']}")
            docs.setdefault(doc["id"], doc)
    return list(docs.values())


def corpus_hash(docs: Iterable[Document]) -> str:
    digest = hashlib.sha256()
    for doc in docs:
        digest.update(f"{doc['id']}\x00{doc['title']}\x00{doc['text']}\x01".encode())
    return digest.hexdigest()[:16]
