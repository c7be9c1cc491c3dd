"""Kept embedded servers: the registry a later command finds them in, and their leases.

A ``gaprag`` command that started the embedded server and finished normally leaves it running
(``GAPRAG_LOCAL_KEEP_S`` seconds with no client, default 600; 0: stopped at exit). It is
recorded in ``GAPRAG_HOME/servers/KEY.json`` (written atomically, owner-only), where ``KEY``
is a hash of everything that must match to reuse it: the server's command line (engine, model
file, context, slots, threads, seed, prompt cache, flash attention) and the engine's build and
model file's size and time (:meth:`gaprag.llm.server.EmbeddedServer.reuse_key`). The entry holds its
keeper's pid (the leader of the server's process group), the port and base URL, the model and
the serving settings.

A process that uses a kept server holds a lease, the file ``KEY.leases/PID``, taken before it
reads the entry. The keeper (:mod:`gaprag.llm._supervise`, the server's supervisor) stops the
whole group once no live process has held a lease for the entry's ``keep_s`` seconds; it
first removes the entry, then looks at the leases again and puts the entry back if one was
taken meanwhile, so a client that found the entry after taking its lease is never left
without its server.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from gaprag.config import gaprag_home, private_dir

#: The fields of an entry every reader relies on (an entry without them is not used).
_INT_FIELDS = ("pid", "port")
#: What a kept server's keeper runs as (``/proc/PID/cmdline``): a recycled pid is not one.
KEEPER_MODULE = "gaprag.llm._supervise"


def servers_dir() -> Path:
    """``GAPRAG_HOME/servers``, owner-only: one entry per kept server."""
    return private_dir(gaprag_home() / "servers")


def entry_path(key: str) -> Path:
    """Where the server kept under ``key`` is recorded (absolute: its keeper is known by it)."""
    return (servers_dir() / f"{key}.json").absolute()


def leases_dir(entry: Path) -> Path:
    return entry.with_suffix(".leases")


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (owner-only) so that a reader sees the old file or the new one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_entry(path: Path, entry: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(entry, indent=1))


def create_entry(path: Path, entry: dict[str, Any]) -> bool:
    """Write ``entry`` at ``path`` unless an entry is there already (False then): of two
    processes creating the same entry at once, exactly one succeeds."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps(entry, indent=1))
        os.link(tmp, path)  # fails if ``path`` exists: no overwrite
        return True
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def read_entry(path: Path) -> dict[str, Any] | None:
    """The entry at ``path``; None when missing or unreadable."""
    try:
        entry = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or not all(isinstance(entry.get(k), int) for k in _INT_FIELDS):
        return None
    return entry if isinstance(entry.get("keep_s", 0), int | float) else None


def remove_entry(path: Path, pid: int | None = None) -> bool:
    """Remove the entry at ``path`` (only if it names keeper ``pid``, when given), and its
    leases folder once empty."""
    entry = read_entry(path)
    if pid is not None and (entry is None or entry["pid"] != pid):
        return False
    removed = False
    with contextlib.suppress(OSError):
        path.unlink()
        removed = True
    with contextlib.suppress(OSError):
        leases_dir(path).rmdir()
    return removed


def proc_stat(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first, then parent, process
    group, ...; ``proc(5)``); None when the process or ``/proc`` is not there."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is not)."""
    stat = proc_stat(pid)
    if stat is not None:
        return stat[0] != "Z"
    if Path("/proc").is_dir():
        return False
    try:  # no /proc: ask the kernel
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_keeper(pid: int, entry: Path) -> bool:
    """Whether ``pid`` is alive and the keeper of ``entry`` (not a recycled pid, nor another
    supervisor)."""
    if not pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return not Path("/proc").is_dir()  # no /proc: trust the pid
    return KEEPER_MODULE.encode() in cmdline and str(entry).encode() + b"\0" in cmdline


def started_at(pid: int) -> str:
    """When ``pid`` started (clock ticks since boot; empty without ``/proc``): a lease of a
    process that died and whose pid was reused is no lease."""
    stat = proc_stat(pid)
    return stat[19] if stat is not None and len(stat) > 19 else ""


def take_lease(entry: Path) -> Path:
    """This process's lease on the server of ``entry``: ``KEY.leases/PID``, holding when the
    process started. The folder is made again if an entry's removal took it meanwhile."""
    lease = leases_dir(entry) / str(os.getpid())
    try:
        write_atomic(private_dir(lease.parent) / lease.name, started_at(os.getpid()))
    except FileNotFoundError:  # the folder went between its making and the write: once more
        write_atomic(private_dir(lease.parent) / lease.name, started_at(os.getpid()))
    return lease


def drop_lease(lease: Path) -> None:
    with contextlib.suppress(OSError):
        lease.unlink()


def live_leases(entry: Path) -> list[int]:
    """The pids holding a lease on ``entry``'s server; the leases of dead processes are removed."""
    folder = leases_dir(entry)
    try:
        leases = list(folder.iterdir())
    except OSError:
        return []
    live = []
    for lease in leases:
        if lease.name.startswith("."):  # a lease being written
            continue
        pid = int(lease.name) if lease.name.isdigit() else 0
        try:
            held = pid > 0 and pid_alive(pid) and lease.read_text() == started_at(pid)
        except OSError:
            held = False
        if held:
            live.append(pid)
        else:
            drop_lease(lease)
    return live


def kept_entries() -> list[tuple[Path, dict[str, Any]]]:
    """Every kept server's entry of this ``GAPRAG_HOME``, stale ones included."""
    out = []
    for path in sorted(servers_dir().glob("*.json")):
        entry = read_entry(path)
        if entry is not None:
            out.append((path, entry))
    return out


def keep_label(seconds: float) -> str:
    """``600`` -> ``10 min``, ``2`` -> ``2 s``."""
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:g} s"
