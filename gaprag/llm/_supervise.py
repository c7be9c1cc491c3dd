"""Run a server command and stop it when the process that asked for it goes away.

Usage: python -m gaprag.llm._supervise PARENT_PID -- CMD...

The embedded server must not outlive gaprag, even when gaprag is killed without a chance to
run its exit hooks (SIGKILL, a crashed notebook kernel). This wrapper polls its parent every
:data:`POLL_S` seconds and stops the server when the parent is gone; SIGTERM and SIGINT stop
it too. Stopping sends the server SIGTERM and, if it is still alive :data:`GRACE_S` seconds
later (a request in flight), SIGKILL. The wrapper leads the server's process group, so
gaprag's own stop (:func:`gaprag.llm.server.stop_process_group`) reaches both at once and
escalates to SIGKILL itself, whichever of the two dies first.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

#: Seconds between two looks at the parent.
POLL_S = 0.5
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


def main() -> int:
    parent = int(sys.argv[1])
    cmd = sys.argv[sys.argv.index("--") + 1 :]
    child = subprocess.Popen(cmd)

    def stop(*_: object) -> None:
        stop_child(child)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while child.poll() is None:
        if os.getppid() != parent:  # re-parented: the caller died
            stop()
        time.sleep(POLL_S)
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
