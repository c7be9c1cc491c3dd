"""Choose an answer-selection rule offline, from the rows and traces of gated evaluation runs.

    python scripts/select_replay.py docs/results/headroom/calib60/* docs/results/n50/gated/*
    python scripts/select_replay.py --score docs/results/headroom/calib60/*   # re-score first

Each directory is one set's ``gaprag eval`` output with traces. ``--score`` first re-scores,
with the configured model (``GAPRAG_BASE_URL``, else the embedded ``GAPRAG_LOCAL_MODEL``),
the final answer of every gated row not yet scored, appending to the directory's
``selection_scores.jsonl`` (interrupt and run again to continue; ``--limit N`` scores at most
N rows). Then it prints, per method, the candidates' F1 and each rule of
:mod:`gaprag.eval.selection` with its thresholds chosen by F1 on the calibration questions
(index 60 on) and, with those thresholds, its F1 on the reported questions (0-49).
``--check`` adds, per method and set, what selection as a profile sets it (``select =
"logprob"``) gives on the reported questions: with margin 0, and with the margin fitted on the
calibration questions, with paired intervals against plain RAG and against the run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gaprag.errors import GapragError
from gaprag.eval.selection import candidates, check, render, render_check, replay, score_runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="a `gaprag eval` set dir")
    ap.add_argument("--score", action="store_true", help="re-score rows not yet scored first")
    ap.add_argument("--limit", type=int, default=None, help="score at most N rows this time")
    ap.add_argument("--methods", default="", help="comma-separated methods (default: all gated)")
    ap.add_argument("--check", action="store_true", help="the logprob rule on questions 0-49")
    ap.add_argument("--json", type=Path, default=None, help="also write the replay as JSON")
    args = ap.parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]
    try:
        if args.score:
            from gaprag.llm.factory import default_llm

            llm = default_llm(repeatable=True)
            done = score_runs(
                args.dirs,
                llm,
                methods=methods,
                limit=args.limit,
                progress=lambda line: print(line, file=sys.stderr, flush=True),
            )
            print(f"scored {done} row(s)", file=sys.stderr)
        cands = [c for c in candidates(args.dirs) if not methods or c.method in methods]
    except GapragError as err:
        print(f"select_replay: {err}", file=sys.stderr)
        return 2
    result = replay(cands)
    print(render(result))
    if args.check:
        zero = {m: {"m": 0.0} for m in result}
        fitted = {
            m: dict(e["rules"].get("margin", {}).get("thresholds", {})) for m, e in result.items()
        }
        result = {
            "replay": result,
            "check_margin_0": check(cands, "margin", zero),
            "check_margin_fitted": check(cands, "margin", fitted),
        }
        for key in ("check_margin_0", "check_margin_fitted"):
            print()
            print(render_check(result[key]))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
