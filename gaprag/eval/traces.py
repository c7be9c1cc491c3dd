"""``python -m gaprag.eval.traces convert DIR``: turn the per-question trace files of older
runs (``traces/<method>/<id>.json``) under ``DIR`` into ``traces/<method>.jsonl.xz``
(:mod:`gaprag.traces`), removing the JSON files."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def main(argv: Sequence[str] | None = None) -> int:
    from gaprag.traces import convert

    ap = argparse.ArgumentParser(prog="python -m gaprag.eval.traces", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    conv = sub.add_parser("convert", help="compress the trace folders under DIR (recursively)")
    conv.add_argument("dirs", nargs="+", type=Path, metavar="DIR")
    args = ap.parse_args(argv)
    for d in args.dirs:
        if not d.is_dir():
            print(f"gaprag: no directory {d}", file=sys.stderr)
            return 2
        for path in convert(d):
            print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
