"""Fit rfm_rag's ``relevance_threshold`` (feedback_mode=relevance) offline on calibration rows.

    python scripts/rfm_relevance_threshold.py RUN_DIR [RUN_DIR ...] [--out FILE]

RUN_DIR: ``gaprag calibrate --methods rfm_rag --out RUNS`` set folders (``RUNS/<dataset>``),
whose rows record, at every judged round, the answer the method would have given there and
whose traces keep the judged pool. Each decision's ``p`` is replaced by the pool's G_f (as
the R-Feedback model's shipped weights compute it, with their embedder), then the shared
replay of ``gaprag calibrate`` (stop at the first decision with ``p >= t``, take its answer;
objective mean F1 - 0.005 x LLM calls, ties to the higher threshold) runs over a grid of G_f
thresholds. Rows of evaluation questions (index < 60 of a bundled set) are refused.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

# the repository's research lab (lab/) is not installed: import it from this checkout
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gaprag.datasets import check_no_overlap
from gaprag.eval.calibrate import choose, replay
from gaprag.graphs.rfm_rag.feedback_model.features import featurize
from gaprag.graphs.rfm_rag.feedback_model.model import RFeedbackMLP
from gaprag.stores.embeddings import embedder_by_name
from gaprag.traces import method_traces
from lab.rfm.examples import bundled_indices
from lab.rfm.rescore import NODE, round_pools

GRID = (*(round(float(x), 2) for x in np.arange(0.3, 0.96, 0.05)), 1.01)
"""G_f thresholds (cosines); 1.01 never stops."""


def rows_with_relevance(run: Path, embedder_name: str) -> list[dict[str, Any]]:
    """The run's rfm_rag rows, each judged decision's ``p`` replaced by its pool's G_f."""
    embedder = embedder_by_name(embedder_name)
    traces = method_traces(run, "rfm_rag")
    rows = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines() if line]
    rows = [r for r in rows if r.get("method") == "rfm_rag" and not r.get("error")]
    by_id, _ = bundled_indices()[rows[0]["dataset"]] if rows else ({}, {})
    check_no_overlap([by_id[str(r["id"])] for r in rows if str(r["id"]) in by_id], what="fit")
    out = []
    for row in rows:
        pools = round_pools(traces[str(row["id"])])
        judged = [d for d in row.get("decisions") or [] if d.get("node") == NODE]
        rounds = [int(d["round"]) for d in judged if int(d["round"]) in pools]
        g_f = featurize([pools[r] for r in rounds], embedder, progress=False)[:, 1]
        relevance = dict(zip(rounds, g_f.tolist(), strict=True))
        decisions = [
            {**d, "p": round(relevance[int(d["round"])], 6)}
            if d.get("node") == NODE and int(d["round"]) in relevance
            else d
            for d in row.get("decisions") or []
        ]
        out.append({**row, "decisions": decisions})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, help="write the replayed grid (JSON) here")
    parser.add_argument("--cost-per-call", type=float, default=0.005)
    args = parser.parse_args(argv)
    embedder = RFeedbackMLP.load().embedder
    rows = [row for run in args.runs for row in rows_with_relevance(run, embedder)]
    points = [replay(rows, (NODE,), t, cost_per_call=args.cost_per_call) for t in GRID]
    best = choose(points)
    report = {
        "setting": "relevance_threshold",
        "unit": "G_f (cosine), the R-Feedback model's shipped embedder " + embedder,
        "runs": [str(r) for r in args.runs],
        "questions": len(rows),
        "objective": f"mean F1 - {args.cost_per_call} x mean LLM calls",
        "chosen": best.as_dict(),
        "grid": [p.as_dict() for p in points],
    }
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
