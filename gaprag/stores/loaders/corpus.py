"""From paths to passages: pick each file's loader, split, name every passage.

A folder is walked (hidden files and folders left out); a file is read by the loader for its
suffix. Each passage's ``metadata["source"]`` is its file's path relative to the folder named
on the command line (a file named on its own: its file name); the same relative path under
two folders is kept twice, each prefixed with its folder's name. Passages are split by
LangChain's ``RecursiveCharacterTextSplitter`` measuring length in words, so the chunk size is
the word budget the methods' prompts expect; a passage's id is ``source#n``, numbered per file
(JSONL records keep their own ids and are never split).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from langchain_core.documents import Document as LCDocument
from langchain_text_splitters import RecursiveCharacterTextSplitter

from gaprag.errors import InputError
from gaprag.stores.documents import Document, from_langchain
from gaprag.stores.loaders.base import FileLoader, SkipFile
from gaprag.stores.loaders.docx import DocxLoader
from gaprag.stores.loaders.html import HTMLLoader
from gaprag.stores.loaders.jsonl import JSONLLoader
from gaprag.stores.loaders.markdown import MarkdownLoader
from gaprag.stores.loaders.pdf import PDFLoader
from gaprag.stores.loaders.table import CSVLoader
from gaprag.stores.loaders.text import TextLoader

#: suffix -> the loader that reads it
LOADERS: dict[str, type[FileLoader]] = {
    suffix: loader
    for loader in (
        TextLoader, MarkdownLoader, PDFLoader, HTMLLoader, CSVLoader, JSONLLoader, DocxLoader
    )
    for suffix in loader.suffixes
}  # fmt: skip

CHUNK_WORDS = 200
OVERLAP_WORDS = 40


def _words(text: str) -> int:
    return len(text.split())


def splitter(
    chunk_size: int = CHUNK_WORDS, overlap: int = OVERLAP_WORDS
) -> RecursiveCharacterTextSplitter:
    """The one passage splitter: paragraphs, then lines, then words, at most ``chunk_size``
    words a passage with ``overlap`` words carried over."""
    if chunk_size <= 0 or not 0 <= overlap < chunk_size:
        raise InputError(
            f"bad chunking: size={chunk_size}, overlap={overlap}", hint="use size > overlap >= 0"
        )
    return RecursiveCharacterTextSplitter(
        chunk_size=chunk_size, chunk_overlap=overlap, length_function=_words
    )


def split_documents(
    docs: Iterable[LCDocument], chunk_size: int = CHUNK_WORDS, overlap: int = OVERLAP_WORDS
) -> list[LCDocument]:
    """``docs`` (any loader's) cut into passages, each with its id ``source#n``."""
    cut = splitter(chunk_size, overlap).split_documents(docs)
    numbers: dict[str, int] = {}
    for doc in cut:
        source = str(doc.metadata.get("source", ""))
        n = numbers.get(source, 0)
        numbers[source] = n + 1
        doc.id = f"{source}#{n}"
        doc.metadata["id"] = doc.id
    return cut


@dataclass
class Corpus:
    """What :func:`load_corpus` read: the passages, and what it left out and why."""

    documents: list[Document] = field(default_factory=list)
    #: every source read (a file that is now empty included), by the folder it was read from
    sources: dict[str, Path] = field(default_factory=dict)
    #: ``"file (reason)"`` for each file not indexed
    skipped: list[str] = field(default_factory=list)
    #: repeated ids (first kept) and relative paths found under two folders
    duplicates: list[str] = field(default_factory=list)


def supported() -> str:
    return ", ".join(sorted(LOADERS))


def _files(paths: Sequence[str | Path], corpus: Corpus) -> list[tuple[Path, Path, str]]:
    """(root, file, path relative to root) for every file to read, in order."""
    found: list[tuple[Path, Path, str]] = []
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for file in sorted(path.rglob("*")):
                inside = file.relative_to(path)
                if any(part.startswith(".") for part in inside.parts) or not file.is_file():
                    continue
                if file.suffix.lower() not in LOADERS:
                    corpus.skipped.append(f"{file} (unknown type {file.suffix or 'no suffix'})")
                    continue
                if file.resolve() not in seen:
                    seen.add(file.resolve())
                    found.append((path, file, inside.as_posix()))
        elif path.is_file():
            if path.suffix.lower() not in LOADERS:
                raise InputError(
                    f"{path}: unknown file type {path.suffix or '(no suffix)'}",
                    hint=f"gaprag index reads {supported()} files and folders of them",
                )
            if path.resolve() not in seen:
                seen.add(path.resolve())
                found.append((path.parent, path, path.name))
        else:
            raise InputError(
                f"no such file or folder: {path}",
                hint=f"give folders or files of these types: {supported()}",
            )
    # one relative path under two folders: both kept, each named with its folder
    roots: dict[str, set[Path]] = {}
    for root, _, rel in found:
        roots.setdefault(rel, set()).add(root.resolve())
    out: list[tuple[Path, Path, str]] = []
    for root, file, rel in found:
        if len(roots[rel]) > 1:
            named = f"{root.resolve().name}/{rel}"
            corpus.duplicates.append(
                f"{rel} is in {len(roots[rel])} folders: {file} kept as {named}"
            )
            rel = named
        out.append((root, file, rel))
    return out


def load_corpus(
    paths: Sequence[str | Path],
    *,
    chunk_size: int = CHUNK_WORDS,
    overlap: int = OVERLAP_WORDS,
    explicit_errors: bool = True,
) -> Corpus:
    """Read, split and name every passage of ``paths`` (folders and files).

    A file in a folder that cannot be read is listed in ``skipped`` with its reason; a file
    named directly with an unknown type is an :class:`InputError`, and so is a malformed JSONL
    named directly (``explicit_errors=False`` skips it too).
    """
    corpus = Corpus()
    splitter(chunk_size, overlap)  # refuse bad settings before reading anything
    explicit = {Path(p).resolve() for p in paths if Path(p).is_file()}
    merged: dict[str, Document] = {}
    for root, file, rel in _files(paths, corpus):
        loader = LOADERS[file.suffix.lower()](file, rel)
        try:
            loaded = list(loader.lazy_load())
        except SkipFile as why:
            corpus.skipped.append(f"{file} ({why})")
            continue
        except InputError as err:
            if explicit_errors and file.resolve() in explicit:
                raise
            corpus.skipped.append(f"{file} ({err})")
            continue
        except OSError as exc:
            raise InputError(
                f"cannot read {file}: {exc.strerror}", hint="check the file's permissions"
            ) from None
        if isinstance(loader, JSONLLoader):
            corpus.duplicates.extend(
                f"{d} (repeated id: the first is kept)" for d in loader.duplicates
            )
        else:
            loaded = split_documents(loaded, chunk_size, overlap)
        corpus.sources[rel] = root.resolve()
        for doc in loaded:
            passage = from_langchain(doc)
            if passage["id"] in merged:
                corpus.duplicates.append(
                    f"{file}: {passage['id']} (repeated id: the first is kept)"
                )
                continue
            merged[passage["id"]] = passage
    corpus.documents = list(merged.values())
    return corpus


def keep_apart(corpus: Corpus, known: Mapping[str, str]) -> None:
    """Rename the sources of ``corpus`` that a store already holds from another folder.

    ``known`` maps each source in the store to the folder it was read from. A source read now
    from a different folder, while the file in the first folder still exists, is another file
    with the same relative path: it becomes ``<folder name>/<path>`` (its passages' ids too), so
    both are kept. A first folder that no longer has the file was moved: the source is the same.
    """
    for source, root in list(corpus.sources.items()):
        first = known.get(source)
        if first is None or Path(first) == root or not (Path(first) / source).is_file():
            continue
        named = f"{root.name}/{source}"
        corpus.duplicates.append(f"{source} is also in {first}: {root / source} kept as {named}")
        del corpus.sources[source]
        corpus.sources[named] = root
        for doc in corpus.documents:
            meta = doc.get("metadata", {})
            if meta.get("source") != source:
                continue
            meta["source"] = named
            if doc["id"].startswith(f"{source}#"):
                doc["id"] = named + doc["id"][len(source) :]


def load_documents(
    paths: Iterable[str | Path],
    *,
    chunk_size: int = CHUNK_WORDS,
    overlap: int = OVERLAP_WORDS,
    skipped: list[str] | None = None,
) -> list[Document]:
    """The passages of ``paths`` (see :func:`load_corpus`); files left out are appended to
    ``skipped``. No passage at all is an :class:`InputError`."""
    corpus = load_corpus(list(paths), chunk_size=chunk_size, overlap=overlap)
    if skipped is not None:
        skipped.extend(corpus.skipped)
    if not corpus.documents:
        raise InputError(
            "no documents found in the given sources",
            hint=f"check the paths and file types (gaprag reads {supported()})",
        )
    return corpus.documents
