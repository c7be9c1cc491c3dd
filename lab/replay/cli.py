"""``python -m lab replay``: the offline replays over ``gaprag eval`` run directories, one subcommand
each (docs/evaluation.md):

- ``select``: choose between plain RAG's answer and each method's, by the rules of
  :mod:`lab.replay.selection` (``--score`` first re-scores the final answers from the
  traces; ``--check`` adds the graph's rule on the reported questions);
- ``reread``: break the tie between the two with one more reading
  (:mod:`lab.replay.reread`; ``--send`` first sends the missing rereads);
- ``escalation``: choose escalating_rag's settings on the calibration questions
  (:mod:`lab.replay.escalation`; ``--write-profile`` writes them).

Scoring and rereading use the configured model (``GAPRAG_BASE_URL``, else the embedded
``GAPRAG_LOCAL_MODEL``) with repeatable serving; both append beside the rows and resume.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gaprag.datasets import CALIBRATION_START
from gaprag.errors import InputError

#: an argument of a subcommand: its names and ``add_argument``'s keywords
Arg = tuple[tuple[str, ...], dict[str, Any]]

DIRS: Arg = (("dirs",), {"nargs": "+", "type": Path, "metavar": "DIR", "help": "a `gaprag eval` set dir"})  # fmt: skip
LIMIT: Arg = (("--limit",), {"type": int, "default": None, "help": "at most N this time"})
METHODS: Arg = (("--methods",), {"default": "", "help": "comma-separated methods (default: all)"})
JSON: Arg = (("--json",), {"type": Path, "default": None, "help": "also write the result as JSON"})


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _names(text: str) -> list[str]:
    return [m for m in text.split(",") if m]


def _model() -> Any:
    from gaprag.llm.factory import default_llm

    return default_llm(repeatable=True)


def _send(
    calls: Callable[..., int], args: argparse.Namespace, methods: list[str], done: str
) -> None:
    """Run ``calls`` (the LLM calls a replay needs) over ``args.dirs`` with the repeatable
    local model, and say how many were made (``done``: ``"scored {} row(s)"``)."""
    made = calls(args.dirs, _model(), methods=methods, limit=args.limit, progress=_progress)
    print(done.format(made), file=sys.stderr)


def cmd_select(args: argparse.Namespace) -> int:
    from lab.replay.candidates import pairs
    from lab.replay.scoring import score_runs
    from lab.replay.selection import check, render, render_check, replay

    methods = _names(args.methods)
    if args.score:
        _send(score_runs, args, methods, "scored {} row(s)")
    found = pairs(args.dirs, methods)
    result: dict[str, Any] = replay(found)
    print(render(result))
    if args.check:
        zero = {m: {"m": 0.0} for m in result}
        fitted = {m: dict(e["rules"].get("margin", {}).get("thresholds", {})) for m, e in result.items()}  # fmt: skip
        result = {
            "replay": result,
            "check_margin_0": check(found, "margin", zero),
            "check_margin_fitted": check(found, "margin", fitted),
        }
        for key in ("check_margin_0", "check_margin_fitted"):
            print()
            print(render_check(result[key]))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2), encoding="utf-8")
    return 0


def cmd_reread(args: argparse.Namespace) -> int:
    from lab.replay.reread import replay, reread_runs

    methods = _names(args.methods)
    if args.send:
        _send(reread_runs, args, methods, "sent {} reread(s)")
    print(replay(args.dirs, methods))
    return 0


def _escalation_command(args: argparse.Namespace) -> str:
    """The command line that made a profile's escalating_rag setting, for its record."""
    return (
        "python -m lab replay escalation "
        + " ".join(str(d) for d in args.dirs)
        + f" --max-calls {args.max_calls:g} --call-budget {args.call_budget}"
        + (f" --firsts {args.firsts}" if args.firsts else "")
        + (f" --seconds {args.seconds}" if args.seconds else "")
        + (f" --gate-p {args.gate_p}" if args.gate_p else "")
        + f" --margins {args.margins}"
    )


def cmd_escalation(args: argparse.Namespace) -> int:
    from lab.replay.escalation import fit, measure, questions, write_profile

    qs = questions(args.dirs)
    try:
        setting, result = fit(
            qs,
            max_calls=args.max_calls,
            call_budget=args.call_budget,
            margins=[float(m) for m in _names(args.margins)],
            firsts=_names(args.firsts),
            seconds=_names(args.seconds),
            gate_ps=[float(p) for p in _names(args.gate_p)],
        )
    except ValueError as err:
        raise InputError(str(err), hint="allow more calls (--max-calls)") from None
    per_set = {
        ds: measure([q for q in qs if q.dataset == ds], setting)
        for ds in sorted({q.dataset for q in qs})
    }
    out = {"setting": dataclasses.asdict(setting), "calibration": result, "per_set": per_set}
    print(json.dumps(out, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    if args.write_profile is not None:
        calib = [q for q in qs if q.index is None or q.index >= CALIBRATION_START]
        notes = {
            "date": datetime.date.today().isoformat(),
            "command": _escalation_command(args),
            "sets": sorted({q.dataset for q in calib}),
            "objective": f"mean F1, at most {args.max_calls:g} LLM calls a question on average",
        }
        write_profile(args.write_profile, setting, result, notes)
    return 0


SUBCOMMANDS: dict[str, tuple[str, Callable[[argparse.Namespace], int], Sequence[Arg]]] = {
    "select": (
        "choose between plain RAG's answer and each method's on recorded runs",
        cmd_select,
        [DIRS, LIMIT, METHODS, JSON,
         (("--score",), {"action": "store_true", "help": "re-score rows not yet scored first"}),
         (("--check",), {"action": "store_true", "help": "the graph's logprob rule on questions 0-49"})],
    ),
    "reread": (
        "break the tie between a row's two answers with one more reading",
        cmd_reread,
        [DIRS, LIMIT, METHODS,
         (("--send",), {"action": "store_true", "help": "send the missing rereads first"})],
    ),
    "escalation": (
        "choose escalating_rag's settings on the calibration questions of recorded runs",
        cmd_escalation,
        [DIRS, JSON,
         (("--max-calls",), {"type": float, "default": 3.0, "help": "mean LLM calls allowed"}),
         (("--call-budget",), {"type": int, "default": 8, "help": "escalating_rag's call_budget"}),
         (("--firsts",), {"default": "", "help": "comma-separated first loops to try (all)"}),
         (("--seconds",), {"default": "", "help": "comma-separated second loops, none too (all)"}),
         (("--gate-p",), {"default": "", "help": "comma-separated gate probabilities (all)"}),
         (("--margins",), {"default": "0,0.1,0.2,0.3", "help": "choice_margin values to try"}),
         (("--write-profile",), {"type": Path, "default": None, "metavar": "TOML",
                                 "help": "write the setting into this profile's [escalating_rag]"})],
    ),
}  # fmt: skip


def register(subparsers: Any) -> None:
    """``python -m lab replay`` and its subcommands."""
    replay = subparsers.add_parser(
        "replay",
        help="replay answer selection, rereads or escalation on recorded eval runs",
        description=(__doc__ or "").split("\n\n", 1)[0],
    )
    commands = replay.add_subparsers(dest="replay", required=True, metavar="WHAT")
    for name, (help_text, func, arguments) in SUBCOMMANDS.items():
        p = commands.add_parser(name, help=help_text, description=help_text)
        for names, options in arguments:
            p.add_argument(*names, **options)
        p.set_defaults(func=func)
