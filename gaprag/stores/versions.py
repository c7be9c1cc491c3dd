"""A store directory's versions: what gaprag wrote there, who may write, who is reading.

Layout::

    STORE/gaprag-store.json   the store's own record: every version and build folder gaprag
                              made here (clean-up removes only these)
    STORE/CURRENT             name of the live version (replaced atomically)
    STORE/.index.lock         held by the one writer (``filelock``): index runs are serialised
    STORE/v-<stamp>/          one complete version; ``v-*/.readers`` is share-locked by every
                              open reader, so clean-up leaves a version in use where it is

A directory that is neither empty nor a gaprag store is refused before anything is written.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from gaprag.errors import StoreError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no reader leases, clean-up as before
    fcntl = None  # type: ignore[assignment]

RECORD = "gaprag-store.json"
LOCK = ".index.lock"
READERS = ".readers"
CURRENT = "CURRENT"


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """Flush every file of a finished version (and its folders) to disk."""
    for path in [root, *root.rglob("*")]:
        if path.is_dir():
            fsync_dir(path)
        elif path.is_file():
            try:
                with path.open("rb+") as fh:
                    os.fsync(fh.fileno())
            except OSError:
                pass


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}-{uuid.uuid4().hex[:6]}")
    with tmp.open("w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def is_store(root: Path) -> bool:
    return (root / RECORD).is_file() or (root / CURRENT).is_file()


def read_record(root: Path) -> dict[str, Any]:
    """The store's record; a store written before it existed counts its live version only."""
    try:
        record: dict[str, Any] = json.loads((root / RECORD).read_text())
    except FileNotFoundError:
        current = root / CURRENT
        live = current.read_text().strip() if current.is_file() else ""
        return {"gaprag_store": 1, "versions": [live] if live else [], "building": []}
    except (OSError, ValueError) as exc:
        raise StoreError(
            f"the store record {root / RECORD} is damaged ({exc})",
            hint="move the directory aside and build the store again with `gaprag index`",
        ) from None
    record.setdefault("versions", [])
    record.setdefault("building", [])
    return record


def source_roots(root: Path) -> dict[str, str]:
    """The folder each source of the store was read from (``gaprag index`` records them)."""
    roots = read_record(root).get("roots", {}) if is_store(root) else {}
    return {str(k): str(v) for k, v in roots.items()}


def record_roots(root: Path, roots: dict[str, str], live: set[str]) -> None:
    """Note where these sources were read from; forget sources the store no longer has."""
    record = read_record(root)
    merged = {**record.get("roots", {}), **roots}
    record["roots"] = {k: v for k, v in sorted(merged.items()) if k in live}
    write_record(root, record)


def write_record(root: Path, record: dict[str, Any]) -> None:
    _write_atomic(root / RECORD, json.dumps(record, indent=2) + "\n")


def claim(root: Path) -> None:
    """Make ``root`` a store, or check that it is one; never touch anything else.

    A missing or empty directory becomes a store; a directory with other contents is an
    error, and nothing is written.
    """
    if root.exists() and not root.is_dir():
        raise StoreError(f"{root} is a file, not a store directory", hint="give a directory")
    if root.is_dir() and not is_store(root) and any(root.iterdir()):
        raise StoreError(
            f"{root} is not empty and is not a gaprag store: nothing was written",
            hint="give a new or empty directory, or the directory of a store built by "
            "`gaprag index`",
        )
    root.mkdir(parents=True, exist_ok=True)
    if not (root / RECORD).is_file():
        write_record(root, read_record(root))


@contextlib.contextmanager
def writing(root: Path, *, wait_message: bool = True) -> Iterator[None]:
    """Hold the store's writer lock: one index run (build, add, delete) at a time."""
    lock = FileLock(str(root / LOCK))
    try:
        lock.acquire(timeout=1)
    except Timeout:
        if wait_message:
            print(f"gaprag: waiting for another index run on {root}...", file=sys.stderr)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def new_names() -> tuple[str, str]:
    """(build folder, version) names for one new version."""
    stamp = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
    return f".building-{stamp}", f"v-{stamp}"


def register(root: Path, building: str, version: str) -> None:
    """Name a build folder and the version it becomes in the record, before either exists."""
    record = read_record(root)
    record["building"] = [*record["building"], building]
    record["versions"] = [*record["versions"], version]
    write_record(root, record)


def switch(root: Path, version: str) -> None:
    """Make ``version`` the live one (an atomic replace of ``CURRENT``)."""
    pointer = root / f".CURRENT-{uuid.uuid4().hex[:6]}"
    with pointer.open("w") as fh:
        fh.write(version)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(pointer, root / CURRENT)
    fsync_dir(root)


class Lease:
    """A reader's share lock on one version (released by :meth:`close` or when collected)."""

    def __init__(self, version_dir: Path) -> None:
        self.fd: int | None = None
        if fcntl is None:
            return
        try:
            fd = os.open(version_dir / READERS, os.O_RDONLY)
        except OSError:
            return  # an older version without the file, or unreadable: no lease
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
        except OSError:
            os.close(fd)
            return
        self.fd = fd

    def close(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None

    def __del__(self) -> None:
        self.close()


def _hold_unused(version_dir: Path) -> int | None:
    """An exclusive lock on ``version_dir``'s reader file, or None when an open reader holds
    it (tried without waiting). The lock is held until the returned descriptor is closed."""
    if fcntl is None:
        return -1
    try:
        fd = os.open(version_dir / READERS, os.O_RDONLY | os.O_CREAT, 0o644)
    except OSError:
        return -1
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def prune(root: Path, keep: str) -> list[str]:
    """Remove the versions and build folders the record names, except ``keep`` and any version
    an open reader holds (those wait for a later run). Call with the writer lock held.
    Returns the names removed."""
    record = read_record(root)
    removed: list[str] = []
    for name in record["building"]:
        shutil.rmtree(root / name, ignore_errors=True)  # under the lock, no build is running
    record["building"] = []
    kept: list[str] = []
    for name in record["versions"]:
        path = root / name
        trash = root / f".pruning-{name}"
        if trash.exists():
            shutil.rmtree(trash, ignore_errors=True)
        if name == keep:
            kept.append(name)
        elif not path.exists():
            continue
        elif (fd := _hold_unused(path)) is None:
            kept.append(name)
        else:
            # renamed while no reader can take it, so a reader that looked it up just now finds
            # it gone (and looks again), never half gone
            try:
                os.replace(path, trash)
            finally:
                if fd >= 0:
                    os.close(fd)
            shutil.rmtree(trash, ignore_errors=True)
            removed.append(name)
    record["versions"] = kept
    write_record(root, record)
    return removed
