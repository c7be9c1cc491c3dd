"""``python -m lab``: the lab's commands (``replay``, ``rfm``), with gaprag's one-line errors."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gaprag.errors import GapragError


def build_parser() -> argparse.ArgumentParser:
    from lab.replay import cli as replay_cli
    from lab.rfm import cli as rfm_cli

    parser = argparse.ArgumentParser(
        prog="python -m lab",
        description="gaprag's research lab: offline replays of eval runs, RFM-RAG's "
        "R-Feedback model (run from the repository's root)",
    )
    parser.add_argument("--quiet", dest="quiet_all", action="store_true", help="no progress bars")
    sub = parser.add_subparsers(dest="command", required=True)
    replay_cli.register(sub)
    rfm_cli.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from gaprag.config import offline_env

    offline_env()
    args = build_parser().parse_args(argv)
    args.quiet = args.quiet_all or getattr(args, "quiet", False)
    try:
        return int(args.func(args))
    except GapragError as err:
        print(f"lab: error: {err.message}", file=sys.stderr)
        if err.hint:
            print(f"  hint: {err.hint}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
