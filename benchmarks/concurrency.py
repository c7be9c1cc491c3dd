"""Throughput of ``gaprag eval --concurrency N``: a 1 s-latency fake endpoint, and the embedded server.

Fake endpoint: ``tests/fake_openai.py``'s OpenAI-compatible server with an injected latency
(default 1 s per chat reply) answering every request in its own thread, like an endpoint with
as many slots as requests (what vLLM gives). Each N runs ``4*N`` questions (at least 8) of the
bundled HotpotQA dev set from question 60 on; throughput = questions / wall time of the eval
call. ``gaprag eval`` runs in this process (``gaprag.cli.main``) so interpreter start-up is not
counted; one unmeasured warm-up eval opens the store first. Throughput counts from the start
of the eval call to the last result row written (the report and plots written after it are
left out; ``eval_wall_s`` includes them).

Embedded server (``--embedded``): the same with the model gaprag starts itself (no
``GAPRAG_BASE_URL``; one slot, as every eval's repeatable serving; ``--slots N`` starts it here
with N slots instead), for the given N values and a fixed number of questions, each N on new
questions (llama.cpp reuses a slot's cached prompt, so repeating questions would be free).

    python benchmarks/concurrency.py [--ns 1,4,16,32] [--latency 1.0] [--method standard_rag]
    python benchmarks/concurrency.py --embedded --ns 1,2 --questions 4
    python benchmarks/concurrency.py --embedded --slots 2 --ns 1,2 --questions 4

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gaprag.cli import main as gaprag_main
from gaprag.config import environ
from tests.fake_openai import FakeOpenAI


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_eval(
    method: str, n: int, questions: int, offset: int, out: Path, sets: list[str]
) -> dict[str, Any]:
    start = time.time()
    c = time.process_time()
    t = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # the summary table: not ours to print
        code = gaprag_main(
        [
            "eval", "--methods", method, "--dataset", "hotpotqa", "--offset", str(offset),
            "--limit", str(questions), "--concurrency", str(n), "--out", str(out), "--quiet",
            "--max-errors", "0", *(a for kv in sets for a in ("--set", kv)),
        ]
        )  # fmt: skip
    wall = time.perf_counter() - t
    cpu = time.process_time() - c  # this process: graphs, retrieval, HTTP client, eval writing
    results = out / "results.jsonl"
    phase = results.stat().st_mtime - start  # the last result row written; report comes after
    rows = [json.loads(line) for line in results.open()]
    errors = sum(1 for r in rows if r.get("error"))
    calls = sum(int(r.get("llm_calls") or 0) for r in rows)
    return {
        "concurrency": n,
        "questions": len(rows),
        "errors": errors,
        "exit_code": code,
        "llm_calls": calls,
        "eval_wall_s": round(wall, 2),
        "questions_phase_s": round(phase, 2),
        "questions_per_s": round(len(rows) / phase, 3),
        "llm_calls_per_s": round(calls / phase, 3),
        "ideal_questions_per_s": None,
        "gaprag_cpu_s_per_question": round(cpu / max(1, len(rows)), 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ns", default="1,4,16,32")
    ap.add_argument("--latency", type=float, default=1.0)
    ap.add_argument("--method", default="standard_rag")
    ap.add_argument("--offset", type=int, default=60, help="questions 0-49 are held out")
    ap.add_argument("--questions", type=int, default=0, help="per N; 0 = max(8, 4*N)")
    ap.add_argument("--embedded", action="store_true", help="use the embedded model server")
    ap.add_argument(
        "--slots", type=int, default=1,
        help="with --embedded: serve this many requests at once (a server started here, not "
        "in an eval's one-slot repeatable mode)",
    )  # fmt: skip
    ap.add_argument("--set", action="append", default=[], help="passed to gaprag eval --set")
    args = ap.parse_args()
    ns = [int(x) for x in args.ns.split(",")]
    result: dict[str, Any] = {"method": args.method, "sets": args.set, "runs": []}
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gaprag-conc-")))
        if args.embedded and args.slots > 1:
            from gaprag.llm.server import free_port, local_server_config

            srv = local_server_config()
            srv.port, srv.slots = free_port(), args.slots
            srv.start()
            stack.callback(srv.stop)
            stack.enter_context(environ(GAPRAG_BASE_URL=srv.base_url, GAPRAG_MODEL=srv.model))
            result["endpoint"] = f"embedded server with {args.slots} slots"
            result["serving"] = srv.settings()
        elif args.embedded:
            stack.enter_context(environ(GAPRAG_BASE_URL=None, OPENAI_BASE_URL=None))
            result["endpoint"] = "embedded server (started by gaprag)"
        else:
            server = stack.enter_context(FakeOpenAI(reply="Answer: Paris", latency=args.latency))
            stack.enter_context(environ(GAPRAG_BASE_URL=server.base_url, GAPRAG_MODEL="fake-model"))
            result["endpoint"] = f"fake OpenAI server, {args.latency} s per reply"
        run_eval(
            args.method, 1, 1, args.offset, tmp / "warmup", args.set
        )  # opens the store, not counted
        offset = args.offset + 1
        for n in ns:
            q = args.questions or max(8, 4 * n)
            row = run_eval(args.method, n, q, offset, tmp / f"n{n}", args.set)
            row["first_question"] = offset
            if args.embedded:  # new questions for each N: the server's prompt cache must not help
                offset += q
            if not args.embedded and row["llm_calls"]:
                per_q = args.latency * row["llm_calls"] / row["questions"]
                row["ideal_questions_per_s"] = round(n / per_q, 3)  # latency-bound, no overhead
            base = result["runs"][0]["questions_per_s"] if result["runs"] else None
            if base:
                row["speedup_vs_first"] = round(row["questions_per_s"] / base, 2)
            result["runs"].append(row)
            log(str(row))
    with contextlib.suppress(OSError), open("/proc/loadavg") as fh:
        result["loadavg_at_end"] = fh.read().split()[:3]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
