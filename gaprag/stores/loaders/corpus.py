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

import functools
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from langchain_core.documents import Document as LCDocument
from langchain_text_splitters import RecursiveCharacterTextSplitter

from gaprag.errors import InputError
from gaprag.stores.documents import Document, from_langchain
from gaprag.stores.loaders.base import FileLoader, SkipFile, empty_file
from gaprag.stores.loaders.docx import DocxLoader
from gaprag.stores.loaders.html import HTMLLoader
from gaprag.stores.loaders.jsonl import JSONLLoader
from gaprag.stores.loaders.markdown import MarkdownLoader
from gaprag.stores.loaders.pdf import PDFLoader
from gaprag.stores.loaders.table import CSVLoader
from gaprag.stores.loaders.text import TextLoader
from gaprag.stores.versions import RECORD

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
    docs: Iterable[LCDocument],
    chunk_size: int = CHUNK_WORDS,
    overlap: int = OVERLAP_WORDS,
    *,
    numbers: dict[str, int] | None = None,
) -> list[LCDocument]:
    """``docs`` (any loader's) cut into passages, each with its id ``source#n``; ``numbers``
    (source -> passages numbered so far) carries the numbering on from an earlier call."""
    cut = _splitter(chunk_size, overlap).split_documents(docs)
    numbers = {} if numbers is None else numbers
    for doc in cut:
        source = str(doc.metadata.get("source", ""))
        n = numbers.get(source, 0)
        numbers[source] = n + 1
        doc.id = f"{source}#{n}"
        doc.metadata["id"] = doc.id
    return cut


#: a file this large gets a warning with its passages and estimated embedding time
LARGE_BYTES = 20 << 20


@functools.lru_cache(maxsize=8)
def _splitter(chunk_size: int, overlap: int) -> RecursiveCharacterTextSplitter:
    return splitter(chunk_size, overlap)


@dataclass
class FileReport:
    """What became of one file: read (``passages``, perhaps none) or skipped (``reason``,
    ``hint``). ``failed``: the file is there but could not be read this time, so a store keeps
    the passages it holds of it."""

    path: Path
    source: str = ""
    passages: int = 0
    reason: str = ""
    hint: str = ""
    failed: bool = False
    notes: list[str] = field(default_factory=list)
    size: int = 0

    @property
    def skipped(self) -> bool:
        return bool(self.reason)

    def why(self) -> str:
        """``reason (hint: ...)``, and what was noticed reading it (``read as cp1252``)."""
        hint = f" (hint: {self.hint})" if self.hint else ""
        notes = f" ({'; '.join(self.notes)})" if self.notes else ""
        return f"{self.reason}{hint}{notes}"


@dataclass
class Corpus:
    """What :func:`load_corpus` read: the passages, and a report line for every file."""

    documents: list[Document] = field(default_factory=list)
    #: every source read (a file that is now empty included), by the folder it was read from
    sources: dict[str, Path] = field(default_factory=dict)
    #: one per file found (and per link or store folder left out), in order
    files: list[FileReport] = field(default_factory=list)
    #: repeated ids (first kept) and relative paths found under two folders
    duplicates: list[str] = field(default_factory=list)

    @property
    def skipped(self) -> list[str]:
        """``"file (reason)"`` for each file not indexed."""
        return [f"{f.path} ({f.reason})" for f in self.files if f.skipped]

    @property
    def failed(self) -> list[str]:
        """The sources of the files that are there but could not be read this time: a store
        keeps their passages, whatever its clean-up."""
        return [f.source for f in self.files if f.failed and f.source]

    @property
    def large(self) -> list[FileReport]:
        """The files read of at least :data:`LARGE_BYTES`."""
        return [f for f in self.files if f.size >= LARGE_BYTES and not f.skipped]


def supported() -> str:
    return ", ".join(sorted(LOADERS))


def is_store(folder: Path) -> bool:
    """Whether ``folder`` is a gaprag store (its own files are never indexed): it has the
    store's record, or a ``CURRENT`` naming a version with a manifest (an older store)."""
    if (folder / RECORD).is_file():
        return True
    try:
        version = (folder / "CURRENT").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return False
    return bool(version) and "/" not in version and (folder / version / "manifest.json").is_file()


@dataclass
class _Walk:
    """The folders being indexed, and what a walk may enter."""

    roots: list[Path]
    exclude: list[Path]
    follow: bool
    corpus: Corpus

    def inside(self, target: Path) -> bool:
        return any(target.is_relative_to(r) for r in self.roots)

    def left_out(self, path: Path, reason: str, hint: str = "") -> None:
        self.corpus.files.append(FileReport(path, reason=reason, hint=hint))

    def enter(self, folder: Path, seen: set[Path]) -> bool:
        """Whether to walk into ``folder`` (reporting a store or a link left out)."""
        real = folder.resolve()
        if real in self.exclude or is_store(folder):
            self.left_out(folder, "a gaprag store: never indexed")
            return False
        if folder.is_symlink() and not (self.follow or self.inside(real)):
            self.left_out(folder, "symbolic link to a folder outside the indexed folders",
                          "give --follow-symlinks to index what it points to")  # fmt: skip
            return False
        if (folder.is_symlink() and not self.follow) or real in seen:
            return False  # inside: walked by its own path; or a loop
        seen.add(real)
        return True

    def take(self, file: Path) -> bool:
        """Whether ``file`` (in a folder being walked) is one to read."""
        if file.is_symlink():
            if not file.exists():
                self.left_out(file, "broken symbolic link")
                return False
            if not (self.follow or self.inside(file.resolve())):
                self.left_out(file, "symbolic link to a file outside the indexed folders",
                              "give --follow-symlinks to index it")  # fmt: skip
                return False
        if not file.is_file():
            return False
        if file.suffix.lower() not in LOADERS:
            self.left_out(file, f"unknown type {file.suffix or 'no suffix'}",
                          f"gaprag reads {supported()}")  # fmt: skip
            return False
        return True

    def files(self, root: Path) -> Iterator[Path]:
        """The files to read under ``root``, in order (hidden files and folders left out)."""
        seen = {root.resolve()}
        for dirpath, dirnames, filenames in os.walk(root, followlinks=self.follow):
            here = Path(dirpath)
            dirnames[:] = [
                d for d in sorted(dirnames) if not d.startswith(".") and self.enter(here / d, seen)
            ]
            for name in sorted(filenames):
                if not name.startswith(".") and self.take(here / name):
                    yield here / name


def _files(
    paths: Sequence[str | Path], corpus: Corpus, exclude: Sequence[str | Path], follow: bool
) -> list[tuple[Path, Path, str, bool]]:
    """(folder it was read from, resolved; file; path relative to it; named directly) for
    every file to read, in order."""
    folders = [Path(p) for p in paths if Path(p).is_dir()]
    walk = _Walk([p.resolve() for p in folders], [Path(e).resolve() for e in exclude], follow,
                 corpus)  # fmt: skip
    found: list[tuple[Path, Path, str, bool]] = []
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            if not walk.enter(path, set()):
                continue
            files = [(f, f.relative_to(path).as_posix()) for f in walk.files(path)]
        elif path.is_file():
            if path.suffix.lower() not in LOADERS:
                raise InputError(
                    f"{path}: unknown file type {path.suffix or '(no suffix)'}",
                    hint=f"gaprag index reads {supported()} files and folders of them",
                )
            files = [(path, path.name)]
        else:
            raise InputError(
                f"no such file or folder: {path}",
                hint=f"give folders or files of these types: {supported()}",
            )
        root = (path if path.is_dir() else path.parent).resolve()
        for file, rel in files:
            # a walked file's real path is its folder's and its own unless a link leads there
            real = (
                file.resolve() if follow or file.is_symlink() or not path.is_dir() else root / rel
            )
            if real not in seen:
                seen.add(real)
                found.append((root, file, rel, not path.is_dir()))
    # one relative path under two folders: both kept, each named with its folder
    roots: dict[str, set[Path]] = {}
    for root, _, rel, _ in found:
        roots.setdefault(rel, set()).add(root)
    out: list[tuple[Path, Path, str, bool]] = []
    for root, file, rel, named in found:
        if len(roots[rel]) > 1:
            renamed = f"{root.name}/{rel}"
            corpus.duplicates.append(
                f"{rel} is in {len(roots[rel])} folders: {file} kept as {renamed}"
            )
            rel = renamed
        out.append((root, file, rel, named))
    return out


def _read(
    file: Path,
    rel: str,
    report: FileReport,
    corpus: Corpus,
    explicit: bool,
    chunks: tuple[int, int],
) -> list[Document] | None:
    """``file``'s passages, or None when it was skipped (``report`` says why). A loader's
    documents (a text file's blocks of about 1 MB) are split and made passages one at a time,
    so a large file's text is held once, as its passages."""
    loader = LOADERS[file.suffix.lower()](file, rel)
    chunk_size, overlap = chunks
    numbers: dict[str, int] = {}
    passages: list[Document] = []
    try:
        report.size = file.stat().st_size
        if report.size == 0:
            raise empty_file()
        for loaded in loader.lazy_load():
            cut = [loaded] if loader.passages else split_documents(
                [loaded], chunk_size, overlap, numbers=numbers
            )  # fmt: skip
            passages.extend(from_langchain(doc) for doc in cut)
    except SkipFile as why:
        report.reason, report.hint, report.failed = why.reason, why.hint, why.failed
        report.notes += loader.notes
        return None
    except InputError as err:
        if explicit:
            raise
        report.reason, report.hint, report.failed = err.message, err.hint, True
        return None
    except OSError as exc:
        report.reason = f"unreadable: {exc.strerror or exc}"
        report.hint, report.failed = "check the file's permissions", True
        return None
    report.notes += loader.notes
    if isinstance(loader, JSONLLoader):
        corpus.duplicates.extend(f"{d} (repeated id: the first is kept)" for d in loader.duplicates)
    if not passages:
        report.reason, report.hint = "no text", "the file has no text to index"
    return passages


def load_corpus(
    paths: Sequence[str | Path],
    *,
    chunk_size: int = CHUNK_WORDS,
    overlap: int = OVERLAP_WORDS,
    explicit_errors: bool = True,
    exclude: Sequence[str | Path] = (),
    follow_symlinks: bool = False,
) -> Corpus:
    """Read, split and name every passage of ``paths`` (folders and files).

    Every file found gets a :class:`FileReport` in ``files``: read, or skipped with its
    reason and hint (empty, unreadable, encrypted, its encoding, a link leading outside the
    folders named, which ``follow_symlinks`` follows). The folders in ``exclude`` (the store
    being written) and every gaprag store are never read. A file named directly with an
    unknown type is an :class:`InputError`, and so is a malformed JSONL named directly
    (``explicit_errors=False`` skips it too).
    """
    corpus = Corpus()
    splitter(chunk_size, overlap)  # refuse bad settings before reading anything
    merged: dict[str, Document] = {}
    for root, file, rel, named in _files(paths, corpus, exclude, follow_symlinks):
        report = FileReport(file, source=rel)
        corpus.files.append(report)
        loaded = _read(file, rel, report, corpus, explicit_errors and named, (chunk_size, overlap))
        if report.failed:
            continue
        corpus.sources[rel] = root
        for passage in loaded or []:
            if passage["id"] in merged:
                corpus.duplicates.append(
                    f"{file}: {passage['id']} (repeated id: the first is kept)"
                )
                continue
            merged[passage["id"]] = passage
            report.passages += 1
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
