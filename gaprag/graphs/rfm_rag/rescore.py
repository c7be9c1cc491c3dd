"""Re-score the R-Feedback decisions of recorded rfm_rag runs with other weights.

A ``calibration=true`` run records, at every judged round, the pool's features (``s_f``,
``g_f``, in the trace) and the answer the method would have given had it stopped there (in
the row's ``decisions``). R-Feedback retrained on those pools (``gaprag rfm train --source
graph_pools``) gives other probabilities for the same pools, so its stop threshold can be set
by replaying the same rows with the new ``p``: no second calibration run is needed.

Weights trained on graph pools list the questions they never trained on (``heldout`` in the
``metrics.json`` beside them: the Platt-calibration and test splits); only those questions are
replayed, so the threshold is not chosen on the pools the model was fitted to.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gaprag.errors import InputError
from gaprag.eval.trace import safe_name
from gaprag.graphs.rfm_rag.model import METRICS_FILE, RFeedbackMLP

NODE = "feedback_classifier"


def heldout_questions(weights: Path) -> set[str] | None:
    """``dataset/id`` of the questions the weights were not trained on, or None when their
    ``metrics.json`` lists none (weights trained on paragraphs: no traced question was used)."""
    try:
        metrics = json.loads((weights.parent / METRICS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    held = (metrics.get("data") or {}).get("heldout")
    return {str(q) for q in held} if isinstance(held, list) else None


def round_features(trace: Mapping[str, Any]) -> dict[int, tuple[float, float]]:
    """round -> (s_f, g_f) of each judged round of one rfm_rag trace."""
    out: dict[int, tuple[float, float]] = {}
    for rec in trace.get("trace") or []:
        if isinstance(rec, dict) and rec.get("node") == NODE and rec.get("g_f") is not None:
            out[int(rec.get("round", 0))] = (float(rec.get("s_f") or 0.0), float(rec["g_f"]))
    return out


def rescore_rows(
    rows: Iterable[Mapping[str, Any]],
    run_dirs: Mapping[str, Path],
    weights: str | Path,
    *,
    method: str = "rfm_rag",
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows with ``method``'s R-Feedback decisions re-scored by ``weights`` (other methods'
    rows unchanged); ``run_dirs`` maps a row's ``dataset`` to the run folder holding its
    ``traces/``. Rows of questions the weights trained on are left out. Returns the rows and
    a note of what was done."""
    path = Path(weights).expanduser()
    model = RFeedbackMLP.load(path)
    held = heldout_questions(path)
    out: list[dict[str, Any]] = []
    rescored = skipped = 0
    for row in rows:
        if row.get("method") != method:
            out.append(dict(row))
            continue
        qid = f"{row.get('dataset', '')}/{row.get('id', '')}"
        if held is not None and qid not in held:
            skipped += 1
            continue
        folder = run_dirs.get(str(row.get("dataset", "")))
        trace_file = (
            folder / "traces" / safe_name(method) / f"{safe_name(str(row.get('id', '')))}.json"
            if folder is not None
            else None
        )
        if trace_file is None or not trace_file.is_file():
            raise InputError(
                f"no trace of {method} question {qid} to re-score",
                hint="re-scoring reads the traces of the calibration run (its traces/ folder)",
            )
        features = round_features(json.loads(trace_file.read_text(encoding="utf-8")))
        decisions = []
        for d in row.get("decisions") or []:
            d = dict(d)
            if d.get("node") == NODE and d.get("round") in features:
                s_f, g_f = features[int(d["round"])]
                d["p"] = model.predict(s_f, g_f).prob
                d["path"] = "model (re-scored)"
                rescored += 1
            decisions.append(d)
        out.append({**row, "decisions": decisions})
    note = {
        "rf_weights": str(path),
        "embedder": model.embedder,
        "decisions_rescored": rescored,
        "questions_left_out": skipped,
        "questions_replayed": sum(1 for r in out if r.get("method") == method),
    }
    return out, note
