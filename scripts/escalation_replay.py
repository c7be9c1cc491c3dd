"""Choose escalating_rag's settings offline, from evaluation rows that hold every candidate.

    python scripts/select_replay.py --score docs/results/headroom/calib60/*   # score loop answers
    python scripts/escalation_replay.py docs/results/headroom/calib60/* --max-calls 3

Each directory is one set's ``gaprag eval`` output of plain RAG and the iterative methods with
their gates recording plain RAG's answer but never stopping (``scripts/eval_headroom.sh``).
Prints the setting with the best mean F1 on the calibration questions (index 60 on) within
``--max-calls`` mean LLM calls, its F1 and calls per set, plain RAG's and the oracle's F1, and
the first few runners-up, and with ``--json`` writes them.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys
from pathlib import Path

from gaprag.errors import GapragError
from gaprag.eval.escalation import evaluate, fit, questions, write_profile


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="a `gaprag eval` set dir")
    ap.add_argument("--max-calls", type=float, default=3.0, help="mean LLM calls allowed")
    ap.add_argument("--call-budget", type=int, default=8, help="escalating_rag's call_budget")
    ap.add_argument("--firsts", default="", help="comma-separated first loops to try (all)")
    ap.add_argument("--seconds", default="", help="comma-separated second loops, none too (all)")
    ap.add_argument("--gate-p", default="", help="comma-separated gate probabilities (all)")
    ap.add_argument("--margins", default="0,0.1,0.2,0.3", help="select_margin values to try")
    ap.add_argument("--json", type=Path, default=None, help="also write the result as JSON")
    ap.add_argument(
        "--write-profile",
        type=Path,
        default=None,
        metavar="TOML",
        help="write the setting into this model profile's [escalating_rag] section",
    )
    args = ap.parse_args(argv)
    try:
        qs = questions(args.dirs)
        setting, result = fit(
            qs,
            max_calls=args.max_calls,
            call_budget=args.call_budget,
            margins=[float(m) for m in args.margins.split(",") if m],
            firsts=[m for m in args.firsts.split(",") if m],
            seconds=[m for m in args.seconds.split(",") if m],
            gate_ps=[float(p) for p in args.gate_p.split(",") if p],
        )
    except (GapragError, ValueError) as err:
        print(f"escalation_replay: {err}", file=sys.stderr)
        return 2
    per_set = {
        ds: evaluate([q for q in qs if q.dataset == ds], setting)
        for ds in sorted({q.dataset for q in qs})
    }
    out = {"setting": dataclasses.asdict(setting), "calibration": result, "per_set": per_set}
    print(json.dumps(out, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    if args.write_profile is not None:
        calib = [q for q in qs if q.index is None or q.index >= 60]
        sets = sorted({q.dataset for q in calib})
        notes = {
            "date": datetime.date.today().isoformat(),
            "command": "python scripts/escalation_replay.py "
            + " ".join(str(d) for d in args.dirs)
            + f" --max-calls {args.max_calls:g} --call-budget {args.call_budget}"
            + (f" --firsts {args.firsts}" if args.firsts else "")
            + (f" --seconds {args.seconds}" if args.seconds else "")
            + (f" --gate-p {args.gate_p}" if args.gate_p else "")
            + f" --margins {args.margins}",
            "sets": sets,
            "objective": f"mean F1, at most {args.max_calls:g} LLM calls a question on average",
        }
        write_profile(args.write_profile, setting, result, notes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
