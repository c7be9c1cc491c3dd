"""Print a method page's "Measured" table from evaluation summaries, so the pages quote the
committed numbers instead of copies typed by hand.

    python scripts/method_rows.py migres docs/results/n50/after/hotpotqa [more set dirs...]

Each directory needs the ``summary.json`` that ``gaprag report DIR --out DIR`` writes. One row
per set for the method and, first, for the baseline it is compared with.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from gaprag.eval.markdown import calls_cell, stat_cell  # the report's own cells

HEADER = (
    "| set | method | n | EM | F1 | Acc | support recall | ΔF1 vs standard_rag [95% CI] "
    "| wins / losses | LLM calls / q | prompt + completion tok / q | retrievals / q "
    "| iterations / q | s / q | stop reasons |"
)


def row(ds: str, method: str, v: dict[str, Any]) -> str:
    c = v["cost"]
    vs = (v.get("vs_baseline") or {}).get("f1")
    wl = f"{vs['wins']} / {vs['losses']}" if vs else "–"
    stops = ", ".join(f"{k} {n}" for k, n in v["stop_reasons"].items())
    return (
        f"| {ds} | {method} | {v['n']} | {v['em']['mean']:.2f} | {v['f1']['mean']:.3f} "
        f"| {v['acc']['mean']:.2f} | {v['support_recall']['mean']:.2f} "
        f"| {stat_cell(vs, signed=True)} | {wl} "
        f"| {calls_cell(c)} | {c['prompt_tokens']:.0f} + {c['completion_tokens']:.0f} "
        f"| {c['retrieval_calls']:.2f} | {c['iterations']:.2f} | {c['wall_s']:.0f} | {stops} |"
    )


def rows(method: str, dirs: list[Path]) -> list[str]:
    """The table's rows: per set directory and dataset, the baseline's row, then ``method``'s."""
    out = []
    for d in dirs:
        summary = json.loads((d / "summary.json").read_text())
        for ds, block in summary["datasets"].items():
            methods = block["methods"]
            base = block.get("baseline", "standard_rag")
            out += [row(ds, m, methods[m]) for m in (base, method) if m in methods]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("method")
    ap.add_argument("dirs", nargs="+", type=Path)
    args = ap.parse_args()
    print(HEADER)
    print("|" + "---|" * (HEADER.count("|") - 1))
    print("\n".join(rows(args.method, args.dirs)))


if __name__ == "__main__":
    main()
