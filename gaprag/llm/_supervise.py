"""Run a server command and stop it when the process that asked for it goes away, unless that
process handed it over; then keep it until it has been idle long enough.

Usage: python -m gaprag.llm._supervise PARENT_PID [--entry PATH] -- CMD...

The embedded server must not outlive gaprag, even when gaprag is killed without a chance to
run its exit hooks (SIGKILL, a crashed notebook kernel). This wrapper polls its parent every
:data:`POLL_S` seconds and stops the server when the parent is gone; SIGTERM and SIGINT stop
it too. Stopping sends the server SIGTERM and, if it is still alive :data:`GRACE_S` seconds
later (a request in flight), SIGKILL. The wrapper leads the server's process group, so
gaprag's own stop (:func:`gaprag.llm.server.stop_process_group`) reaches both at once and
escalates to SIGKILL itself, whichever of the two dies first.

A ``gaprag`` command that finished normally hands its server over by writing the registry
entry ``PATH`` naming this wrapper's pid (:mod:`gaprag.llm.keep`) before it exits. When the
parent is gone and that entry names this wrapper, it becomes the server's keeper: it stops
the server once no live process has held a lease on it for the entry's ``keep_s`` seconds,
or at once when idle and the entry is gone or names another keeper.

Nor may the server outlive this wrapper, however the wrapper dies (``kill -9`` of a keeper
included): on Linux the kernel kills the server when the wrapper dies (a parent-death signal,
:func:`die_with`); elsewhere the next ``gaprag`` command finds a server whose keeper is gone
and stops it (:func:`gaprag.llm.server.sweep_orphans`).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from gaprag.llm import keep

#: Seconds between two looks at the parent.
POLL_S = 0.5
#: ``prctl(2)``'s option that names the signal a process gets when its parent dies.
PR_SET_PDEATHSIG = 1
#: Seconds the server gets to exit on SIGTERM before SIGKILL: shorter than gaprag's own
#: grace (``gaprag.llm.server.STOP_GRACE_S``), so this wrapper escalates first.
GRACE_S = 3.0


def stop_child(child: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after :data:`GRACE_S` seconds; returns once the child is dead."""
    if child.poll() is not None:
        return
    child.terminate()
    try:
        child.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def die_with(parent: int) -> Callable[[], None] | None:
    """For the server's process, between fork and exec: on Linux, have the kernel SIGKILL it
    when ``parent`` (this wrapper) dies, however it dies (``prctl(PR_SET_PDEATHSIG)``; a
    wrapper already gone by then ends it at once). None elsewhere: there the server is found
    and stopped by the next ``gaprag`` command (:func:`gaprag.llm.server.sweep_orphans`)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # loaded before the fork
    except (OSError, AttributeError):
        return None

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the wrapper died before the signal was armed
            os._exit(1)

    return arm


def handed_over(entry: Path | None) -> float | None:
    """The entry's ``keep_s`` when ``entry`` names this wrapper as its keeper, else None."""
    record = keep.read_entry(entry) if entry is not None else None
    if record is None or record["pid"] != os.getpid():
        return None
    return float(record.get("keep_s", 0))


def release(entry: Path) -> bool:
    """Unregister ``entry`` if no client holds a lease; False (entry kept) when one does."""
    record = keep.read_entry(entry)
    if record is None or record["pid"] != os.getpid():
        return True  # no longer findable: nobody new can come
    keep.remove_entry(entry, os.getpid())
    if keep.live_leases(entry):  # a client took its lease before the entry went: put it back
        keep.write_entry(entry, record)
        return False
    return True


def keep_until_idle(child: subprocess.Popen[bytes], entry: Path, keep_s: float) -> None:
    """Return when the server died or was idle (no live lease) for ``keep_s`` seconds."""
    idle_since = time.monotonic()
    while child.poll() is None:
        if keep.live_leases(entry):
            idle_since = time.monotonic()
        elif handed_over(entry) is None or time.monotonic() - idle_since >= keep_s:
            if release(entry):
                return
            idle_since = time.monotonic()
        time.sleep(POLL_S)


def main() -> int:
    parent = int(sys.argv[1])
    head = sys.argv[2 : sys.argv.index("--")]
    entry = Path(head[head.index("--entry") + 1]) if "--entry" in head else None
    cmd = sys.argv[sys.argv.index("--") + 1 :]
    # one thread in this wrapper: a function run between fork and exec is safe here
    child = subprocess.Popen(cmd, preexec_fn=die_with(os.getpid()))

    def stop(*_: object) -> None:
        stop_child(child)
        if entry is not None:
            keep.remove_entry(entry, os.getpid())
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while child.poll() is None:
        if os.getppid() != parent:  # re-parented: the caller is gone
            keep_s = handed_over(entry)
            if entry is not None and keep_s is not None:
                keep_until_idle(child, entry, keep_s)
            stop()
        time.sleep(POLL_S)
    if entry is not None:
        keep.remove_entry(entry, os.getpid())
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
