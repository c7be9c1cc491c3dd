"""gaprag's own cost outside the LLM calls: every method on the demo store, zero-latency model.

For each method (``gaprag.list_methods()``): graph compile time (``build_graph``), then
questions from the bundled HotpotQA dev set (index 60 on; the demo corpus is its paragraphs)
answered with ``gaprag.testing.ScriptedChatModel``, which replies at once. Per question:
wall time, time inside the model (measured around the model's generate call), and the rest
= gaprag's overhead (graph steps, retrieval incl. query embedding, prompt building, parsing,
accounting), as wall time and as process CPU time (CPU time is what a busy, shared machine
does not stretch; with torch's threads it can exceed wall time on an idle one). Also: opening the demo store (Store.open, first retrieval) in this process.

The scripted model gives one fixed reply (``--reply``) to every prompt, so a method may take
a different path than with a real model (e.g. repair a reply it cannot parse, or run to its
round limit). The table therefore also gives the overhead per LLM call, and the overhead
scaled to the LLM calls the method made per question with the embedded model (median over
the rows of ``--reference``, by default ``docs/results/*.results.jsonl``), compared with that
method's median wall time there. Uses only the public API, so it runs before and after the
graph restructure.

The process sets its threads as gaprag's own processes do beside the embedded LLM server
(``GAPRAG_TORCH_THREADS``, else the cores ``GAPRAG_LLAMA_THREADS`` leaves; both are in the
result with the machine's name, CPU and cores). ``--busy`` measures everything twice: quiet,
then with CPU-burning processes beside it standing in for the LLM server (as many as its
threads, ``--busy-workers`` to change), and gives each busy figure over its quiet one. The
burners stop when the measurement ends, when this process exits, and after ``--busy-max-s``.

    python benchmarks/overhead.py [--questions 20] [--methods standard_rag,iterkey] [--busy]
        [--out FILE]

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import platform
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import PrivateAttr

from gaprag import build_graph, config, list_methods
from gaprag.testing import ScriptedChatModel

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = ROOT / "gaprag" / "data" / "eval" / "hotpotqa.dev.jsonl"


class TimedScriptedModel(ScriptedChatModel):
    """ScriptedChatModel that adds up the time spent inside its generate calls."""

    _inside_s: float = PrivateAttr(default=0.0)
    _n: int = PrivateAttr(default=0)

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return super()._generate(*args, **kwargs)
        finally:
            self._inside_s += time.perf_counter() - t
            self._n += 1

    async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            parent = getattr(super(), "_agenerate", None)
            return await parent(*args, **kwargs) if parent else super()._generate(*args, **kwargs)
        finally:
            self._inside_s += time.perf_counter() - t
            self._n += 1

    def take(self) -> tuple[float, int]:
        out = (self._inside_s, self._n)
        self._inside_s, self._n = 0.0, 0
        return out


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def embedded_reference(pattern: str) -> dict[str, dict[str, float]]:
    """Median wall_s and llm_calls per method from committed results with the real model
    (``pattern``: a glob under the repository, e.g. ``docs/results/n50/after/*/results.jsonl``)."""
    walls: dict[str, list[float]] = defaultdict(list)
    calls: dict[str, list[float]] = defaultdict(list)
    for path in sorted(ROOT.glob(pattern)):
        for line in path.open(encoding="utf-8"):
            with contextlib.suppress(ValueError):
                row = json.loads(line)
                if row.get("error") or not row.get("wall_s"):
                    continue
                walls[row["method"]].append(float(row["wall_s"]))
                calls[row["method"]].append(float(row.get("llm_calls") or 0))
    return {
        m: {
            "rows": len(walls[m]),
            "median_wall_s": round(statistics.median(walls[m]), 2),
            "median_llm_calls": statistics.median(calls[m]),
        }
        for m in walls
    }


def load_rss_mb() -> float:
    with contextlib.suppress(OSError), open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def machine() -> dict[str, Any]:
    """The machine the figures come from."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu)
    return {
        "host": platform.node(),
        "cpu": cpu,
        "cores": config.cpu_cores(),
        "llama_threads": config.llama_threads(),
        "torch_threads": config.torch_threads(),
    }


def burn(deadline: float, parent: int) -> None:
    """Keep one core busy until ``deadline`` or until the parent process is gone."""
    x = 0
    while time.monotonic() < deadline and os.getppid() == parent:
        for _ in range(200_000):
            x += 1


@contextlib.contextmanager
def busy(workers: int, max_s: float) -> Iterator[None]:
    """``workers`` CPU-burning processes for the block (at most ``max_s`` seconds)."""
    ctx = multiprocessing.get_context("fork")
    deadline = time.monotonic() + max_s
    procs = [
        ctx.Process(target=burn, args=(deadline, os.getpid()), daemon=True) for _ in range(workers)
    ]
    for proc in procs:
        proc.start()
    try:
        time.sleep(0.5)  # let them reach full speed
        yield
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.join(timeout=10)


def measure_store(store: Any, questions: list[str]) -> dict[str, float]:
    """Mean time and CPU time of one BM25, dense and hybrid search."""
    out: dict[str, float] = {}
    for mode in ("bm25", "dense", "hybrid"):
        c = time.process_time()
        t = time.perf_counter()
        for q in questions:
            store.search(q, 5, mode=mode)
        out[f"{mode}_search_ms_mean"] = round((time.perf_counter() - t) * 1000 / len(questions), 2)
        out[f"{mode}_search_cpu_ms_mean"] = round(
            (time.process_time() - c) * 1000 / len(questions), 2
        )
    return out


def measure_method(
    method: str, store: Any, questions: list[str], reply: str, reference: dict[str, Any]
) -> dict[str, Any]:
    """One method's compile time and per-question overhead outside the model."""
    model = TimedScriptedModel(default=reply)
    t = time.perf_counter()
    graph = build_graph(method, llm=model, retriever=store)
    compile_s = time.perf_counter() - t
    graph.invoke({"question": questions[0]})  # warm-up (first-call imports), not counted
    model.take()
    walls, overheads, cpus, calls, retrievals, errors = [], [], [], [], [], 0
    for q in questions:
        c = time.process_time()
        t = time.perf_counter()
        try:
            out = graph.invoke({"question": q})
        except Exception as exc:  # a method that fails on the fixed reply: count, go on
            errors += 1
            log(f"{method}: {type(exc).__name__}: {exc}")
            model.take()
            continue
        wall = time.perf_counter() - t
        cpu = time.process_time() - c
        inside, n = model.take()
        walls.append(wall)
        overheads.append(wall - inside)
        cpus.append(cpu - inside)  # the scripted model's own time is CPU time too
        calls.append(n)
        retrievals.append(int((out.get("usage") or {}).get("retrieval_calls", 0)))
    if not walls:
        return {"errors": errors}
    per_call_ms = 1000 * sum(overheads) / max(1, sum(calls))
    row: dict[str, Any] = {
        "compile_s": round(compile_s, 4),
        "questions": len(walls),
        "errors": errors,
        "llm_calls_mean": round(statistics.fmean(calls), 2),
        "retrieval_calls_mean": round(statistics.fmean(retrievals), 2),
        "overhead_ms_mean": round(1000 * statistics.fmean(overheads), 1),
        "overhead_ms_p50": round(1000 * statistics.median(overheads), 1),
        "overhead_ms_max": round(1000 * max(overheads), 1),
        "overhead_cpu_ms_mean": round(1000 * statistics.fmean(cpus), 1),
        "overhead_ms_per_llm_call": round(per_call_ms, 1),
    }
    ref = reference.get(method)
    if ref:
        scaled = per_call_ms * max(1.0, float(ref["median_llm_calls"]))
        row["embedded_model"] = ref
        row["overhead_ms_scaled_to_embedded_calls"] = round(scaled, 1)
        row["overhead_pct_of_embedded_wall"] = round(
            100 * max(scaled, row["overhead_ms_mean"]) / 1000 / ref["median_wall_s"], 2
        )
    return row


def measure(
    store: Any, questions: list[str], methods: list[str], reply: str, reference: dict[str, Any]
) -> dict[str, Any]:
    """The store's searches and every method's overhead, under the current load."""
    with contextlib.suppress(OSError), open("/proc/loadavg") as fh:
        loadavg = fh.read().split()[:3]
    searches = measure_store(store, questions)
    log(f"searches: {searches}")
    result: dict[str, Any] = {"loadavg_at_start": loadavg, "searches": searches, "methods": {}}
    for method in methods:
        result["methods"][method] = measure_method(method, store, questions, reply, reference)
        log(f"{method}: {result['methods'][method]}")
    return result


def ratios(busy: dict[str, Any], quiet: dict[str, Any]) -> dict[str, Any]:
    """Each busy time over its quiet time."""

    def ratio(a: Any, b: Any) -> float | None:
        return round(a / b, 2) if isinstance(a, int | float) and b else None

    out: dict[str, Any] = {
        k: ratio(v, quiet["searches"].get(k))
        for k, v in busy["searches"].items()
        if not k.endswith("cpu_ms_mean")
    }
    for method, row in busy["methods"].items():
        base = quiet["methods"].get(method, {})
        out[f"{method}_overhead_ms_mean"] = ratio(
            row.get("overhead_ms_mean"), base.get("overhead_ms_mean")
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=20)
    ap.add_argument(
        "--first", type=int, default=60, help="first question index (0-49 are held out)"
    )
    ap.add_argument("--methods", default="", help="comma-separated; default all")
    ap.add_argument("--reply", default="Answer: Paris", help="the scripted model's reply")
    ap.add_argument("--out", help="also write the JSON result to this file")
    ap.add_argument(
        "--reference", default="docs/results/*.results.jsonl",
        help="glob of result rows with the embedded model to compare with (wall time, calls)",
    )  # fmt: skip
    ap.add_argument("--busy", action="store_true", help="measure quiet, then beside busy cores")
    ap.add_argument(
        "--busy-workers", type=int, default=0,
        help="CPU-burning processes with --busy (default: the LLM server's threads)",
    )  # fmt: skip
    ap.add_argument("--busy-max-s", type=float, default=1800.0, help="the burners' time limit")
    args = ap.parse_args()
    # threads as in gaprag's own processes with the embedded LLM server beside them
    config.manage_torch_threads()
    config.embedded_llm_started(config.llama_threads())
    methods = args.methods.split(",") if args.methods else list(list_methods())
    rows = [json.loads(line) for line in QUESTIONS.open(encoding="utf-8")]
    questions = [r["question"] for r in rows[args.first : args.first + args.questions]]

    t = time.perf_counter()
    from gaprag.stores.demo import demo_store

    store = demo_store(progress=False)  # built once under GAPRAG_HOME, else opened
    first_store_s = time.perf_counter() - t
    from gaprag.stores.store import Store

    t = time.perf_counter()
    reopened = Store.open(store.root)
    open_s = time.perf_counter() - t
    t = time.perf_counter()
    reopened.search("warm up the sparse and dense indexes", 5)
    first_search_s = time.perf_counter() - t
    setup = {
        "demo_store_first_call_s": round(first_store_s, 3),
        "store_open_s": round(open_s, 3),
        "first_hybrid_search_s": round(first_search_s, 3),
        "passages": len(store),
    }
    log(f"store: {setup}")

    reference = embedded_reference(args.reference)
    result: dict[str, Any] = {
        "machine": machine(),
        "questions": f"hotpotqa.dev {args.first}-{args.first + len(questions) - 1}",
        "reply": args.reply,
        "store": setup,
        "quiet": measure(store, questions, methods, args.reply, reference),
    }
    if args.busy:
        workers = args.busy_workers or config.llama_threads()
        log(f"busy: {workers} CPU-burning processes beside this one")
        with busy(workers, args.busy_max_s):
            result["busy"] = {
                "workers": workers,
                **measure(store, questions, methods, args.reply, reference),
            }
        result["busy_over_quiet"] = ratios(result["busy"], result["quiet"])
    result["rss_mib_end"] = load_rss_mb()
    text = json.dumps(result)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(text)


if __name__ == "__main__":
    main()
