"""Seconds per paragraph of RAG-EF's synthetic set S, one call at a time against two in flight
on an embedded server with as many slots (what `SYNTH_CONCURRENCY=2 bash scripts/eval_n50.sh
rag_ef` would use).

    python benchmarks/synth_concurrency.py --dataset hotpotqa --paragraphs 12 \\
        --out benchmarks/results_synth_concurrency.json

Each setting runs in its own process (the embedded server's slots are fixed when it starts),
on the same paragraphs (those of the set's questions from index 60 on, never the reported
ones), into a throw-away pair store, at temperature 0. Stop other CPU work first.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def one(dataset: str, paragraphs: int, concurrency: int) -> dict[str, Any]:
    from dataclasses import replace

    from gaprag.datasets import calibration_slice, load_dataset
    from gaprag.graphs.rag_ef.synth import synthesize
    from gaprag.llm.factory import default_llm, serving_settings
    from gaprag.stores.pairs import PairStore

    data = load_dataset(dataset)
    calibration = replace(data, examples=calibration_slice(data.examples, what="benchmark"))
    docs = calibration.documents()[:paragraphs]  # the corpus of questions 60+, in file order
    llm = default_llm()
    llm.generate("Say OK.", max_tokens=2)  # the server is up and warm before the clock starts
    with tempfile.TemporaryDirectory() as tmp:
        store = PairStore.open(Path(tmp) / "pairs.sqlite")
        start = time.perf_counter()
        report = synthesize(store, docs, llm, progress=False, concurrency=concurrency)
        wall = time.perf_counter() - start
        store.close()
    return {
        "concurrency": concurrency,
        "paragraphs": report.processed,
        "pairs": report.pairs,
        "wall_s": round(wall, 1),
        "s_per_paragraph": round(wall / max(1, report.processed), 2),
        "serving": serving_settings(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="hotpotqa")
    ap.add_argument("--paragraphs", type=int, default=12)
    ap.add_argument("--concurrency", default="1,2", help="comma-separated settings to compare")
    ap.add_argument("--out")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.dataset, args.paragraphs, args.one)))
        return
    load = list(os.getloadavg())
    rows = []
    for c in [int(x) for x in args.concurrency.split(",")]:
        env = {**os.environ, "GAPRAG_LOCAL_SLOTS": str(c)}
        cmd = [sys.executable, __file__, "--dataset", args.dataset,
               "--paragraphs", str(args.paragraphs), "--one", str(c)]  # fmt: skip
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        row = json.loads(done.stdout.strip().splitlines()[-1])
        print(json.dumps({k: v for k, v in row.items() if k != "serving"}), file=sys.stderr)
        rows.append(row)
    base = rows[0]["s_per_paragraph"]
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join(["python", "benchmarks/synth_concurrency.py", *sys.argv[1:]]),
        "dataset": args.dataset,
        "load_avg_start": load,
        "rows": rows,
        "speed_up": {str(r["concurrency"]): round(base / r["s_per_paragraph"], 2) for r in rows},
    }
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
