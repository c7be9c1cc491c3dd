"""What reusing repeated replies saves, read from an evaluation's traces.

Within one question's run, the LLM layer answers a call whose messages and settings repeat an
earlier call of the same run from its memo (gaprag.llm.memo) when the model samples at
temperature 0. This script replays that rule on the traces of runs made without it: a call
whose messages equal an earlier call's in the same trace would not have been sent. It reports
per set and method the calls, prompt tokens and LLM seconds that would have been saved, and
checks that every repeated prompt got the same reply (what makes the reuse safe).

    python benchmarks/reply_reuse.py docs/results/n50/after/hotpotqa docs/results/n50/after/2wikimultihopqa

The traces keep the messages, not the request settings, so two calls with the same messages
and other settings (none in the shipped methods' normal paths) would count as one.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from gaprag.traces import iter_traces


def replay(trace: dict[str, Any]) -> dict[str, float]:
    """Totals of one question's run, and of the calls the memo would have answered."""
    seen: dict[str, str] = {}
    out: dict[str, float] = defaultdict(float)
    for call in trace.get("llm_calls") or []:
        key = json.dumps(call["messages"], sort_keys=True)
        out["calls"] += 1
        out["tokens"] += call.get("prompt_tokens") or 0
        out["seconds"] += call.get("seconds") or 0.0
        if key in seen:
            out["reused"] += 1
            out["reused_tokens"] += call.get("prompt_tokens") or 0
            out["reused_seconds"] += call.get("seconds") or 0.0
            out["different_reply"] += seen[key] != call.get("reply")
        else:
            seen[key] = call.get("reply", "")
    out["wall_s"] = float(trace.get("wall_s") or 0.0)
    out["questions_with_repeats"] = float(out["reused"] > 0)
    out["questions"] = 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("dirs", nargs="+", type=Path, help="evaluation output directories")
    args = ap.parse_args()
    print(
        "| set | method | questions | LLM calls / q | repeated / q | repeated share of calls "
        "| of prompt tokens | of wall time | questions with repeats | repeats with another reply |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for d in args.dirs:
        by_method: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
        for trace in iter_traces([d / "traces"]):  # a question's last trace wins
            by_method[str(trace.get("method"))][str(trace.get("id"))] = trace
        for method in sorted(by_method):
            tot: dict[str, float] = defaultdict(float)
            for trace in by_method[method].values():
                for k, v in replay(trace).items():
                    tot[k] += v
            n = tot["questions"]
            if not n:
                continue
            share = tot["reused"] / tot["calls"] if tot["calls"] else 0.0
            tok = tot["reused_tokens"] / tot["tokens"] if tot["tokens"] else 0.0
            wall = tot["reused_seconds"] / tot["wall_s"] if tot["wall_s"] else 0.0
            print(
                f"| {d.parent.name}/{d.name} | {method} | {n:.0f} | {tot['calls'] / n:.2f} "
                f"| {tot['reused'] / n:.2f} | {share:.1%} | {tok:.1%} | {wall:.1%} "
                f"| {tot['questions_with_repeats']:.0f} | {tot['different_reply']:.0f} |"
            )


if __name__ == "__main__":
    main()
