"""Per-question traces of an evaluation, stored compressed: ``traces/<method>.jsonl.xz``.

One file per method (or variant) of a run directory; each question's trace is one JSON line.
While a run goes on, every trace is appended as its own xz stream, written with one ``write``
call (a reader decodes the concatenated streams as one file, as ``xzcat`` does); a stream cut
short by a killed run is dropped when the file is read and cut off before the next append, so
the file stays readable and the run resumable. When a run ends, :func:`compact` rewrites each
file as one stream, which compresses the prompts repeated across questions (a method's traces
take about a twentieth of their JSON size). A question traced twice (a failed question run
again on ``--resume``) keeps its last trace.

Run directories written before this format held ``traces/<method>/<id>.json``; every reader
here still reads them, and :func:`convert` turns them into the compressed form.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

TRACES = "traces"
SUFFIX = ".jsonl.xz"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_APPEND_PRESET = 0  # fast per-question streams; :func:`compact` recompresses at the default
_CHUNK = 1 << 20


def safe_name(text: str) -> str:
    """A file name for a method or question id: unchanged when safe, else sanitised plus a
    short hash."""
    clean = _UNSAFE.sub("_", text)[:100] or "_"
    if clean == text and not text.startswith("."):
        return text
    return f"{clean}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"


def trace_file(run_dir: str | Path, method: str) -> Path:
    """``run_dir/traces/<method>.jsonl.xz``."""
    return Path(run_dir) / TRACES / f"{safe_name(method)}{SUFFIX}"


def _streams(data: bytes) -> tuple[list[bytes], int]:
    """The decoded complete xz streams of ``data`` and the byte length they cover (a torn
    last stream, or anything unreadable after the last complete one, is left out)."""
    out: list[bytes] = []
    pos = 0
    while pos < len(data):
        decoder = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
        try:
            text = decoder.decompress(data[pos:])
        except lzma.LZMAError:
            break
        if not decoder.eof:
            break
        out.append(text)
        pos = len(data) - len(decoder.unused_data)
        while pos < len(data) and data[pos] == 0:  # stream padding
            pos += 1
    return out, pos


def _records(texts: Sequence[bytes]) -> Iterator[dict[str, Any]]:
    for text in texts:
        for line in text.split(b"\n"):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                yield value


def read_file(path: str | Path) -> list[dict[str, Any]]:
    """Every trace in one ``<method>.jsonl.xz`` (a torn last stream skipped with a warning)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError:
        return []
    texts, covered = _streams(data)
    if covered < len(data):
        warnings.warn(f"{path}: skipped an incomplete trace at the end", stacklevel=2)
    return list(_records(texts))


def _old_files(run_dir: Path, method: str) -> list[Path]:
    folder = run_dir / TRACES / safe_name(method)
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def method_traces(run_dir: str | Path, method: str) -> dict[str, dict[str, Any]]:
    """Question id -> its trace, for one method of a run directory (the last trace of a
    question wins; the per-file layout of older runs is read too)."""
    run_dir = Path(run_dir)
    out: dict[str, dict[str, Any]] = {}
    for path in _old_files(run_dir, method):
        trace = _read_json(path)
        if trace is not None:
            out[str(trace.get("id", path.stem))] = trace
    for trace in read_file(trace_file(run_dir, method)):
        out[str(trace.get("id", ""))] = trace
    return out


def iter_traces(paths: Sequence[str | Path]) -> Iterator[dict[str, Any]]:
    """Every trace under the given run directories, ``traces/`` folders or trace files
    (``*.jsonl.xz``, or an older run's ``*.json``: any JSON object found is yielded, the
    caller keeps the traces it wants), in path order."""
    for raw in paths:
        path = Path(raw).expanduser()
        if path.is_file():
            files = [path]
        elif path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file() and _is_trace_file(p))
        else:
            from gaprag.errors import InputError

            raise InputError(f"no run folder or trace file {str(raw)!r}", hint="check the path")
        for f in files:
            if f.name.endswith(SUFFIX):
                yield from read_file(f)
            elif (trace := _read_json(f)) is not None:
                yield trace


def _is_trace_file(path: Path) -> bool:
    return path.name.endswith(SUFFIX) or path.suffix == ".json"


def _encode(trace: Mapping[str, Any]) -> bytes:
    return (json.dumps(trace, ensure_ascii=False, default=str) + "\n").encode("utf-8")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    for _ in range(1000):  # a short write is continued; bounded
        if not view:
            break
        view = view[os.write(fd, view) :]


def repair(path: Path) -> None:
    """Cut a torn last stream (a run killed while appending it) off ``path``, with a warning."""
    try:
        data = path.read_bytes()
    except OSError:
        return
    _, covered = _streams(data)
    if covered < len(data):
        with path.open("rb+") as fh:
            fh.truncate(covered)
        warnings.warn(
            f"{path}: dropped an incomplete trace at the end (a run was killed while writing it)",
            stacklevel=3,
        )


class TraceWriter:
    """Appends traces to ``run_dir/traces/<method>.jsonl.xz``, one xz stream per question.

    The run directory is held by one process (the run's lock); the first append to a file
    cuts a torn tail left by a killed run.
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self._checked: set[Path] = set()

    def write(self, method: str, trace: Mapping[str, Any]) -> None:
        path = trace_file(self.run_dir, method)
        if path not in self._checked:
            path.parent.mkdir(parents=True, exist_ok=True)
            repair(path)
            self._checked.add(path)
        data = lzma.compress(_encode(trace), preset=_APPEND_PRESET)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)

    def compact(self) -> None:
        """Rewrite each file this writer appended to as one stream (see :func:`compact`)."""
        for path in sorted(self._checked):
            compact(path)


def compact(path: Path, extra: Sequence[Mapping[str, Any]] = ()) -> None:
    """Rewrite ``path`` (plus ``extra`` traces) as one xz stream, one trace per question (the
    last one), atomically."""
    by_id: dict[str, Mapping[str, Any]] = {}
    for trace in [*read_file(path), *extra]:
        by_id[str(trace.get("id", ""))] = trace
    if not by_id:
        return
    tmp = path.with_name(f".{path.name}.tmp")
    with lzma.open(tmp, "wb") as fh:
        for trace in by_id.values():
            fh.write(_encode(trace))
    os.replace(tmp, path)


def convert(run_dir: str | Path) -> list[Path]:
    """Turn every ``traces/<method>/<id>.json`` folder under ``run_dir`` (searched
    recursively) into ``traces/<method>.jsonl.xz`` and remove the JSON files; returns the
    files written. Traces already in the file are kept (a folder's trace of the same question
    wins)."""
    written: list[Path] = []
    for traces in sorted(p for p in Path(run_dir).rglob(TRACES) if p.is_dir()):
        for folder in sorted(p for p in traces.iterdir() if p.is_dir()):
            files = sorted(folder.glob("*.json"))
            loaded = [t for f in files if (t := _read_json(f)) is not None]
            if not files:
                continue
            target = traces / f"{folder.name}{SUFFIX}"
            compact(target, loaded)
            for f in files:
                f.unlink()
            if not any(folder.iterdir()):
                folder.rmdir()
            written.append(target)
    return written
