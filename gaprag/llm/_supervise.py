"""Run a server command and stop it when the process that asked for it goes away.

Usage: python -m gaprag.llm._supervise PARENT_PID -- CMD...

The embedded server must not outlive gaprag, even when gaprag is killed without a chance to
run its exit hooks (SIGKILL, a crashed notebook kernel). This wrapper polls its parent and
terminates the server when the parent is gone, and forwards SIGTERM/SIGINT.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


def main() -> int:
    parent = int(sys.argv[1])
    cmd = sys.argv[sys.argv.index("--") + 1 :]
    child = subprocess.Popen(cmd)

    def stop(*_: object) -> None:
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while child.poll() is None:
        if os.getppid() != parent:  # re-parented: the caller died
            stop()
        time.sleep(1.0)
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
