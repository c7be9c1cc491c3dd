"""A stand-in for llama.cpp's ``llama-server`` that never finishes a request.

It takes ``llama-server``'s flags (only ``--port`` matters), answers ``GET /v1/models`` and
``--version``, and holds every ``POST /v1/chat/completions`` open without answering, after
writing ``PID PPID`` to the file ``$STUB_INFLIGHT`` names. It ignores SIGTERM, like a server
that finishes its request in flight before it exits: only SIGKILL stops it. Process-hygiene
tests point ``GAPRAG_LLAMA_SERVER`` at a script that runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = json.dumps({"object": "list", "data": [{"id": "stub", "object": "model"}]})
        self.send_response(200 if self.path.rstrip("/").endswith("/models") else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def do_POST(self) -> None:
        marker = os.environ.get("STUB_INFLIGHT")
        if marker:
            with open(marker, "w") as out:
                out.write(f"{os.getpid()} {os.getppid()}\n")
        time.sleep(3600)  # the request in flight


def main(argv: list[str]) -> None:
    if "--version" in argv:
        print("version: stub")
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args, _ = parser.parse_known_args(argv)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
