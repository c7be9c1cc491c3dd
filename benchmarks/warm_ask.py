"""A warm `gaprag ask`: the wall time of the command, start to answer, once the store is built
and the model assembled, against a fake OpenAI-compatible endpoint that answers at once.

A store of ``--files`` bundled paragraphs (one Markdown file each) is built with
``gaprag index`` and the bundled MiniLM embedder (which exports MiniLM for quick queries), the
fake endpoint is started (``tests/fake_openai.py``), and ``gaprag ask --store`` runs ``--asks``
times in fresh processes (hybrid retrieval: BM25 and the question embedded by MiniLM). The same
asks run again with the ONNX export made unreadable, so queries load sentence-transformers and
torch as before it. Each process's wall time and peak memory are recorded; ``warm_s`` is the median
with the export.

    python benchmarks/warm_ask.py [--files 200] [--asks 5] [--out FILE]

``--embedded`` measures the embedded local model instead (``GAPRAG_LOCAL_MODEL``, e.g.
``smollm2-135m``; no endpoint): ``--asks`` asks with ``GAPRAG_LOCAL_KEEP_S=0`` (each starts its
own server), then ``--asks`` asks with the server kept (the first starts it, the next ones use
it), each ask ``--method standard_rag``; ``started_s`` and ``kept_s`` are the medians of the
asks that started a server and of those that used the kept one.

    python benchmarks/warm_ask.py --embedded [--files 200] [--asks 3] [--out FILE]

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

QUESTION = "Which magazine was started first, Arthur's Magazine or First for Women?"


def timed(cmd: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run ``cmd``; its wall seconds and peak memory (MiB)."""
    start = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], env=env, capture_output=True,
                          text=True, check=True)  # fmt: skip
    wall = time.perf_counter() - start
    rss_kib = int(done.stderr.strip().splitlines()[-1])
    return {"wall_s": round(wall, 2), "max_rss_mib": round(rss_kib / 1024, 1)}


def commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return ""


def machine() -> dict[str, Any]:
    import platform

    return {"cores": os.cpu_count(), "cpu": platform.processor() or platform.machine(),
            "load_average_before": [round(x, 2) for x in os.getloadavg()]}  # fmt: skip


def embedded(args: argparse.Namespace) -> dict[str, Any]:
    """First and later asks on the embedded model, with and without the kept server."""
    from index_vs_langchain import write_folder

    measured, host = commit(), machine()
    work = Path(tempfile.mkdtemp(prefix="gaprag-warm-ask-embedded-"))
    env = {**os.environ, "GAPRAG_HOME": str(work / "home"), "GAPRAG_QUIET": "1",
           "PYTHONPATH": str(ROOT)}  # fmt: skip
    for name in ("GAPRAG_BASE_URL", "OPENAI_BASE_URL", "GAPRAG_MODEL"):
        env.pop(name, None)
    model = env.setdefault("GAPRAG_LOCAL_MODEL", "smollm2-135m")
    gaprag = [sys.executable, "-m", "gaprag.cli"]
    try:
        subprocess.run([*gaprag, "llm", "install", model], env=env, check=True,
                       capture_output=True)  # fmt: skip
        write_folder(work / "corpus", args.files)
        timed([*gaprag, "index", str(work / "corpus"), "--store", str(work / "s")], env)
        ask = [*gaprag, "ask", QUESTION, "--store", str(work / "s"), "--method", "standard_rag"]
        started = [timed(ask, {**env, "GAPRAG_LOCAL_KEEP_S": "0"}) for _ in range(args.asks)]
        kept = [timed(ask, {**env, "GAPRAG_LOCAL_KEEP_S": "600"}) for _ in range(args.asks)]
    finally:
        subprocess.run([*gaprag, "llm", "stop"], env=env, check=False, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    return {
        "command": f"python benchmarks/warm_ask.py --embedded --files {args.files} "
        f"--asks {args.asks}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": measured,
        "model": model,
        "machine": host,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "started_s": statistics.median(r["wall_s"] for r in [*started, kept[0]]),
        "kept_s": statistics.median(r["wall_s"] for r in kept[1:]),
        "keep_0": started,
        "keep_600": kept,
    }


def main() -> None:
    from index_vs_langchain import write_folder

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--asks", type=int, default=5)
    parser.add_argument("--embedded", action="store_true",
                        help="the embedded local model: asks that start a server and asks that "
                        "use the kept one")  # fmt: skip
    parser.add_argument("--out", help="also write the result JSON here")
    args = parser.parse_args()
    if args.embedded:
        result = embedded(args)
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        print(json.dumps(result))
        return
    measured = commit()  # the code the asks run
    work = Path(tempfile.mkdtemp(prefix="gaprag-warm-ask-"))
    env = {**os.environ, "GAPRAG_HOME": str(work / "home"), "GAPRAG_QUIET": "1",
           "PYTHONPATH": str(ROOT)}  # fmt: skip
    gaprag = [sys.executable, "-m", "gaprag.cli"]
    fake = subprocess.Popen([sys.executable, "-m", "tests.fake_openai", "--reply", "Arthur's"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert fake.stdout is not None
        env["GAPRAG_BASE_URL"], env["GAPRAG_MODEL"] = fake.stdout.readline().strip(), "fake-model"
        write_folder(work / "corpus", args.files)
        index = timed([*gaprag, "index", str(work / "corpus"), "--store", str(work / "s")], env)
        ask = [*gaprag, "ask", QUESTION, "--store", str(work / "s")]
        warm = [timed(ask, env) for _ in range(args.asks)]
        for export in (work / "home" / "models").glob("*.onnx"):
            export.write_bytes(b"not a model")  # unreadable: queries load torch, as before it
        torch = [timed(ask, env) for _ in range(args.asks)]
    finally:
        fake.terminate()
        fake.wait(10)
        shutil.rmtree(work, ignore_errors=True)
    out = {
        "command": f"python benchmarks/warm_ask.py --files {args.files} --asks {args.asks}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": measured,
        "cores": os.cpu_count(),
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "index": index,
        "warm_s": statistics.median(r["wall_s"] for r in warm),
        "warm": warm,
        "torch_queries_s": statistics.median(r["wall_s"] for r in torch),
        "torch_queries": torch,
    }
    text = json.dumps(out, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
