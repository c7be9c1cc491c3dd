"""Documents with stable ids, and the loaders behind ``gaprag index``.

Accepted sources:
* a JSONL of ``{"id", "title", "text"}`` (``id`` optional: a content hash is used); any other
  field of a record is kept in the document's ``metadata``;
* a dataset JSONL (records with ``paragraphs``): the union of the paragraphs;
* a folder of ``.txt`` / ``.md`` files, chunked by words.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NotRequired

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


def _passage(
    path: Path, lineno: int, record: dict[str, Any], where: str = "", *, extra: bool = True
) -> Document:
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
    fields = {k: v for k, v in record.items() if k not in PASSAGE_FIELDS and v is not None}
    return make_document(
        text.strip(),
        title.strip(),
        str(doc_id) if doc_id not in (None, "") else None,
        fields if extra else None,
    )


def load_jsonl(path: Path) -> list[Document]:
    """Passages from a passage JSONL or a dataset JSONL (paragraph union, first id wins)."""
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
                doc = _passage(path, lineno, para, f"paragraphs[{i}]: ", extra=False)
                docs.setdefault(doc["id"], doc)
        else:
            doc = _passage(path, lineno, record)
            docs.setdefault(doc["id"], doc)
    return list(docs.values())


def chunk_words(text: str, size: int = 200, overlap: int = 40) -> list[str]:
    if size <= 0 or not 0 <= overlap < size:
        raise InputError(
            f"bad chunking: size={size}, overlap={overlap}", hint="use size > overlap >= 0"
        )
    words = text.split()
    if not words:
        return []
    step = size - overlap
    return [" ".join(words[i : i + size]) for i in range(0, max(1, len(words) - overlap), step)]


#: Suffixes indexed from a folder; other files are skipped (and reported).
TEXT_SUFFIXES = (".txt", ".md")


def _read_text_file(file: Path) -> str | None:
    """The file's text, or None when it is binary (NUL bytes) or not UTF-8."""
    data = file.read_bytes()
    if b"\x00" in data[:8192]:
        return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None


def load_folder(
    path: Path,
    *,
    chunk_size: int = 200,
    overlap: int = 40,
    skipped: list[str] | None = None,
) -> list[Document]:
    """Chunks of every UTF-8 ``.txt`` / ``.md`` file under ``path``.

    Files that are binary or not UTF-8 text are skipped, not fatal: each is appended to
    ``skipped`` as ``"file (reason)"`` so the caller can report it.
    """
    docs: list[Document] = []
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES)
    for file in files:
        try:
            text = _read_text_file(file)
        except OSError as exc:
            raise InputError(
                f"cannot read {file}: {exc.strerror}", hint="check the file's permissions"
            ) from None
        if text is None:
            if skipped is not None:
                skipped.append(f"{file} (binary or not UTF-8)")
            continue
        rel = str(file.relative_to(path))
        for i, chunk in enumerate(chunk_words(text, chunk_size, overlap)):
            docs.append(make_document(chunk, file.stem, f"{rel}#{i}", {"source": rel}))
    return docs


def load_documents(
    paths: Iterable[str | Path],
    *,
    chunk_size: int = 200,
    overlap: int = 40,
    skipped: list[str] | None = None,
) -> list[Document]:
    """Load and merge every source; duplicate ids keep their first occurrence.

    Unreadable files inside a folder are listed in ``skipped`` (see :func:`load_folder`);
    a malformed JSONL file is an :class:`InputError` naming the file and line.
    """
    merged: dict[str, Document] = {}
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            loaded = load_folder(path, chunk_size=chunk_size, overlap=overlap, skipped=skipped)
        elif path.exists():
            loaded = load_jsonl(path)
        else:
            raise InputError(
                f"no such file or folder: {path}",
                hint="give a JSONL file or a folder of .txt/.md files",
            )
        for doc in loaded:
            merged.setdefault(doc["id"], doc)
    if not merged:
        raise InputError(
            "no documents found in the given sources", hint="check the paths and file types"
        )
    return list(merged.values())


def corpus_hash(docs: Iterable[Document]) -> str:
    digest = hashlib.sha256()
    for doc in docs:
        digest.update(f"{doc['id']}\x00{doc['title']}\x00{doc['text']}\x01".encode())
    return digest.hexdigest()[:16]
