"""The shared gate: answer as plain RAG does first, and run the method's loop only when that
answer is unsure (``gate`` setting; off by default).

The gate is the first step of every iterative method. It sends exactly plain RAG's request:
plain RAG's passages (:data:`PLAIN_TOP_K` for the question, :data:`PLAIN_MODE`, cut at
:data:`PLAIN_PASSAGE_WORDS`), plain RAG's own prompt (``plain_answer`` of
``gaprag/nodes/prompts.toml``) and output cap (:data:`PLAIN_ANSWER_MAX_TOKENS`),
whatever the method's own ``max_passage_words`` and ``answer_max_tokens``, so its scored call
and standard_rag's answer call are one request. It scores that answer:

- ``logprob_mean`` / ``logprob_min``: the mean / lowest logprob of the answer's tokens;
- ``logprob_margin``: the first answer token's top-1 minus top-2 logprob;
- ``agreement``: the answer from the top :data:`AGREEMENT_K` passages equals the answer from
  all of them (:func:`gaprag.nodes.choice.agrees`: after
  :func:`gaprag.metrics.normalize_answer`; one more call; for endpoints without logprobs).

The decision follows the convention of every loop decision (:mod:`gaprag.nodes.decisions`):
the signal becomes a probability of stopping ``p`` (``exp`` of a logprob; ``1 - exp(-margin)``
for the margin; 1 or 0 for agreement), ``gate_threshold`` (in the signal's own unit) becomes
the same kind of probability, and the gate stops when ``p >= threshold`` (never in a
calibration run). It is recorded as decision ``gate`` (round 0) with plain RAG's answer, plus
a trace record ``{call: "gate", signal, value, ...}`` with every signal it computed.

Stopping ends the question with plain RAG's answer (then the short-answer step) and
``stop_reason = "gate_confident"``. Otherwise the method's loop runs; plain RAG's passages stay
in ``gate_passages`` for the ranked reader. An endpoint that returns no logprobs falls back to
``agreement`` (decision path ``agreement_fallback``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from langgraph.runtime import Runtime

from gaprag.accounting import record_decision
from gaprag.deps import Deps
from gaprag.llm.client import TokenLogprob
from gaprag.nodes.answer import clean_answer
from gaprag.nodes.choice import agrees
from gaprag.nodes.decisions import log_decision, should_stop
from gaprag.nodes.render import PassageFormat, load_formats, render_passages
from gaprag.nodes.retrieve import retrieve
from gaprag.prompts import Prompt, load_prompts
from gaprag.stores.store import RetrievalMode

Signal = Literal["logprob_mean", "logprob_margin", "logprob_min", "agreement"]
LOGPROB_SIGNALS: tuple[Signal, ...] = ("logprob_mean", "logprob_margin", "logprob_min")
GATE_STOP = "gate_confident"
#: plain RAG's request (standard_rag's defaults): its retrieval, passage cut and output cap
PLAIN_TOP_K = 5
PLAIN_MODE: RetrievalMode = "hybrid"
PLAIN_PASSAGE_WORDS = 150
PLAIN_ANSWER_MAX_TOKENS = 48
#: the cut of the agreement signal's second answer
AGREEMENT_K = 3
#: the largest margin recorded (a logprob difference; the probability is 1 to float precision)
MAX_MARGIN = 100.0


@dataclass(frozen=True)
class GateReading:
    """Plain RAG's answer as the gate recorded it (None: no gate answered) and its
    probability ``p``: ``exp`` of its mean token logprob, the unit every candidate answer is
    compared in (None without logprobs)."""

    answer: str | None
    p: float | None


def read_gate(
    decisions: Iterable[Mapping[str, Any]], trace: Iterable[Mapping[str, Any]] | None = None
) -> GateReading:
    """The gate's answer and ``p`` from a run's records, the one reader of them (the graph's
    state, an evaluation row): the answer of the last ``gate`` decision; ``p`` from the
    gate's trace record (its ``logprob_mean``, whichever signal it decided on), or, with no
    ``trace`` (a row keeps only decisions), the decision's ``p``, the same number for a
    ``logprob_mean`` gate."""
    decision = next(
        (
            d
            for d in reversed(list(decisions))
            if isinstance(d, Mapping) and d.get("node") == "gate"
        ),
        None,
    )
    if decision is None or not isinstance(decision.get("answer"), str):
        return GateReading(None, None)
    answer = str(decision["answer"])
    if trace is None:
        p = decision.get("p")
        if isinstance(p, int | float) and not isinstance(p, bool):
            return GateReading(answer, float(p))
        return GateReading(answer, None)
    for record in reversed(list(trace)):
        if isinstance(record, Mapping) and record.get("call") == "gate":
            mean = record.get("value") if record.get("signal") == "logprob_mean" else None
            mean = record.get("logprob_mean", mean)
            return GateReading(answer, None if mean is None else math.exp(min(float(mean), 0.0)))
    return GateReading(answer, None)


@lru_cache(maxsize=1)
def plain_rag() -> tuple[Prompt, PassageFormat]:
    """Plain RAG's answer prompt and passage format (``[plain_answer]`` and
    ``[formats.plain_passages]`` of the shared ``gaprag/nodes/prompts.toml``), which
    standard_rag's answer step sends too."""
    return load_prompts(__package__)["plain_answer"], load_formats(__package__)["plain_passages"]


def logprob_signals(tokens: Sequence[TokenLogprob]) -> dict[str, float] | None:
    """The answer's ``logprob_mean``, ``logprob_min`` (over tokens that are not whitespace)
    and ``logprob_margin`` (first such token; only where the endpoint gave two alternatives
    there); None when there is no such token."""
    kept = [t for t in tokens if t.token.strip()]
    if not kept:
        return None
    out = {
        "logprob_mean": sum(t.logprob for t in kept) / len(kept),
        "logprob_min": min(t.logprob for t in kept),
    }
    alternatives = sorted((lp for _, lp in kept[0].top), reverse=True)
    if len(alternatives) > 1:
        out["logprob_margin"] = min(alternatives[0] - alternatives[1], MAX_MARGIN)
    return out


def probability(signal: Signal, value: float) -> float:
    """A signal value (or a threshold in its unit) as a probability of stopping."""
    if signal == "agreement":
        return value
    if signal == "logprob_margin":
        return 1.0 - math.exp(-value)
    return math.exp(min(value, 0.0))


def threshold_setting(signal: Signal, p: float) -> float:
    """The ``gate_threshold`` whose probability is ``p`` (the inverse of :func:`probability`;
    what ``gaprag calibrate`` writes for a threshold it chose on ``p``)."""
    if signal == "agreement":
        return p
    if signal == "logprob_margin":
        return -math.log(max(1.0 - p, 1e-12))
    return math.log(max(p, 1e-12))


async def gate(state: Any, runtime: Runtime[Any], deps: Deps) -> dict[str, Any]:
    """The graph node: plain RAG's answer, its confidence, and stop or loop.

    With ``gate="off"`` it does nothing. When it stops, plain RAG's answer is the question's;
    otherwise plain RAG's passages wait for the ranked reader.

    Reads: `question`; writes: `answer`, `evidence`, `queries`, `iterations`, `stop_reason`
    (when it stops), `gate_passages` (when the loop goes on), `decisions`.
    """
    ctx = runtime.context
    if ctx.gate == "off":
        return {}
    llm, question = await deps.achat(ctx), state.question
    prompt, fmt = plain_rag()
    retriever = await deps.aretriever(ctx)
    hits = await retrieve(retriever, [question], k=PLAIN_TOP_K, mode=PLAIN_MODE, round=1)
    passages = render_passages(hits, fmt, max_words=PLAIN_PASSAGE_WORDS)
    messages = prompt.render(question=question, passages=passages)
    signal: Signal = ctx.gate
    path = "logprobs"
    signals: dict[str, float] = {}
    if signal == "agreement":
        answer = clean_answer(await llm.agenerate(messages, max_tokens=PLAIN_ANSWER_MAX_TOKENS))
    else:
        scored = await llm.agenerate_scored(messages, max_tokens=PLAIN_ANSWER_MAX_TOKENS)
        answer = clean_answer(scored.text)
        found = logprob_signals(scored.tokens) if scored.tokens else None
        if found is None or signal not in found:  # no logprobs: a signal the endpoint supports
            signal, path = "agreement", "agreement_fallback"
        else:
            signals = found
    if signal == "agreement":
        cut = render_passages(hits[:AGREEMENT_K], fmt, max_words=PLAIN_PASSAGE_WORDS)
        other = clean_answer(
            await llm.agenerate(
                prompt.render(question=question, passages=cut), max_tokens=PLAIN_ANSWER_MAX_TOKENS
            )
        )
        signals["agreement"] = float(agrees(answer, other))
        path = path if path == "agreement_fallback" else "agreement"
        threshold = 1.0  # stop exactly when the two answers agree
    else:
        threshold = probability(signal, ctx.gate_threshold)
    value = signals[signal]
    p = probability(signal, value)
    stop = should_stop(p, threshold, calibration=ctx.calibration)
    log_decision(
        "gate",
        0,
        "stop" if stop else "continue",
        p=p,
        path=path,
        threshold=threshold,
        answer=answer,
    )
    record_decision(
        call="gate",
        signal=signal,
        value=round(value, 6),
        threshold_setting=ctx.gate_threshold,
        **{k: round(v, 6) for k, v in signals.items() if k != signal},
    )
    if stop:
        return {
            "answer": answer,
            "evidence": hits,
            "queries": [question],
            "iterations": 1,
            "stop_reason": GATE_STOP,
        }
    return {"gate_passages": hits}


def after_gate(state: Any, loop: str) -> str:
    """``short_answer`` when the gate stopped the question, else ``loop`` (the method's first
    step)."""
    return "short_answer" if state.stop_reason == GATE_STOP else loop
