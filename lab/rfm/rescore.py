"""Re-score the R-Feedback decisions of recorded rfm_rag runs with other weights.

A ``calibration=true`` run records, at every judged round, the pool (its fact sentences, in
the trace, with the question's entities) and the answer the method would have given had it
stopped there (in the row's ``decisions``). R-Feedback retrained on those pools (``python -m
lab rfm train --source graph_pools``) gives other probabilities for the same pools, so its stop
threshold can be set by replaying the same rows with the new ``p``: no second calibration run
is needed. The pools are featurised as training featurises them (:func:`.features.featurize`,
with the embedder the weights name), so the re-scored ``p`` is what the graph would compute
with those weights.

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
from gaprag.graphs.rfm_rag.feedback_model.features import featurize
from gaprag.graphs.rfm_rag.feedback_model.model import METRICS_FILE, RFeedbackMLP
from gaprag.stores.embeddings import embedder_by_name
from gaprag.traces import method_traces
from lab.rfm.examples import Sample, pool_snapshots

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


def round_pools(trace: Mapping[str, Any]) -> dict[int, Sample]:
    """round -> the pool judged at that round of one rfm_rag trace, as a training sample."""
    question = str(trace.get("input", ""))
    entities = [str(e) for e in (trace.get("extra") or {}).get("entities") or []]
    return {
        int(snap["round"]): Sample("", question, entities, snap["sentences"], 0, "")
        for snap in pool_snapshots(dict(trace))
    }


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
    embedder = embedder_by_name(model.embedder)
    held = heldout_questions(path)
    out: list[dict[str, Any]] = []
    rescored = skipped = 0
    traced: dict[Path, dict[str, dict[str, Any]]] = {}
    for row in rows:
        if row.get("method") != method:
            out.append(dict(row))
            continue
        qid = f"{row.get('dataset', '')}/{row.get('id', '')}"
        if held is not None and qid not in held:
            skipped += 1
            continue
        folder = run_dirs.get(str(row.get("dataset", "")))
        if folder is not None and folder not in traced:
            traced[folder] = method_traces(folder, method)
        trace = traced[folder].get(str(row.get("id", ""))) if folder is not None else None
        if trace is None:
            raise InputError(
                f"no trace of {method} question {qid} to re-score",
                hint="re-scoring reads the traces of the calibration run (its traces/ folder)",
            )
        pools = round_pools(trace) if isinstance(trace.get("extra"), dict) else {}
        judged = [d for d in row.get("decisions") or [] if d.get("node") == NODE]
        rounds = sorted({int(d["round"]) for d in judged if d.get("round") in pools})
        probs = dict(
            zip(
                rounds,
                model.probs(featurize([pools[r] for r in rounds], embedder, progress=False)),
                strict=True,
            )
        )
        decisions = []
        for d in row.get("decisions") or []:
            d = dict(d)
            if d.get("node") == NODE and d.get("round") in probs:
                d["p"] = round(float(probs[int(d["round"])]), 6)
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
        "record": {"rf_weights": str(path)},
    }
    return out, note
