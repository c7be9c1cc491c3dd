"""Do two evaluation runs of the same questions give the same predictions?

Compares the rows of ``gaprag eval`` directories (the first is the reference) on the
(dataset, method, question) keys they share: per method, how many predictions, F1 values,
stop reasons and LLM-call counts are identical, and every difference. Writes the comparison
as JSON with ``--out``; exits 1 when a prediction differs.

    python benchmarks/repeatability.py runs/repeat-a runs/repeat-b --out repeat.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from gaprag.eval.results import read_results

FIELDS = ("prediction", "f1", "stop_reason", "llm_calls")


def compare(dirs: list[Path]) -> dict[str, Any]:
    runs = [
        {(r.get("dataset"), r.get("method"), r.get("id")): r for r in read_results(d)
         if not r.get("error")}
        for d in dirs
    ]  # fmt: skip
    shared = sorted(set.intersection(*(set(run) for run in runs)), key=str)
    per: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    differences: list[dict[str, Any]] = []
    for key in shared:
        method = str(key[1])
        per[method]["compared"] += 1
        rows = [run[key] for run in runs]
        for field in FIELDS:
            same = all(r.get(field) == rows[0].get(field) for r in rows[1:])
            per[method][f"same_{field}"] += same
            if not same:
                differences.append({"dataset": key[0], "method": method, "id": key[2],
                                    "field": field, "values": [r.get(field) for r in rows]})  # fmt: skip
    serving = []
    for d in dirs:
        run_file = d / "run.json"
        info = json.loads(run_file.read_text(encoding="utf-8")) if run_file.is_file() else {}
        serving.append(
            {"dir": str(d), "updated": info.get("updated"), "serving": info.get("serving")}
        )
    return {
        "runs": serving,
        "compared": len(shared),
        "identical_predictions": sum(m["same_prediction"] for m in per.values()),
        "methods": {m: dict(v) for m, v in per.items()},
        "differences": differences,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path, help="two or more `gaprag eval` directories")
    ap.add_argument("--out", type=Path, help="write the comparison here (JSON)")
    args = ap.parse_args(argv)
    if len(args.dirs) < 2:
        ap.error("give two or more directories")
    result = compare(args.dirs)
    for method, counts in result["methods"].items():
        print(f"{method}: {counts['same_prediction']} of {counts['compared']} predictions identical"
              f" ({', '.join(f'{k[5:]} {v}' for k, v in counts.items() if k.startswith('same_') and k != 'same_prediction')})")  # fmt: skip
    print(f"all: {result['identical_predictions']} of {result['compared']} predictions identical")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    return 0 if result["identical_predictions"] == result["compared"] else 1


if __name__ == "__main__":
    sys.exit(main())
