"""Replay the reread tie-break on the rows of evaluation runs (gaprag.eval.reread).

    python scripts/reread_replay.py --send docs/results/headroom/calib60/hotpotqa ...
    python scripts/reread_replay.py docs/results/n50/escalation/hotpotqa ...

``--send`` first sends the reread request, with the configured model (``GAPRAG_BASE_URL``,
else the embedded ``GAPRAG_LOCAL_MODEL``), for every row whose candidates differ and that has
none yet, appending to the directory's ``reread.jsonl`` (interrupt and run again to continue;
``--limit N`` sends at most N). Then it prints, per method, the run's F1 and each rule's on the
calibration questions (60 on) and on the reported ones (0-49).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gaprag.errors import GapragError
from gaprag.eval.reread import replay, reread_runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="a `gaprag eval` set dir")
    ap.add_argument("--send", action="store_true", help="send the missing rereads first")
    ap.add_argument("--limit", type=int, default=None, help="send at most N this time")
    ap.add_argument("--methods", default="", help="comma-separated methods (default: all)")
    args = ap.parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]
    try:
        if args.send:
            from gaprag.llm.factory import default_llm

            done = reread_runs(
                args.dirs,
                default_llm(repeatable=True),
                methods=methods,
                limit=args.limit,
                progress=lambda line: print(line, file=sys.stderr, flush=True),
            )
            print(f"sent {done} reread(s)", file=sys.stderr)
        print(replay(args.dirs, methods))
    except GapragError as err:
        print(f"reread_replay: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
