"""Memory of ``gaprag index`` on one large text file: passages, wall time and peak RSS per size.

For each size (default 10, 30 and 60 MB) it writes a deterministic text file: the paragraphs
of the bundled evaluation sets (``gaprag/data/eval``), blank-line separated, repeated in a
shuffled order (seeded by the repetition) with each paragraph opened by ``Part N.``, until the
file has that many bytes. It then runs ``gaprag index FILE --store TMP --embedder hashing``
in a child process (from this checkout's folder, so it runs this checkout's gaprag) and reads
the child's peak resident memory from ``wait4``. The hashing
embedder has no model, so the figure is gaprag's own memory (Python, its libraries, the
passages, BM25 and Chroma), not an embedding model's.

Each store is then opened in another child, which runs one hybrid search: its peak
(``open_and_search_peak_rss_mb``) is what a reader of the store holds, for comparison.
``--baseline`` also reports a child that only imports what ``gaprag index`` imports, so the
part of the peak that is the process itself can be subtracted.

    python benchmarks/large_file.py [--sizes 10 30 60] [--out benchmarks/results_large_file.json]

The last line printed is one JSON object (also written to ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "gaprag" / "data" / "eval"
#: what a reader of the store holds: the store opened and one hybrid search (BM25 and Chroma)
OPEN_AND_SEARCH = (
    "import sys; from gaprag.stores.store import Store; "
    "Store.open(sys.argv[1]).search('film director born in', 5, mode='hybrid')"
)
IMPORTS = (
    "import gaprag.cli, gaprag.stores.store, gaprag.stores.loaders, chromadb, bm25s, "
    "langchain_text_splitters"
)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def paragraphs() -> list[str]:
    """The bundled evaluation sets' paragraphs, each once, in file order."""
    seen: dict[str, str] = {}
    for path in sorted(DATA.glob("*.jsonl")):
        for line in path.open(encoding="utf-8"):
            for p in json.loads(line).get("paragraphs", []):
                text = " ".join(str(p.get("text", "")).split())
                if text:
                    seen.setdefault(p["id"], f"{p.get('title', '')}. {text}")
    return list(seen.values())


def write_file(path: Path, megabytes: int, paras: list[str]) -> int:
    """A text file of ``megabytes`` MB (2**20 bytes) of paragraphs; its size in bytes."""
    want = megabytes << 20
    written = 0
    rep = 0
    with path.open("w", encoding="utf-8") as fh:
        while written < want:
            order = list(range(len(paras)))
            random.Random(rep).shuffle(order)
            for i in order:
                block = f"Part {rep}. {paras[i]}\n\n"
                fh.write(block)
                written += len(block.encode())
                if written >= want:
                    break
            rep += 1
    return path.stat().st_size


def run_child(cmd: list[str]) -> dict[str, Any]:
    """Run ``cmd``; its wall time, peak RSS (from wait4) and output."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{out}")
    return {
        "wall_s": round(wall, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # ru_maxrss is in KiB on Linux
        "output": out,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 30, 60], help="MB per file")
    ap.add_argument("--embedder", default="hashing")
    ap.add_argument("--baseline", action="store_true", help="also measure the imports alone")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON result here")
    args = ap.parse_args()
    paras = paragraphs()
    env_python = sys.executable
    rows: list[dict[str, Any]] = []
    work = Path(tempfile.mkdtemp(prefix="gaprag-large-"))
    try:
        baseline = None
        if args.baseline:
            baseline = run_child([env_python, "-c", IMPORTS])
            baseline.pop("output")
            log(f"imports alone: {baseline}")
        for mb in args.sizes:
            text = work / f"large-{mb}mb.txt"
            size = write_file(text, mb, paras)
            store = work / f"store-{mb}"
            cmd = [env_python, "-m", "gaprag.cli", "index", str(text), "--store", str(store),
                   "--embedder", args.embedder, "--quiet"]  # fmt: skip
            log(f"{mb} MB: indexing")
            got = run_child(cmd)
            opened = run_child([env_python, "-c", OPEN_AND_SEARCH, str(store)])
            manifest = json.loads(
                (store / (store / "CURRENT").read_text().strip() / "manifest.json").read_text()
            )
            row = {
                "file_mb": mb,
                "file_bytes": size,
                "passages": manifest["count"],
                "wall_s": got["wall_s"],
                "cpu_s": got["cpu_s"],
                "peak_rss_mb": got["peak_rss_mb"],
                "timings_s": manifest["timings_s"],
                "open_and_search_peak_rss_mb": opened["peak_rss_mb"],
            }
            log(json.dumps(row))
            rows.append(row)
            shutil.rmtree(store)
            text.unlink()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    result = {
        "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": commit,
        "machine": {
            "cpus": os.cpu_count(),
            "processor": platform.processor() or platform.machine(),
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        },
        "embedder": args.embedder,
        "imports_alone": baseline,
        "runs": rows,
        "self_rusage_max_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    line = json.dumps(result)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(line)


if __name__ == "__main__":
    main()
