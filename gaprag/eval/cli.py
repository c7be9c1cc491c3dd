"""``gaprag eval`` and ``gaprag report`` (docs/evaluation.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from gaprag.errors import InputError
from gaprag.eval.settings import EvalSettings, default


def _print_table(summary: dict[str, Any], out: Path) -> None:
    md = out / "summary.md"
    if md.is_file():
        text = md.read_text(encoding="utf-8")
        body = [line for line in text.splitlines() if not line.startswith("![")]
        print("\n".join(body).rstrip())
    html = out / "report.html"
    extra = f" and {html}" if html.is_file() else ""
    print(f"\nwrote {out / 'summary.md'}, {out / 'summary.json'}, plots in {out / 'plots'}{extra}")


def cmd_eval(args: argparse.Namespace) -> int:
    from gaprag.eval.runner import evaluate
    from gaprag.graphs import list_methods

    methods = [m.strip() for m in (args.methods or "").split(",") if m.strip()]
    if methods == ["all"]:
        methods = list_methods()
    if not methods and not args.variant:
        raise InputError(
            "no methods given", hint="e.g. --methods standard_rag,migres (or --variant ...)"
        )
    out = (
        Path(args.out) if args.out else Path("gaprag-eval") / Path(args.dataset).name.split(".")[0]
    )
    summary = evaluate(
        EvalSettings(
            methods=methods,
            dataset=args.dataset,
            limit=args.limit,
            offset=args.offset,
            out=out,
            concurrency=args.concurrency,
            resume=args.resume,
            max_errors=args.max_errors,
            sets=args.set or [],
            variants=args.variant or [],
            base_url=args.base_url,
            model=args.model,
            store=args.store,
            progress=not args.quiet,
            seed=args.seed,
            reuse=False if args.no_reuse else default("reuse"),
        )
    )
    print(
        f"gaprag: {summary['new_rows']} new results, {summary['skipped']} already done, "
        f"{summary['errors']} errors -> {out / 'results.jsonl'}",
        file=sys.stderr,
    )
    _print_table(summary, out)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from gaprag.eval.report import write_report

    if not args.dirs:
        raise InputError("no result directories given", hint="gaprag report DIR...")
    out = (
        Path(args.out)
        if args.out
        else (Path(args.dirs[0]) if len(args.dirs) == 1 else Path("gaprag-report"))
    )
    summary = write_report(
        args.dirs, out, seed=args.seed, n_boot=args.bootstrap, before=args.before or ()
    )
    _print_table(summary, out)
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from gaprag.eval.calibrate import DATASETS, calibrate, calibration_lines
    from gaprag.graphs import calibrated

    methods = [m.strip() for m in (args.methods or ",".join(calibrated())).split(",") if m.strip()]
    datasets = [d.strip() for d in (args.datasets or ",".join(DATASETS)).split(",") if d.strip()]
    result = calibrate(
        model=args.model,
        methods=methods,
        datasets=datasets,
        limit=args.limit,
        start=args.start,
        out=args.out or f"gaprag-calibration/{args.model}",
        cost_per_call=args.cost_per_call,
        profile_path=args.profile,
        base_url=args.base_url,
        progress=not args.quiet,
        run=not args.replay_only,
        gate=args.gate,
    )
    for line in calibration_lines(result):
        print(line)
    print(f"wrote {result['profile']}")
    return 0


#: an argument of a command: its names and ``add_argument``'s keywords
Arg = tuple[tuple[str, ...], dict[str, Any]]

EVAL_ARGS: list[Arg] = [
    (("--methods",), {"help": "comma-separated methods or variant names, e.g. "
                      "standard_rag,migres (or 'all')"}),
    (("--variant",), {"action": "append", "metavar": "NAME=METHOD:KEY=VALUE,...",
                      "help": "a named variant of a method, evaluated as its own method, e.g. "
                      "iterkey_hybrid=iterkey:top_k=5,retrieval_mode=hybrid (repeatable)"}),
    (("--dataset",), {"required": True,
                      "help": "bundled name (hotpotqa, musique, ...) or a dataset JSONL path"}),
    (("--limit",), {"type": int, "help": "evaluate the first N questions (file order)"}),
    (("--offset",), {"type": int, "default": default("offset"),
                     "help": "skip this many questions first"}),
    (("--out",), {"help": "output directory (default: gaprag-eval/DATASET)"}),
    (("--concurrency",), {"type": int, "default": default("concurrency"),
                          "help": "questions in flight at once"}),
    (("--resume",), {"action": "store_true",
                     "help": "skip (method, id) pairs already in results.jsonl"}),
    (("--max-errors",), {"type": int, "default": default("max_errors"),
                         "help": "stop after this many failed questions (0: never)"}),
    (("--set",), {"action": "append", "metavar": "[METHOD.]KEY=VALUE",
                  "help": "a method option, e.g. migres.max_iterations=3 (repeatable; "
                  "`gaprag settings METHOD` lists them)"}),
    (("--base-url",), {"help": "OpenAI-compatible endpoint (default: GAPRAG_BASE_URL or the "
                       "embedded model)"}),
    (("--model",), {"help": "model name sent to --base-url"}),
    (("--store",), {"help": "use this store (built by `gaprag index`) instead of the "
                    "dataset's paragraphs"}),
    (("--seed",), {"type": int, "default": default("seed"),
                   "help": "bootstrap seed for the summary"}),
    (("--no-reuse",), {"action": "store_true",
                       "help": "send every request, even one another method already sent for "
                       "the same question (reuse is on by default under repeatable serving; "
                       "rows count reused calls as sent)"}),
    (("--quiet",), {"action": "store_true", "help": "no progress bar"}),
]  # fmt: skip

REPORT_ARGS: list[Arg] = [
    (("dirs",), {"nargs": "+", "metavar": "DIR", "help": "directories written by `gaprag eval`"}),
    (("--out",), {"help": "where to write (default: DIR when one is given, else gaprag-report)"}),
    (("--seed",), {"type": int, "default": 0, "help": "bootstrap seed"}),
    (("--bootstrap",), {"type": int, "default": 2000, "help": "bootstrap resamples"}),
    (("--before",), {"action": "append", "metavar": "DIR",
                     "help": "a directory of an earlier run of the same questions (repeatable): "
                     "each method is compared with itself there, paired per question"}),
]  # fmt: skip

CALIBRATE_ARGS: list[Arg] = [
    (("--model",), {"required": True, "help": "embedded model name, or the model at --base-url"}),
    (("--methods",), {"help": "comma-separated (default: every calibrated method)"}),
    (("--datasets",), {"help": "comma-separated bundled sets (default: all three)"}),
    (("--limit",), {"type": int, "default": 20, "help": "questions per set (default: 20)"}),
    (("--start",), {"type": int, "default": 60, "help": "first question index (>= 60)"}),
    (("--cost-per-call",), {"type": float, "default": 0.005, "help": "F1 one LLM call is worth"}),
    (("--out",), {"help": "run directory (default: gaprag-calibration/MODEL)"}),
    (("--profile",), {"help": "profile file to write (default: the shipped one)"}),
    (("--base-url",), {"help": "OpenAI-compatible endpoint serving --model"}),
    (("--replay-only",), {"action": "store_true",
                          "help": "run nothing: replay the calibration rows already in --out and "
                          "write the profile"}),
    (("--gate",), {"choices": ["logprob_mean", "logprob_margin", "logprob_min", "agreement"],
                   "help": "also run the shared gate with this signal and write gate and "
                   "gate_threshold per method (any iterative method, ircot included)"}),
    (("--quiet",), {"action": "store_true", "help": "no progress bar"}),
]  # fmt: skip

COMMANDS: dict[str, tuple[str, str | None, list[Arg], Any]] = {
    "eval": (
        "compare methods on a dataset (same questions, store and model)",
        "Run several methods over the first N questions of a dataset and write results.jsonl, "
        "per-question traces and a summary with bootstrap intervals.",
        EVAL_ARGS,
        cmd_eval,
    ),
    "report": (
        "summary.md, summary.json, PNG plots and report.html from eval results",
        None,
        REPORT_ARGS,
        cmd_report,
    ),
    "calibrate": (
        "set a model's decision thresholds on calibration questions; write its profile",
        "Run the calibrated methods on calibration questions (index 60 on of the bundled sets, "
        "never the evaluation questions) with calibration=True, replay every threshold "
        "offline, choose by mean F1 minus a cost per LLM call, and write the model profile "
        "(gaprag/profiles/MODEL.toml).",
        CALIBRATE_ARGS,
        cmd_calibrate,
    ),
}


def register(subparsers: Any) -> None:
    """``gaprag eval``, ``report`` and ``calibrate``."""
    for name, (help_text, description, arguments, func) in COMMANDS.items():
        p = subparsers.add_parser(name, help=help_text, description=description)
        for names, options in arguments:
            p.add_argument(*names, **options)
        p.set_defaults(func=func)
