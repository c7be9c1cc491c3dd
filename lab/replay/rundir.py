"""Run directories as the offline replays read and extend them: a ``gaprag eval`` output
directory holds ``results.jsonl`` (the rows), ``run.json`` (the run record), the traces, and
the JSON-lines files a replay appends beside them (``selection_scores.jsonl``,
``reread.jsonl``), one record per (method, question id), so an interrupted replay resumes."""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

from gaprag.datasets import load_dataset
from gaprag.errors import InputError
from gaprag.eval.record import RUN_FILE
from gaprag.eval.results import RESULTS, read_results
from gaprag.eval.stats import dedupe

#: a record file's key: (method, question id)
Key = tuple[str, str]


def run_dir_of(d: str | Path) -> Path:
    """``d`` as a ``gaprag eval`` output directory; an input error when it holds no rows."""
    path = Path(d)
    if not (path / RESULTS).is_file():
        raise InputError(
            f"no {RESULTS} in {path}", hint="give directories written by `gaprag eval`"
        )
    return path


def rows(run_dir: Path) -> list[dict[str, Any]]:
    """The run's rows, each (method, question) once (its last row)."""
    return dedupe(read_results(run_dir))


def run_record(run_dir: Path) -> dict[str, Any]:
    """The run's ``run.json`` (empty when it is missing or unreadable)."""
    try:
        found = json.loads((run_dir / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def question_indices(run_dir: Path) -> dict[str, int]:
    """Question id -> its index in the run's dataset file (the one whose sha256 ``run.json``
    records); empty when the run does not say or the file is not found."""
    run = run_record(run_dir)
    for source in (run.get("dataset"), run.get("dataset_path")):
        if not isinstance(source, str) or not source:
            continue
        try:
            dataset = load_dataset(source)
        except InputError:
            continue
        if run.get("dataset_sha256") in (None, dataset.sha256):
            return {ex.id: i for i, ex in enumerate(dataset.examples)}
    return {}


def documents(run_dir: Path) -> dict[str, Mapping[str, Any]]:
    """The run's dataset's documents by id."""
    run = run_record(run_dir)
    dataset = load_dataset(str(run.get("dataset_path") or run.get("dataset")))
    return {str(d["id"]): d for d in dataset.documents()}


def read_records(path: Path) -> dict[Key, dict[str, Any]]:
    """(method, question id) -> its record in the JSON-lines file ``path`` (the last one; torn
    lines skipped; empty when there is no file)."""
    out: dict[Key, dict[str, Any]] = {}
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            out[(str(record.get("method")), str(record.get("id")))] = record
    return out


def append_record(path: Path, record: Mapping[str, Any]) -> None:
    """Append ``record`` as one JSON line, in one write (a crash loses no earlier line)."""
    data = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def pending_rows(
    dirs: Sequence[str | Path], name: str, methods: Sequence[str] = ()
) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Each row of ``dirs`` (of ``methods``; all when empty), with its run directory, that has
    no record yet in the directory's JSON-lines file ``name``."""
    for d in dirs:
        run_dir = run_dir_of(d)
        done = read_records(run_dir / name)
        for row in rows(run_dir):
            key = (str(row.get("method")), str(row.get("id")))
            if (not methods or key[0] in methods) and key not in done:
                yield run_dir, row


#: what a replay adds for one row: its record, or None for a row it skips
Extend = Callable[[Path, dict[str, Any]], Awaitable[dict[str, Any] | None]]


class Extending(TypedDict, total=False):
    """The options of a replay that adds records beside the rows (:func:`extend_runs`)."""

    methods: Sequence[str]
    limit: int | None
    progress: Callable[[str], None] | None


async def extend_runs(
    dirs: Sequence[str | Path],
    name: str,
    make: Extend,
    *,
    methods: Sequence[str] = (),
    limit: int | None = None,
    progress: Callable[[str], None] | None = None,
    shown: str = "path",
) -> int:
    """Append to each run directory's JSON-lines file ``name`` the record ``make`` gives for
    every row that has none yet (of ``methods``; all when empty), at most ``limit`` this time,
    each as it finishes (an interrupted run resumes); returns how many were added.
    ``progress`` gets a line per record, with the record's ``shown`` field."""
    done = 0
    for run_dir, row in pending_rows(dirs, name, methods):
        if limit is not None and done >= limit:
            break
        record = await make(run_dir, row)
        if record is None:
            continue
        append_record(run_dir / name, record)
        done += 1
        if progress is not None:
            said = record.get(shown)
            said = repr(said) if isinstance(said, str) and shown != "path" else said
            progress(f"{run_dir.name} {record.get('method')} {record.get('id')}: {said}")
    return done
