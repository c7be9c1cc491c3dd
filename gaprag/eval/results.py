"""The results file of an evaluation, ``results.jsonl``: one :class:`Row` per (method,
question), appended as each finishes.

Each row is one complete line written with one ``write`` call; a torn tail left by a killed
run is cut off (with a warning) when the file is opened again, so that question is run again.
:func:`read_results` reads any version of the file and :func:`normalize_row` brings an older
row to the current format (:data:`FORMAT_VERSION`, recorded in ``run.json``). A directory is
written by one ``gaprag eval`` at a time (:class:`RunLock`).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

RESULTS = "results.jsonl"
LOCK_FILE = ".gaprag-eval.lock"
#: the row format: 1 had ``support_recall`` over every retrieved id and no
#: ``retrieval_recall``; 2 (now) has both (shown and retrieved ids)
FORMAT_VERSION = 2


class RowFields(TypedDict):
    """The fields every row has (``None`` where a value is unknown or the question failed)."""

    dataset: str
    id: str
    method: str  # the method, or the name of a variant of it
    question: str
    answers: list[str]
    prediction: str
    em: float | None
    f1: float | None
    acc: float | None
    support_recall: float | None  # gold supporting paragraphs among those shown to a prompt
    retrieval_recall: float | None  # ... among those any retrieval returned
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    retrieval_calls: int
    iterations: int
    stop_reason: str
    wall_s: float
    error: str | None
    base_method: str
    decisions: list[dict[str, Any]]
    shown_ids: list[str] | None
    retrieved_ids: list[str]
    cached_tokens: int | None
    instruction_tokens: int | None
    passage_tokens: int | None
    short_answer_calls: int  # LLM calls the shared short-answer step added (in llm_calls)
    type: str  # the question's type in its dataset
    evidence_ids: list[str]
    options: dict[str, Any]  # the method options of the run (explicit settings)


class Row(RowFields, total=False):
    """One row of ``results.jsonl``: :class:`RowFields` and the fields some rows have."""

    choice: str | None  # multiple choice: the option the prediction names
    choice_correct: float | None
    missing: Any  # the knowledge a method reported missing
    candidates: list[dict[str, Any]]  # a composed graph's answers: method, answer, p, llm_calls
    legacy_recall: bool  # set by normalize_row on a format-1 row


RESULT_FIELDS: tuple[str, ...] = tuple(RowFields.__annotations__)


def normalize_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row in the current format: a format-1 row's ``support_recall`` (every retrieved id)
    becomes its ``retrieval_recall``, and its support recall is unknown."""
    out = dict(row)
    if "retrieval_recall" not in out:
        out["retrieval_recall"] = out.get("support_recall")
        out["support_recall"] = None
        out["legacy_recall"] = True
    return out


def read_results(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a ``results.jsonl`` (a directory or the file); incomplete lines are skipped."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS
    if not path.is_file():
        return []
    rows: list[dict[str, Any]] = []
    torn = 0
    for line in path.read_text(encoding="utf-8").split("\n"):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            torn += 1  # a line cut short when a run was killed mid-write
            continue
        if isinstance(row, dict):
            rows.append(row)
    if torn:
        warnings.warn(f"{path}: skipped {torn} incomplete line(s)", stacklevel=2)
    return rows


def cut_torn_tail(path: Path) -> None:
    """Drop an incomplete last line (a run killed while writing it), with a warning."""
    if not path.is_file():
        return
    size = path.stat().st_size
    if not size:
        return
    with path.open("rb+") as fh:
        # the last line: scan back from the end in bounded steps for the newline before it
        end = size
        fh.seek(size - 1)
        complete = fh.read(1) == b"\n"
        if complete:
            end = size - 1  # look at the last line proper
        start, step = end, 1 << 16
        while start > 0:
            start = max(0, start - step)
            fh.seek(start)
            chunk = fh.read(end - start)
            cut = chunk.rfind(b"\n")
            if cut >= 0:
                start += cut + 1
                break
        fh.seek(start)
        last = fh.read(end - start)
        if complete:
            try:
                json.loads(last.decode("utf-8"))
                return
            except (UnicodeDecodeError, ValueError):
                pass  # a torn line followed by a newline (written by older versions)
        fh.truncate(start)
    warnings.warn(
        f"{path}: dropped an incomplete last line (a run was killed while writing it); "
        "that question runs again",
        stacklevel=3,
    )


class ResultsWriter:
    """Append-only JSONL: each row is one complete line, written by one ``write`` call.

    Opening cuts a torn last line left by a killed run (so the file holds only complete rows).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        cut_torn_tail(path)
        self._fd = self._open()

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _follow_the_path(self) -> None:
        """Reopen when the file at ``path`` is no longer the one open here (replaced by a git
        checkout or stash, a sync, an editor): rows written to the old file would be lost."""
        mine = os.fstat(self._fd)
        try:
            there = os.stat(self.path)
        except FileNotFoundError:
            there = None
        if there is not None and (there.st_dev, there.st_ino) == (mine.st_dev, mine.st_ino):
            return
        warnings.warn(
            f"{self.path} was replaced or removed during the run; rows go on to the file now "
            "at that path",
            stacklevel=3,
        )
        os.close(self._fd)
        self._fd = self._open()

    def write(self, row: Mapping[str, Any]) -> None:
        self._follow_the_path()
        data = (json.dumps(row, ensure_ascii=False, default=str) + "\n").encode("utf-8")
        view = memoryview(data)
        for _ in range(1000):  # a short write is continued; bounded
            if not view:
                break
            done = os.write(self._fd, view)
            view = view[done:]

    def close(self) -> None:
        os.close(self._fd)


class RunLock:
    """Exclusive use of an output directory by one process (``.gaprag-eval.lock``)."""

    def __init__(self, out_dir: Path) -> None:
        from filelock import FileLock, Timeout

        from gaprag.errors import InputError

        self.path = out_dir / LOCK_FILE
        self._lock = FileLock(str(self.path))
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            raise InputError(
                f"{out_dir} is being written by another `gaprag eval` (lock {self.path.name})",
                hint="wait for that run to finish, or use another --out directory",
            ) from None

    def release(self) -> None:
        self._lock.release()


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON to ``path``, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, ensure_ascii=False, indent=2, default=str), encoding="utf-8")
    os.replace(tmp, path)
