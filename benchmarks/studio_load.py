"""The graphs served by ``langgraph dev`` under load: one run's time, 32 concurrent runs, health.

Starts a fake OpenAI-compatible endpoint that answers every chat call after ``--latency``
seconds (``tests/fake_openai.py`` in its own process, every request in its own thread, like an
endpoint with unlimited slots) and ``langgraph dev`` as ``docs/studio.md`` starts it (no
``--allow-blocking``), serving the repository's graphs on the default setup: the bundled demo
store (built into a fresh ``GAPRAG_HOME`` by the first run) and the endpoint from
``GAPRAG_BASE_URL``. Then, with ``langgraph_sdk``:

1. ``first_run_s``: the first ``standard_rag`` run (loads the embedder; with an empty
   ``GAPRAG_HOME``, the default, it also builds the demo store), with ``/ok`` probed meanwhile
   (``first_run_health``, as below);
   one unmeasured run of every other measured method;
2. ``one_run_s``: for each of ``--methods`` (``standard_rag``, ``migres``), the median of
   ``--warm`` (5) sequential warm runs;
3. for each method: ``--runs`` (32) stateless runs started at once: wall time, per-run p50/p95
   (from its request to its result), ``wall_over_one_run`` (wall time / the method's one run),
   LLM calls per run, and the median time a run spent inside gaprag's nodes
   (``in_nodes_p50_s``, its ``usage.wall_s``; the rest is the server's); meanwhile ``GET /ok`` is probed every ``--probe-ms`` (50) ms from
   another thread: max, p95 and p99 latency, and how many probes took over 100 ms.

What bounds the concurrency: the server runs ``--n-jobs-per-worker`` runs at once (``langgraph
dev`` runs one at a time unless given ``--n-jobs-per-worker``; ``--jobs``, default
``--runs``), the rest wait
in its queue; every retrieval embeds its query with MiniLM on the CPU in a worker thread
(Python's default pool: ``min(32, CPUs + 4)`` threads); and the CPU itself, which the server,
the endpoint and this client share.

    python benchmarks/studio_load.py [--runs 32] [--jobs 32] [--latency 0.5] [--out FILE]
    python benchmarks/studio_load.py --runs 4 --warm 2     # a quick check that it works

Prints one JSON object (the last line); ``--out FILE`` writes it too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx

from gaprag.testing import served_config

ROOT = Path(__file__).resolve().parent.parent
LANGGRAPH = Path(sys.executable).with_name("langgraph")
STARTUP_S = 180.0


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ok(url: str, proc: subprocess.Popen[bytes], timeout: float, logfile: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(
                f"{proc.args[0]} exited; log: {logfile}\n{logfile.read_text()[-3000:]}"
            )
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise SystemExit(f"{url} did not answer within {timeout:.0f} s; log: {logfile}")


@contextmanager
def process(cmd: list[str], *, env: dict[str, str], cwd: Path, logfile: Path) -> Any:
    """``cmd`` in its own session, its output in ``logfile``; stopped (with its children) on exit."""
    with logfile.open("wb") as out:
        proc = subprocess.Popen(
            cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def questions(n: int) -> list[str]:
    """``n`` HotpotQA dev questions (the demo corpus's), each once while they last."""
    sys.path.insert(0, str(ROOT))
    from gaprag.datasets import load_dataset

    pool = [ex.question for ex in load_dataset("hotpotqa").examples]
    return [pool[i % len(pool)] for i in range(n)]


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


class HealthProbe:
    """``GET /ok`` every ``interval`` seconds from its own thread, with its own connection."""

    def __init__(self, url: str, interval: float) -> None:
        self.url, self.interval = url, interval
        self.latencies: list[float] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="health-probe", daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=10) as client:
            tick = time.perf_counter()
            while not self._stop.is_set():
                start = time.perf_counter()
                try:
                    ok = client.get(self.url).status_code == 200
                except httpx.HTTPError:
                    ok = False
                self.latencies.append(time.perf_counter() - start)
                self.failures += not ok
                tick += self.interval
                self._stop.wait(max(0.0, tick - time.perf_counter()))

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def summary(self) -> dict[str, Any]:
        ms = [x * 1000 for x in self.latencies]
        return {
            "probes": len(ms),
            "failures": self.failures,
            "max_ms": round(max(ms), 1) if ms else None,
            "p95_ms": round(pct(ms, 0.95), 1) if ms else None,
            "p99_ms": round(pct(ms, 0.99), 1) if ms else None,
            "over_100ms": sum(x > 100 for x in ms),
        }


async def one_run(client: Any, method: str, question: str) -> tuple[float, dict[str, Any]]:
    start = time.perf_counter()
    out = await client.runs.wait(None, method, input={"question": question}, raise_error=False)
    return time.perf_counter() - start, out


def nodes_wall(out: dict[str, Any]) -> float:
    """Seconds the run spent inside gaprag's nodes (its ``usage.wall_s``); the rest of its
    time is the server's (queue, checkpoints, HTTP)."""
    return float(out.get("usage", {}).get("wall_s", 0.0))


def checked(method: str, out: Any) -> dict[str, Any]:
    if not isinstance(out, dict) or "__error__" in out or not out.get("stop_reason"):
        raise SystemExit(f"{method}: the run failed: {str(out)[:2000]}")
    return out


async def measure(args: argparse.Namespace, url: str) -> dict[str, Any]:
    from langgraph_sdk import get_client

    client = get_client(url=url, timeout=httpx.Timeout(connect=10, read=900, write=60, pool=900))
    qs = questions((args.warm + 1 + args.runs) * len(args.methods) + 1)
    result: dict[str, Any] = {}

    with HealthProbe(f"{url}/ok", args.probe_ms / 1000) as probe:
        seconds, out = await one_run(client, "standard_rag", qs.pop())
    checked("standard_rag", out)
    result["first_run_s"] = round(seconds, 2)
    result["first_run_health"] = probe.summary()
    log(f"first standard_rag run: {seconds:.2f} s")
    for method in args.methods:  # each method's own first-use costs stay out of the figures
        if method != "standard_rag":
            checked(method, (await one_run(client, method, qs.pop()))[1])

    result["one_run_s"] = {}
    result["one_run_in_nodes_s"] = {}
    result["warm_runs_s"] = {}
    for method in args.methods:
        warm, in_nodes = [], []
        for _ in range(args.warm):
            seconds, out = await one_run(client, method, qs.pop())
            warm.append(seconds)
            in_nodes.append(nodes_wall(checked(method, out)))
        result["one_run_s"][method] = round(statistics.median(warm), 3)
        result["one_run_in_nodes_s"][method] = round(statistics.median(in_nodes), 3)
        result["warm_runs_s"][method] = [round(x, 3) for x in warm]
        log(f"one {method} run (median of {args.warm}): {statistics.median(warm):.3f} s")

    result["concurrent"] = {}
    for method in args.methods:
        batch = [qs.pop() for _ in range(args.runs)]
        with HealthProbe(f"{url}/ok", args.probe_ms / 1000) as probe:
            start = time.perf_counter()
            done = await asyncio.gather(*(one_run(client, method, q) for q in batch))
            wall = time.perf_counter() - start
        times = [s for s, _ in done]
        errors = [str(o)[:300] for _, o in done if not isinstance(o, dict) or "__error__" in o]
        ok = [o for _, o in done if isinstance(o, dict) and "__error__" not in o]
        calls = [o.get("usage", {}).get("llm_calls", 0) for o in ok]
        in_nodes = [nodes_wall(o) for o in ok]
        entry = {
            "runs": args.runs,
            "wall_s": round(wall, 2),
            "wall_over_one_run": round(wall / result["one_run_s"][method], 2),
            "p50_s": round(pct(times, 0.5), 2),
            "p95_s": round(pct(times, 0.95), 2),
            "in_nodes_p50_s": round(pct(in_nodes, 0.5), 2) if in_nodes else None,
            "llm_calls_per_run": round(statistics.mean(calls), 1) if calls else None,
            "errors": len(errors),
            "first_errors": errors[:3],
            "health": probe.summary(),
        }
        result["concurrent"][method] = entry
        log(f"{args.runs} concurrent {method}: {json.dumps(entry)}")
    return result


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    return {
        "host": platform.node(),
        "cpu": cpu or platform.processor(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=32, help="concurrent runs per method")
    parser.add_argument("--jobs", type=int, default=None,
                        help="langgraph dev --n-jobs-per-worker (default: --runs)")  # fmt: skip
    parser.add_argument("--warm", type=int, default=5, help="sequential warm runs (median)")
    parser.add_argument("--latency", type=float, default=0.5, help="seconds per chat reply")
    parser.add_argument("--methods", default="standard_rag,migres")
    parser.add_argument("--probe-ms", type=float, default=50.0, help="health probe interval")
    parser.add_argument("--home", type=Path, default=None,
                        help="GAPRAG_HOME (default: a new empty one, so the first run builds)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    jobs = args.jobs or args.runs
    if not LANGGRAPH.exists():
        raise SystemExit(f"{LANGGRAPH} not found: pip install -e '.[studio]'")

    report: dict[str, Any] = {
        "machine": machine(),
        "settings": {
            "runs": args.runs, "n_jobs_per_worker": jobs, "latency_s": args.latency,
            "warm_runs": args.warm, "probe_ms": args.probe_ms, "methods": args.methods,
            "endpoint": "tests/fake_openai.py in its own process",
            "server": "langgraph dev --no-browser --no-reload (no --allow-blocking)",
        },
    }  # fmt: skip
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="studio-load-")))
        home = args.home or tmp / "home"
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "GAPRAG_HOME": str(home),
            "LANGGRAPH_CLI_NO_ANALYTICS": "1",
            "LANGGRAPH_NO_VERSION_CHECK": "1",
            "HF_HUB_OFFLINE": "1",
        }
        env.pop("OPENAI_BASE_URL", None)
        fake_port, port = free_port(), free_port()
        fake_log = tmp / "fake-openai.log"
        fake = stack.enter_context(process(
            [sys.executable, "-m", "tests.fake_openai", "--port", str(fake_port),
             "--latency", str(args.latency), "--reply", "Paris"],
            env=env, cwd=ROOT, logfile=fake_log,
        ))  # fmt: skip
        wait_ok(f"http://127.0.0.1:{fake_port}/v1/models", fake, 30, fake_log)
        env["GAPRAG_BASE_URL"] = f"http://127.0.0.1:{fake_port}/v1"
        server_log = tmp / "langgraph-dev.log"
        config = served_config(ROOT / "langgraph.json", args.methods, tmp)
        t0 = time.perf_counter()
        server = stack.enter_context(process(
            [str(LANGGRAPH), "dev", "--no-browser", "--no-reload", "--port", str(port),
             "--config", str(config), "--n-jobs-per-worker", str(jobs)],
            env=env, cwd=tmp, logfile=server_log,
        ))  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        wait_ok(f"{url}/ok", server, STARTUP_S, server_log)
        report["server_start_s"] = round(time.perf_counter() - t0, 2)
        log(f"langgraph dev answers /ok after {report['server_start_s']} s")
        report.update(asyncio.run(measure(args, url)))
        blocking = server_log.read_text(errors="replace").count("Blocking call")
        report["blocking_errors_in_server_log"] = blocking
    report["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
