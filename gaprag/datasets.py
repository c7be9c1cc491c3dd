"""Evaluation datasets: the bundled dev sets and any JSONL of the same format.

Record format (one JSON object per line; see ``gaprag/data/eval/SOURCES.md``)::

    {"id": str, "question": str, "answers": [str, ...],
     "supporting": [paragraph id, ...], "type": str,
     "paragraphs": [{"id", "title", "text"}, ...],
     "options": {letter: text}, "meta": {"answer_idx": letter, ...}}

``id``, ``question`` and ``answers`` are required; the rest is optional. The retrieval corpus
of a dataset is the union of the paragraphs of *all* its questions (whatever ``--limit``), so
every run on a dataset uses the same store, built once and cached by content hash.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from gaprag.errors import InputError
from gaprag.stores.documents import Document, corpus_hash, read_jsonl
from gaprag.stores.embeddings import Embedder
from gaprag.stores.store import Store

SUFFIX = ".dev.jsonl"

# Evaluation split discipline (docs/evaluation.md): reported results use questions 0-49 of a
# bundled set (--limit 50); anything tuned, trained or calibrated uses questions from index 60
# on (50-59 are a buffer, used by neither).
REPORTED_QUESTIONS = 50
CALIBRATION_START = 60

T = TypeVar("T")


def data_dir() -> Path:
    return Path(str(resources.files("gaprag") / "data" / "eval"))


def bundled() -> list[str]:
    """Names of the bundled evaluation sets (``NAME.dev.jsonl`` in ``gaprag/data/eval``)."""
    return sorted(p.name[: -len(SUFFIX)] for p in data_dir().glob(f"*{SUFFIX}"))


@dataclass(frozen=True)
class Example:
    id: str
    question: str
    answers: list[str]
    supporting: list[str] = field(default_factory=list)
    type: str = ""
    paragraphs: list[Document] = field(default_factory=list)
    options: dict[str, str] = field(default_factory=dict)
    answer_idx: str | None = None  # the correct option's key, for multiple choice

    @property
    def is_multiple_choice(self) -> bool:
        return bool(self.options)

    def prompt(self) -> str:
        """The question as sent to a method: for multiple choice, a line ``Options:`` and one
        line ``A. text`` per option follow the question.

        The block is last, so methods can split it off (missing_knowledge does).
        """
        if not self.options:
            return self.question
        lines = [f"{key}. {text}" for key, text in self.options.items()]
        return f"{self.question}\nOptions:\n" + "\n".join(lines)


@dataclass(frozen=True)
class Dataset:
    name: str
    path: Path
    examples: list[Example]
    sha256: str

    def __len__(self) -> int:
        return len(self.examples)

    def select(self, limit: int | None = None, offset: int = 0) -> list[Example]:
        """Questions in file order: ``limit`` of them starting at ``offset`` (all if None)."""
        if offset < 0 or (limit is not None and limit < 0):
            raise InputError("--limit and --offset must be >= 0", hint="e.g. --limit 100")
        end = None if limit is None else offset + limit
        return self.examples[offset:end]

    def documents(self) -> list[Document]:
        """The corpus: the union of every question's paragraphs, first occurrence of an id wins."""
        docs: dict[str, Document] = {}
        for ex in self.examples:
            for para in ex.paragraphs:
                docs.setdefault(para["id"], para)
        return list(docs.values())


def _fail(path: Path, lineno: int, message: str) -> InputError:
    return InputError(
        f"{path}:{lineno}: {message}",
        hint="records need 'id' (str), 'question' (str), 'answers' (list of str); "
        "optional 'supporting' (list of str), 'paragraphs' (list of {id,title,text}), "
        "'options' ({letter: text})",
    )


def _str_list(
    path: Path, lineno: int, record: dict[str, Any], name: str, *, required: bool
) -> list[str]:
    if name not in record or record[name] is None:
        if required:
            raise _fail(path, lineno, f"field {name!r} is missing")
        return []
    value = record[name]
    if isinstance(value, str) and name == "answers":
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(path, lineno, f"field {name!r} must be a list of strings")
    if required and not any(v.strip() for v in value):
        raise _fail(path, lineno, f"field {name!r} is empty")
    return list(value)


def _paragraphs(path: Path, lineno: int, record: dict[str, Any]) -> list[Document]:
    raw = record.get("paragraphs")
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _fail(path, lineno, "field 'paragraphs' must be a list")
    out: list[Document] = []
    for i, para in enumerate(raw):
        if not isinstance(para, dict):
            raise _fail(path, lineno, f"paragraphs[{i}] must be an object")
        text, title, pid = para.get("text"), para.get("title") or "", para.get("id")
        if not isinstance(text, str) or not text.strip():
            raise _fail(path, lineno, f"field 'paragraphs[{i}].text' is missing or empty")
        if not isinstance(title, str):
            raise _fail(path, lineno, f"field 'paragraphs[{i}].title' must be a string")
        if not isinstance(pid, str | int) or str(pid) == "":
            raise _fail(path, lineno, f"field 'paragraphs[{i}].id' is missing")
        out.append(Document(id=str(pid), title=title.strip(), text=text.strip()))
    return out


def _options(path: Path, lineno: int, record: dict[str, Any]) -> dict[str, str]:
    raw = record.get("options")
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw.items()
    ):
        raise _fail(path, lineno, "field 'options' must be an object {letter: text}")
    return dict(raw)


def parse_record(path: Path, lineno: int, record: dict[str, Any]) -> Example:
    """One validated :class:`Example`; an :class:`InputError` names the line and field."""
    rid = record.get("id")
    if isinstance(rid, bool) or not isinstance(rid, str | int) or str(rid).strip() == "":
        raise _fail(path, lineno, "field 'id' is missing or empty")
    question = record.get("question")
    if not isinstance(question, str) or not question.strip():
        raise _fail(path, lineno, "field 'question' is missing or empty")
    answers = _str_list(path, lineno, record, "answers", required=True)
    supporting = _str_list(path, lineno, record, "supporting", required=False)
    qtype = record.get("type") or ""
    if not isinstance(qtype, str):
        raise _fail(path, lineno, "field 'type' must be a string")
    options = _options(path, lineno, record)
    meta = record.get("meta") if isinstance(record.get("meta"), dict) else {}
    idx = record.get("answer_idx", meta.get("answer_idx") if meta else None)
    return Example(
        id=str(rid).strip(),
        question=question.strip(),
        answers=answers,
        supporting=supporting,
        type=qtype,
        paragraphs=_paragraphs(path, lineno, record),
        options=options,
        answer_idx=idx if isinstance(idx, str) and idx in options else None,
    )


def resolve(name_or_path: str | Path) -> tuple[str, Path]:
    """A bundled name or a file path -> (dataset name, file path)."""
    raw = str(name_or_path)
    if raw in bundled():
        return raw, data_dir() / f"{raw}{SUFFIX}"
    path = Path(raw).expanduser()
    if path.is_file():
        name = path.name
        for suffix in (SUFFIX, ".jsonl", ".json"):
            if name.endswith(suffix):
                name = name[: -len(suffix)]
                break
        return name, path
    raise InputError(
        f"no bundled dataset or file named {raw!r}",
        hint="bundled: " + ", ".join(bundled()) + "; or give the path of a dataset JSONL",
    )


def load_dataset(name_or_path: str | Path) -> Dataset:
    """Read and validate a whole dataset file (bundled name or path)."""
    name, path = resolve(name_or_path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}", hint="check the path") from None
    examples: list[Example] = []
    seen: dict[str, int] = {}
    for lineno, record in read_jsonl(path, hint=_fail(path, 0, "").hint):
        ex = parse_record(path, lineno, record)
        if ex.id in seen:
            raise _fail(path, lineno, f"duplicate id {ex.id!r} (first on line {seen[ex.id]})")
        seen[ex.id] = lineno
        examples.append(ex)
    if not examples:
        raise InputError(
            f"{path}: no records", hint="a dataset is a JSONL file, one question a line"
        )
    return Dataset(name=name, path=path, examples=examples, sha256=hashlib.sha256(data).hexdigest())


def dataset_store(
    dataset: Dataset, *, embedder: Embedder | None = None, progress: bool = True
) -> Store:
    """The store over the dataset's paragraph union, built once under ``GAPRAG_HOME/stores``."""
    docs = dataset.documents()
    if not docs:
        raise InputError(
            f"dataset {dataset.name!r} has no paragraphs to build a corpus from",
            hint="pass --store DIR with a store built by `gaprag index`",
        )
    if embedder is None:
        from gaprag.stores.demo import store_for

        return store_for(docs, f"eval-{dataset.name}", progress=progress)
    from gaprag.config import gaprag_home

    root = gaprag_home() / "stores" / f"eval-{dataset.name}-{corpus_hash(docs)}-{embedder.name}"
    if Store.exists(root):
        return Store.open(root, embedder=embedder)
    return Store.build(root, docs, embedder=embedder, progress=progress)


# -- split discipline ----------------------------------------------------------------------
def check_no_overlap(
    indices: Iterable[int], *, start: int = CALIBRATION_START, what: str = "calibration"
) -> None:
    """Refuse (:class:`InputError`) question indices below ``start`` for tuning or training.

    Questions 0-49 of every bundled set are the reported evaluation questions and 50-59 a
    buffer; anything tuned, trained or calibrated must use index ``CALIBRATION_START`` (60)
    on. ``start`` may be raised, never lowered below 60.
    """
    if start < CALIBRATION_START:
        raise InputError(
            f"{what} may not start at question {start}: questions 0-{CALIBRATION_START - 1} "
            f"are reserved (0-{REPORTED_QUESTIONS - 1} are the reported evaluation questions)",
            hint=f"use questions from index {CALIBRATION_START} on",
        )
    bad = sorted({i for i in indices if i < start})
    if bad:
        shown = ", ".join(str(i) for i in bad[:5]) + (", ..." if len(bad) > 5 else "")
        raise InputError(
            f"{what} would use {len(bad)} reserved question(s) (index {shown}); "
            f"questions 0-{REPORTED_QUESTIONS - 1} are the reported evaluation questions",
            hint=f"use questions from index {start} on (e.g. calibration_slice(examples))",
        )


def calibration_slice(
    examples: Sequence[T],
    start: int = CALIBRATION_START,
    limit: int | None = None,
    *,
    what: str = "calibration",
) -> list[T]:
    """The questions a tuning, training or calibration script may use: ``examples[start:]``
    (at most ``limit``), refusing any ``start`` that overlaps the reported questions."""
    if limit is not None and limit < 0:
        raise InputError(f"{what}: limit must be >= 0", hint="e.g. --limit 100")
    end = len(examples) if limit is None else min(len(examples), start + limit)
    check_no_overlap(range(start, end), start=start, what=what)
    if start >= len(examples):
        raise InputError(
            f"{what}: no questions from index {start} on ({len(examples)} in the set)",
            hint="use a larger set",
        )
    return list(examples[start:end])
