"""Scoring a run's final answers after the fact, from its traces, the way the gate scores plain
RAG's answer:

1. :func:`locate` finds, in a question's trace, the LLM call whose reply the final answer came
   from (the short-answer step's call when it rewrote the answer, else the last reply that
   holds the answer; inside a reply, the occurrence after an answer marker such as
   ``answer is`` or a JSON ``"text"`` field, else the first one:
   :func:`gaprag.nodes.choice.answer_span`);
2. :func:`score_runs` re-sends that call's recorded messages with the recorded reply up to the
   answer as the start of the model's reply, held to the answer's text
   (:meth:`gaprag.llm.client.LLM.ascore_continuation`), and keeps the answer tokens' logprobs
   as the gate keeps its own (:func:`gaprag.nodes.gate.logprob_signals`). Each row's score is
   appended to ``selection_scores.jsonl`` beside its ``results.jsonl``
   (:data:`lab.replay.candidates.SCORES`), so scoring resumes where it stopped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from gaprag.nodes.answer import clean_answer
from gaprag.nodes.choice import answer_span
from gaprag.nodes.gate import GATE_STOP, Signal, logprob_signals, probability, read_gate
from gaprag.traces import method_traces
from lab.replay.candidates import SCORES
from lab.replay.rundir import Extending, extend_runs

if TYPE_CHECKING:
    from gaprag.llm.client import LLM

#: the gate's signal when a trace does not name one
DEFAULT_SIGNAL: Signal = "logprob_mean"
_ROLES = {"ai": "assistant", "system": "system"}


# -- 1. the call the final answer came from ------------------------------------------------
@dataclass(frozen=True)
class Located:
    """The final answer's place: ``llm_calls[call].reply[start:end]``."""

    call: int
    start: int
    end: int


def _short_answer(trace: Mapping[str, Any]) -> Mapping[str, Any]:
    """The short-answer step's trace record (``path``, ``original``), or an empty one."""
    for event in reversed(trace.get("trace") or []):
        if isinstance(event, Mapping) and event.get("call") == "short_answer":
            return event
    return {}


def locate(trace: Mapping[str, Any]) -> Located | None:
    """The LLM call of a question's trace whose reply the final answer (``prediction``) came
    from, and the answer's span in it; None when no recorded reply holds it.

    The gate's calls (the first one or two) count only where the gate answered. The
    short-answer step's call when it rewrote the answer (the run's last call); else the
    last call whose cleaned reply is the answer before that step (an answer step's reply),
    else the last whose reply holds it (a reasoning sentence, a JSON reply), else the last
    whose reply holds the final answer."""
    answer = str(trace.get("prediction") or "").strip()
    calls = [c for c in trace.get("llm_calls") or [] if isinstance(c, Mapping)]
    if not answer or not calls:
        return None
    step = _short_answer(trace)
    original = str(step.get("original") or answer).strip()
    skip = _gate_calls(trace) if trace.get("stop_reason") != GATE_STOP else 0
    replies = [
        (i, str(c["reply"]))
        for i, c in reversed(list(enumerate(calls)))
        if i >= skip and isinstance(c.get("reply"), str) and not c.get("error")
    ]
    if step.get("path") == "llm":
        replies = replies[:1] if replies and replies[0][0] == len(calls) - 1 else []
        original = answer
    exact = [(i, r) for i, r in replies if clean_answer(r) == original]
    for i, reply in [*exact, *replies]:
        found = answer_span(reply, original)
        if found is None:
            continue
        inner = answer_span(reply[found[0] : found[1]], answer)
        if inner is not None:
            return Located(i, found[0] + inner[0], found[0] + inner[1])
    for i, reply in replies:
        found = answer_span(reply, answer)
        if found is not None:
            return Located(i, *found)
    return None


def _gate_calls(trace: Mapping[str, Any]) -> int:
    """How many LLM calls the gate made first: one, two for the agreement signal, none
    without a gate."""
    for event in trace.get("trace") or []:
        if isinstance(event, Mapping) and event.get("call") == "gate":
            return 2 if event.get("signal") == "agreement" else 1
    return 0


def _gate_signal(trace: Mapping[str, Any]) -> Signal:
    for event in trace.get("trace") or []:
        if isinstance(event, Mapping) and event.get("call") == "gate":
            signal = event.get("signal")
            if signal in ("logprob_mean", "logprob_min", "logprob_margin", "agreement"):
                return signal  # type: ignore[no-any-return]
    return DEFAULT_SIGNAL


# -- 2. scores, cached beside the rows ----------------------------------------------------
def _messages(call: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [
        (_ROLES.get(str(m.get("role")), "user"), str(m.get("content") or ""))
        for m in call.get("messages") or []
        if isinstance(m, Mapping)
    ]


async def score_trace(llm: LLM, trace: Mapping[str, Any]) -> dict[str, Any]:
    """The score record of one row's final answer: ``path`` ``scored`` (with the answer
    tokens' ``signals`` and ``p`` in the unit of the row's gate signal), ``gate_stop`` (the
    gate answered: its own ``p`` is the answer's), ``unlocated`` (no recorded reply holds
    the answer), ``mismatch`` (the endpoint continued with other text) or ``no_logprobs``."""
    signal = _gate_signal(trace)
    record: dict[str, Any] = {
        "method": trace.get("method"),
        "id": trace.get("id"),
        "signal": signal,
        "prediction": trace.get("prediction"),
    }
    if trace.get("stop_reason") == GATE_STOP:
        return {**record, "path": "gate_stop"}
    found = locate(trace)
    if found is None:
        return {**record, "path": "unlocated"}
    call = trace["llm_calls"][found.call]
    reply = str(call["reply"])
    prefix = reply[: found.start].rstrip()
    text = reply[len(prefix) : found.end]
    record.update(call=found.call, start=found.start, end=found.end)
    if not llm.supports_logprobs:
        return {**record, "path": "no_logprobs"}
    scored = await llm.ascore_continuation(_messages(call), prefix, text)
    if scored is None or not scored.tokens:
        return {**record, "path": "no_logprobs" if not llm.supports_logprobs else "mismatch"}
    signals = logprob_signals(scored.tokens)
    if signals is None or signal not in signals:
        return {**record, "path": "mismatch"}
    return {
        **record,
        "path": "scored",
        "tokens": [[t.token, round(t.logprob, 6)] for t in scored.tokens],
        "signals": {k: round(v, 6) for k, v in signals.items()},
        "p": probability(signal, signals[signal]),
    }


def _gated(row: Mapping[str, Any]) -> bool:
    return not row.get("error") and read_gate(row.get("decisions") or []).answer is not None


def scores_file(run_dir: str | Path) -> Path:
    return Path(run_dir) / SCORES


async def ascore_runs(dirs: Sequence[str | Path], llm: LLM, **options: Unpack[Extending]) -> int:
    """Score every gated row of ``dirs`` not yet in its ``selection_scores.jsonl`` (at most
    ``limit`` this time), appending as each finishes; returns how many were scored."""
    model = str(getattr(llm.chat, "model_name", "") or "")
    traces: dict[tuple[Path, str], dict[str, dict[str, Any]]] = {}

    async def score(run_dir: Path, row: dict[str, Any]) -> dict[str, Any] | None:
        if not _gated(row):
            return None
        method = str(row.get("method"))
        if (run_dir, method) not in traces:
            traces[(run_dir, method)] = method_traces(run_dir, method)
        trace = traces[(run_dir, method)].get(str(row.get("id")))
        if trace is None:
            record = {"method": method, "id": row.get("id"), "path": "no_trace"}
        else:
            record = await score_trace(llm, trace)
        return {**record, "model": model}

    return await extend_runs(dirs, SCORES, score, **options)


def score_runs(dirs: Sequence[str | Path], llm: LLM, **options: Unpack[Extending]) -> int:
    """:func:`ascore_runs`, run to completion."""
    return asyncio.run(ascore_runs(dirs, llm, **options))
