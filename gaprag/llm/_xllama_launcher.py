"""Run llama.cpp's own OpenAI-compatible server (xllamacpp) in this process until SIGTERM.

Usage: python -m gaprag.llm._xllama_launcher MODEL_PATH PORT N_CTX N_THREADS
           [--parallel N] [--seed N] [--no-cache-prompt] [--flash-attn on|off|auto]
           [--batch N] [--ubatch N] [--alias NAME]

The options mirror llama-server's flags of the same names, so both engines are started from
one set of serving settings (see ``gaprag.llm.server.ServingSettings``).

SIGTERM (or SIGINT) ends the process at once, a request in flight or not: the server keeps
no state worth a graceful stop, and waiting for its in-flight task (what destroying the
``Server`` object does) kept a stopped gaprag's server busy for minutes. So does the death of
the process that started it (its supervisor, :mod:`gaprag.llm._supervise`), however it died:
the launcher looks at its parent every :data:`POLL_S` seconds (on Linux the supervisor also
has the kernel kill it then).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

#: Seconds between two looks at the parent.
POLL_S = 0.5


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="gaprag.llm._xllama_launcher")
    ap.add_argument("model_path")
    ap.add_argument("port", type=int)
    ap.add_argument("n_ctx", type=int)
    ap.add_argument("threads", type=int)
    ap.add_argument("--parallel", type=int, default=1)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--no-cache-prompt", action="store_true")
    ap.add_argument("--flash-attn", choices=("on", "off", "auto"), default="auto")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--ubatch", type=int, default=None)
    ap.add_argument("--alias", default=None)
    return ap.parse_args(argv)


def main() -> None:
    import xllamacpp as xlc  # type: ignore[import-not-found,import-untyped,unused-ignore]

    args = parse_args(sys.argv[1:])
    params = xlc.CommonParams()
    params.model.path = args.model_path
    params.n_ctx = args.n_ctx
    params.n_parallel = args.parallel
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.hostnames = ["127.0.0.1"]
    params.port = args.port
    if args.alias:
        params.model_alias = {args.alias}
    if args.seed is not None:
        params.sampling.seed = args.seed
    if args.no_cache_prompt:
        params.cache_prompt = False  # the default of every request's cache_prompt
        params.cache_ram_mib = 0  # and no host-memory prompt cache either
    fa = xlc.llama_flash_attn_type
    params.flash_attn_type = {
        "on": fa.LLAMA_FLASH_ATTN_TYPE_ENABLED,
        "off": fa.LLAMA_FLASH_ATTN_TYPE_DISABLED,
        "auto": fa.LLAMA_FLASH_ATTN_TYPE_AUTO,
    }[args.flash_attn]
    if args.batch is not None:
        params.n_batch = args.batch
    if args.ubatch is not None:
        params.n_ubatch = args.ubatch
    parent = os.getppid()
    server = xlc.Server(params)  # serves in background threads while it is referenced
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, exit_now)
    wait_for_orphaning(parent)
    exit_now(server)


def wait_for_orphaning(parent: int, poll_s: float = POLL_S) -> None:
    """Return once this process's parent is no longer ``parent`` (it died: re-parented)."""
    while os.getppid() == parent:
        time.sleep(poll_s)


def exit_now(*_: object) -> None:
    """Exit without waiting for the server's threads (see the module docstring)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
