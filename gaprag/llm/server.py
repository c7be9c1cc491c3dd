"""The embedded llama.cpp OpenAI-compatible server (DESIGN.md §6).

Two engines serve the same API on 127.0.0.1:

* ``llama-cpp-python`` (``gaprag[fast]``): compiled on install (~6.5 min once), about twice
  as fast at prompt processing on these CPUs; preferred when installed.
* ``xllamacpp`` (``gaprag[local]``): llama.cpp's own C++ server as a prebuilt wheel.

Started on demand on a free port, health-checked, reused within the process, stopped at exit.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from gaprag.config import gaprag_home, local_model, private_dir, private_file
from gaprag.config import quiet as config_quiet
from gaprag.errors import EndpointError, GapragError
from gaprag.llm.registry import ensure_model, get_model

Engine = Literal["llama-cpp-python", "xllamacpp"]


def available_engines() -> list[Engine]:
    engines: list[Engine] = []
    # llama-cpp-python without its [server] extra (e.g. pulled in by another package) cannot serve
    if all(
        importlib.util.find_spec(m) is not None
        for m in ("llama_cpp", "fastapi", "uvicorn", "sse_starlette")
    ):
        engines.append("llama-cpp-python")
    if importlib.util.find_spec("xllamacpp") is not None:
        engines.append("xllamacpp")
    return engines


def pick_engine(requested: str | None = None) -> Engine:
    requested = requested or os.environ.get("GAPRAG_LOCAL_ENGINE") or None
    engines = available_engines()
    if requested:
        if requested not in ("llama-cpp-python", "xllamacpp"):
            raise GapragError(
                f"unknown engine {requested!r}", hint="use llama-cpp-python or xllamacpp"
            )
        if requested not in engines:
            raise GapragError(
                f"engine {requested} is not installed",
                hint="pip install 'gaprag[local]' or 'gaprag[fast]'",
            )
        return requested
    if not engines:
        raise GapragError(
            "no local LLM server is installed and no endpoint is configured",
            hint="pip install 'gaprag[local]', or set GAPRAG_BASE_URL to an OpenAI-compatible endpoint",
        )
    return engines[0]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class EmbeddedServer:
    model: str
    engine: Engine
    port: int
    n_ctx: int = 4096
    threads: int = field(default_factory=lambda: max(1, os.cpu_count() or 1))
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def structured_mode(self) -> Literal["json_schema", "json_object"]:
        # llama-cpp-python 0.3.x answers json_schema with HTTP 500 but honours json_object+schema
        return "json_object" if self.engine == "llama-cpp-python" else "json_schema"

    def command(self, model_file: Path) -> list[str]:
        if self.engine == "llama-cpp-python":
            return [
                sys.executable, "-m", "llama_cpp.server", "--model", str(model_file),
                "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(self.n_ctx),
                "--n_threads", str(self.threads), "--n_threads_batch", str(self.threads),
                "--model_alias", self.model,
            ]  # fmt: skip
        return [
            sys.executable, "-m", "gaprag.llm._xllama_launcher", str(model_file),
            str(self.port), str(self.n_ctx), str(self.threads),
        ]  # fmt: skip

    def start(self, *, timeout_s: float = 180.0, quiet: bool = False) -> EmbeddedServer:
        quiet = quiet or config_quiet()
        model_file = ensure_model(self.model, quiet=quiet)
        logs = private_dir(gaprag_home() / "logs")  # server logs can hold prompts: owner-only
        self.log_path = private_file(logs / f"server-{self.model}-{self.port}.log")
        if not quiet:
            print(
                f"gaprag: starting the local LLM server ({self.engine}, {self.model}) on "
                f"127.0.0.1:{self.port}; log: {self.log_path}",
                file=sys.stderr,
                flush=True,
            )
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "gaprag.llm._supervise", str(os.getpid()), "--", *self.command(model_file)], stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-1500:]
                raise EndpointError(
                    f"the local LLM server exited with code {self.process.returncode}",
                    hint=f"see {self.log_path}; last lines:\n{tail}",
                )
            if self.healthy():
                return self
            time.sleep(0.5)
        self.stop()
        raise EndpointError(
            f"the local LLM server did not answer within {timeout_s:.0f} s",
            hint=f"see {self.log_path}",
        )

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.base_url + "/models", timeout=2) as resp:
                json.loads(resp.read())
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


_lock = threading.Lock()
_servers: dict[str, EmbeddedServer] = {}


def ensure_local_server(
    model: str | None = None, *, engine: str | None = None, quiet: bool = False
) -> EmbeddedServer:
    """The process-wide embedded server for ``model``, started on first use."""
    name = get_model(model or local_model()).name
    with _lock:
        server = _servers.get(name)
        if server is not None and server.process is not None and server.process.poll() is None:
            return server
        n_ctx = int(os.environ.get("GAPRAG_LOCAL_CTX", "4096"))
        server = EmbeddedServer(
            model=name, engine=pick_engine(engine), port=free_port(), n_ctx=n_ctx
        )
        server.start(quiet=quiet)
        _servers[name] = server
        return server


@atexit.register
def _stop_all() -> None:
    for server in list(_servers.values()):
        server.stop()
    _servers.clear()
