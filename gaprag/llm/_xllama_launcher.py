"""Run llama.cpp's own OpenAI-compatible server (xllamacpp) in this process until SIGTERM.

Usage: python -m gaprag.llm._xllama_launcher MODEL_PATH PORT N_CTX N_THREADS
"""

from __future__ import annotations

import signal
import sys
import time


def main() -> None:
    import xllamacpp as xlc  # type: ignore[import-not-found,import-untyped,unused-ignore]

    path, port, n_ctx, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    params = xlc.CommonParams()
    params.model.path = path
    params.n_ctx = n_ctx
    params.n_parallel = 1
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.hostnames = ["127.0.0.1"]
    params.port = port
    server = xlc.Server(params)  # serves in background threads
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while True:
            time.sleep(3600)
    finally:
        del server


if __name__ == "__main__":
    main()
