"""One question through one method's graph: :func:`run_one` returns its row
(:class:`gaprag.eval.results.Row`) and appends its trace (:mod:`gaprag.traces`)."""

from __future__ import annotations

import dataclasses
import json
import time
import traceback
from collections.abc import Mapping
from typing import Any

from gaprag.accounting import retrieval_log
from gaprag.datasets import Dataset, Example
from gaprag.eval.capture import LLMCallRecorder
from gaprag.eval.scoring import retrieved_ids, score, seen_ids, shown_ids
from gaprag.llm.memo import SharedReplies, shared_scope
from gaprag.nodes.short_answer import CALL_PATHS as SHORT_ANSWER_CALL_PATHS
from gaprag.traces import TraceWriter

_TRACE_METRICS = (
    "em", "f1", "acc", "support_recall", "retrieval_recall", "choice", "choice_correct"
)  # fmt: skip

#: output fields the trace keeps under their own names; the others go to its ``extra``
_STANDARD = {
    "answer", "stop_reason", "iterations", "queries", "evidence", "usage", "trace",
    "decisions", "shown_ids", "retrieved_ids",
}  # fmt: skip


@dataclasses.dataclass
class Answered:
    """A graph's run on one question: its output (empty after a failure), the error and its
    traceback, the wall time (with the seconds of the calls answered from the run's shared
    replies, as if sent), and what the recorders saw (retrievals, LLM calls, shared replies)."""

    output: dict[str, Any]
    error: str | None
    traceback: str
    wall_s: float
    retrievals: list[dict[str, Any]]
    calls: list[dict[str, Any]]
    reused_calls: int = 0
    seconds_saved: float = 0.0


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _decisions(output: Mapping[str, Any]) -> list[dict[str, Any]]:
    out = []
    for d in output.get("decisions") or []:
        if isinstance(d, Mapping):
            out.append(json.loads(json.dumps(dict(d), default=str)))
    return out


async def invoke(
    graph: Any, method: str, example: Example, shared: SharedReplies | None = None
) -> Answered:
    """Run ``graph`` on ``example``'s prompt, recording its retrievals and LLM calls; a request
    already answered for this question in ``shared`` is answered from it. A failure is
    recorded (error and traceback), never raised."""
    recorder = LLMCallRecorder()
    error: str | None = None
    tb = ""
    output: dict[str, Any] = {}
    start = time.perf_counter()
    with retrieval_log() as log, shared_scope(shared, example.id) as tally:
        try:
            result = await graph.ainvoke(
                {"question": example.prompt(), "dataset_id": example.id},
                config={"callbacks": [recorder], "run_name": f"{method}:{example.id}"},
            )
            output = dict(result) if isinstance(result, Mapping) else {"answer": str(result)}
        except Exception as exc:  # one failed question must not end the run
            error = f"{type(exc).__name__}: {exc}"
            tb = traceback.format_exc()
    wall = time.perf_counter() - start + tally.seconds_saved
    calls = [*recorder.calls, *tally.calls]
    return Answered(output, error, tb, wall, log, calls, tally.reused, tally.seconds_saved)


def _costs(run: Answered) -> dict[str, Any]:
    """The row's LLM and retrieval counts: the graph's usage, or after a failure (its usage
    lost) what the recorders saw."""
    usage, calls = run.output.get("usage") or {}, run.calls

    def counted(key: str, fallback: int) -> int:
        return int(usage.get(key, fallback))

    return {
        "llm_calls": counted("llm_calls", len(calls)),
        "prompt_tokens": counted("prompt_tokens", sum(c.get("prompt_tokens", 0) for c in calls)),
        "completion_tokens": counted(
            "completion_tokens", sum(c.get("completion_tokens", 0) for c in calls)
        ),
        "retrieval_calls": counted("retrieval_calls", len(run.retrievals)),
    }


def _token_parts(run: Answered) -> dict[str, Any]:
    """Cached, instruction and passage tokens, and the LLM calls the shared short-answer step
    added (already counted in ``llm_calls``)."""
    usage, calls = run.output.get("usage") or {}, run.calls
    return {
        "cached_tokens": _int_or_none(
            usage.get("cached_tokens", sum(c.get("cached_tokens", 0) for c in calls))
        ),
        "instruction_tokens": _int_or_none(usage.get("instruction_tokens")),
        "passage_tokens": _int_or_none(usage.get("passage_tokens")),
        "short_answer_calls": sum(
            1
            for t in run.output.get("trace") or []
            if isinstance(t, dict)
            and t.get("call") == "short_answer"
            and t.get("path") in SHORT_ANSWER_CALL_PATHS
        ),
    }


def make_row(
    dataset: Dataset,
    example: Example,
    method: str,
    base_method: str,
    options: Mapping[str, Any],
    run: Answered,
) -> dict[str, Any]:
    """The question's row: its answers and prediction, the metrics (None after a failure),
    costs, loop, decisions, the passages shown and retrieved, and the method's options."""
    output, error = run.output, run.error
    prediction = str(output.get("answer") or "")
    shown, retrieved = shown_ids(output), retrieved_ids(output, run.retrievals)
    row: dict[str, Any] = {
        "dataset": dataset.name,
        "id": example.id,
        "method": method,
        "question": example.question,
        "answers": example.answers,
        "prediction": prediction,
        **dict.fromkeys(("em", "f1", "acc", "support_recall", "retrieval_recall")),
        **_costs(run),
        "iterations": int(output.get("iterations") or 0),
        "stop_reason": str(output.get("stop_reason") or ("error" if error else "")),
        "wall_s": round(run.wall_s, 4),
        "error": error,
        "base_method": base_method,
        "decisions": _decisions(output),
        "shown_ids": shown,
        "retrieved_ids": retrieved,
        **_token_parts(run),
    }
    if error is None:
        row.update(score(example, prediction, shown, retrieved))
    elif example.options:
        row.update(choice=None, choice_correct=None)
    row["type"] = example.type
    row["evidence_ids"] = [
        ev["id"] for ev in output.get("evidence") or [] if isinstance(ev, dict) and "id" in ev
    ]
    if "missing" in output:
        row["missing"] = output["missing"]
    if output.get("candidates"):  # a composed graph's answers (escalating_rag)
        row["candidates"] = [
            {k: c.get(k) for k in ("method", "answer", "p", "llm_calls")}
            for c in output["candidates"]
            if isinstance(c, dict)
        ]
    row["options"] = dict(options)
    return row


def make_trace(
    example: Example,
    row: Mapping[str, Any],
    run: Answered,
    titles: Mapping[str, str] | None,
) -> dict[str, Any]:
    """The question's trace: its row's identity, metrics and costs, then the queries, evidence,
    retrievals, passage titles, decisions, every LLM call, the graph's own trace, its other
    output fields and the error with its traceback."""
    output, shown, retrieved = run.output, row["shown_ids"], row["retrieved_ids"]
    touched = [*(shown or []), *retrieved, *example.supporting]
    return {
        **{k: row[k] for k in ("dataset", "id", "method", "base_method", "options")},
        "input": example.prompt(),
        "answers": example.answers,
        "supporting": example.supporting,
        "prediction": row["prediction"],
        "metrics": {k: row.get(k) for k in _TRACE_METRICS if k in row},
        **{k: row[k] for k in ("stop_reason", "iterations")},
        "usage": output.get("usage") or {},
        "wall_s": row["wall_s"],
        "queries": list(output.get("queries") or []),
        "evidence": [
            {
                k: ev.get(k)
                for k in ("id", "title", "source", "score", "round", "metadata")
                if k != "metadata" or ev.get(k)
            }
            for ev in output.get("evidence") or []
            if isinstance(ev, dict)
        ],
        "retrievals": run.retrievals,
        "shown_ids": shown,
        "retrieved_ids": retrieved,
        "seen_ids": seen_ids(output, run.retrievals),
        "titles": {i: titles[i] for i in dict.fromkeys(touched) if titles and i in titles},
        "decisions": row["decisions"],
        "llm_calls": run.calls,
        "trace": list(output.get("trace") or []),
        "extra": {k: v for k, v in output.items() if k not in _STANDARD},
        "reused_calls": run.reused_calls,
        "seconds_saved": round(run.seconds_saved, 4),
        "error": run.error,
        "traceback": run.traceback or None,
    }


async def run_one(
    graph: Any,
    method: str,
    dataset: Dataset,
    example: Example,
    options: Mapping[str, Any],
    traces: TraceWriter,
    *,
    base_method: str | None = None,
    titles: Mapping[str, str] | None = None,
    shared: SharedReplies | None = None,
) -> dict[str, Any]:
    """Run one question through one method's graph; returns its row (:class:`Row`) and
    appends its trace (the question's retrievals, LLM calls, decisions and output) to
    ``traces``. A failed question is a row with its ``error``, never an exception.
    ``shared``: the run's replies shared across methods (:class:`SharedReplies`)."""
    answered = await invoke(graph, method, example, shared)
    row = make_row(dataset, example, method, base_method or method, options, answered)
    traces.write(method, make_trace(example, row, answered, titles))
    return row
