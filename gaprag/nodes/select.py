"""The shared answer choice: score the final answer (``answer_scoring``) and choose the
question's answer between plain RAG's (the gate's) and the method's loop's (``answer_choice``;
both off by default).

Where the gate let the loop run, a run holds two candidates: plain RAG's answer, recorded in
the ``gate`` decision (its ``p`` here is ``exp`` of its mean token logprob, from the gate's trace
record: :func:`gate_probability`), and the loop's final answer. The call whose text
became the loop's answer is scored on that same call when ``answer_scoring="logprob"`` (only logprobs are
requested, the messages are the same: :func:`answer_call`, :func:`answer_structured` for a
JSON reply): the answer span's tokens (after "the answer is" inside a chain-of-thought
sentence, the value of a JSON ``text`` field such as MIGRES's ``answer.text``) give
``p = exp(mean logprob)``, as the gate's ``logprob_mean`` does (:func:`answer_probability`).
The method records it in ``answer_p`` (:func:`scored_update`).

The ``select`` step (a graph tail declares it: ``add_short_answer(..., choice=True)``) runs
after the method's answer (and the shared reader), before the short-answer step, only when the
loop ran:

- ``logprob``: plain RAG's answer when its ``p`` exceeds the loop answer's by at least
  ``choice_margin`` (:func:`takes_gate`), else the loop's; path ``logprobs``;
- ``agreement``, or ``logprob`` without both probabilities (no logprobs, an answer the
  method does not score): the loop's answer, with
  ``p`` 1 when the two candidates agree after normalisation and 0 when they differ; path
  ``agreement`` (``agreement_fallback`` when the rule was ``logprob``).

Where the two agree there is nothing to choose. The step records decision ``select`` with
the chosen candidate, its ``p`` and path, and a trace record ``{call: "select", gate_p,
loop_p, agree}``. With ``answer_choice="off"`` it does nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from langgraph.runtime import Runtime

from gaprag.accounting import record_decision
from gaprag.llm.client import LLM, M, Messages, Structured, TokenLogprob
from gaprag.nodes.decisions import log_decision
from gaprag.nodes.gate import PLAIN_PASSAGE_WORDS, logprob_signals, normalize, plain_rag
from gaprag.nodes.render import render_passages

#: where an answer starts inside a reply: a chain-of-thought marker or a JSON answer field
ANSWER_MARKER = re.compile(r"""answer\s+is\s*:?|answer\s*:|"text"\s*:\s*\"""", re.IGNORECASE)


def answer_span(reply: str, answer: str) -> tuple[int, int] | None:
    """Where ``answer`` is in ``reply`` (case ignored): the first occurrence after the last
    answer marker, else the first one; None when the reply does not hold it."""
    low, needle = reply.lower(), answer.lower()
    if not needle or needle not in low:
        return None
    markers = list(ANSWER_MARKER.finditer(reply))
    if markers:
        after = low.find(needle, markers[-1].end())
        if after >= 0:
            return after, after + len(answer)
    first = low.find(needle)
    return first, first + len(answer)


def answer_probability(tokens: Sequence[TokenLogprob] | None, answer: str) -> float | None:
    """``exp`` of the mean logprob of the reply tokens that hold ``answer`` (the reply is the
    tokens' text); None without tokens or when the reply does not hold the answer."""
    if not tokens:
        return None
    span = answer_span("".join(t.token for t in tokens), answer.strip())
    if span is None:
        return None
    inside, pos = [], 0
    for t in tokens:
        start, pos = pos, pos + len(t.token)
        if start < span[1] and pos > span[0]:
            inside.append(t)
    signals = logprob_signals(inside)
    return None if signals is None else math.exp(min(signals["logprob_mean"], 0.0))


def scoring(ctx: Any) -> bool:
    """Whether the run scores its final answer (``answer_scoring="logprob"``)."""
    return getattr(ctx, "answer_scoring", "off") != "off"


async def answer_call(
    llm: LLM, messages: Messages, ctx: Any, *, max_tokens: int
) -> tuple[str, list[TokenLogprob] | None]:
    """The reply of a call whose text may become the final answer, and its tokens' logprobs
    when ``answer_scoring="logprob"`` (the same messages, logprobs requested); None tokens
    when it is off or the endpoint gives none."""
    if not scoring(ctx):
        return await llm.agenerate(messages, max_tokens=max_tokens), None
    scored = await llm.agenerate_scored(messages, max_tokens=max_tokens)
    return scored.text, scored.tokens


async def answer_structured(
    llm: LLM,
    messages: Messages,
    schema: type[M],
    ctx: Any,
    *,
    default: M,
    max_tokens: int,
    call: str,
) -> Structured[M]:
    """The structured reply of a call whose answer field may become the final answer (a JSON
    ``text`` field), with its tokens' logprobs in ``tokens`` when scoring is on (the same
    request, logprobs asked for); as :func:`answer_call` for free text."""
    return await llm.astructured(
        messages,
        schema,
        default=default,
        max_tokens=max_tokens,
        call=call,
        logprobs=scoring(ctx),
    )


def scored_update(answer: str, tokens: Sequence[TokenLogprob] | None) -> dict[str, Any]:
    """The state update recording ``answer``'s probability in ``answer_p`` (nothing when it
    has none)."""
    p = answer_probability(tokens, answer) if answer else None
    return {} if p is None else {"answer_p": {answer: round(p, 6)}}


def takes_gate(gate_p: float | None, loop_p: float | None, margin: float) -> bool:
    """The ``logprob`` rule: plain RAG's answer when its probability exceeds the loop
    answer's by at least ``margin`` (never without both)."""
    return gate_p is not None and loop_p is not None and gate_p - loop_p >= margin


def _gate_decision(state: Any) -> dict[str, Any] | None:
    for decision in reversed(list(getattr(state, "decisions", []) or [])):
        if decision.get("node") == "gate" and "answer" in decision:
            return dict(decision)
    return None


def gate_probability(state: Any) -> float | None:
    """Plain RAG's answer's ``exp(mean token logprob)`` from the gate's trace record (whichever
    signal the gate decided on), None where the gate had no logprobs."""
    for record in reversed(list(getattr(state, "trace", []) or [])):
        if isinstance(record, dict) and record.get("call") == "gate":
            mean = record.get("value") if record.get("signal") == "logprob_mean" else None
            mean = record.get("logprob_mean", mean)
            return None if mean is None else math.exp(min(float(mean), 0.0))
    return None


def select(state: Any, runtime: Runtime[Any]) -> dict[str, Any]:
    """The graph node: the question's answer between plain RAG's and the loop's.

    With ``answer_choice="off"``, or without the gate's answer, it does nothing.

    Reads: `answer`, `answer_p`, `decisions`, `trace`, `iterations`; writes: `answer` (when plain RAG's
    is chosen), `decisions`, `trace`.
    """
    ctx = runtime.context
    gate = _gate_decision(state)
    if ctx.answer_choice == "off" or gate is None:
        return {}
    loop_answer = str(state.answer or "")
    gate_answer = str(gate.get("answer") or "")
    loop_p = (state.answer_p or {}).get(loop_answer)
    gate_p = gate_probability(state)
    agree = bool(gate_answer) and normalize(gate_answer) == normalize(loop_answer)
    chosen, p, threshold = "loop", loop_p, None
    if ctx.answer_choice == "logprob" and gate_p is not None and loop_p is not None:
        path, threshold = "logprobs", ctx.choice_margin
        if not agree and takes_gate(gate_p, loop_p, ctx.choice_margin):
            chosen, p = "gate", gate_p
        elif agree:
            p = max(gate_p, loop_p)
    else:
        path = "agreement" if ctx.answer_choice == "agreement" else "agreement_fallback"
        p = float(agree)
    answer = gate_answer if chosen == "gate" else loop_answer
    log_decision(
        "select", state.iterations, chosen, p=p, path=path, threshold=threshold, answer=answer
    )
    record_decision(call="select", gate_p=gate_p, loop_p=loop_p, agree=agree)
    return {"answer": answer} if answer != loop_answer else {}


def choose_answer(
    candidates: Sequence[tuple[str, float | None]], rule: str, margin: float
) -> tuple[int, float | None, str]:
    """The index of the answer chosen among ``candidates`` (``(answer, p)``, plain RAG's
    first, then each loop's in order), its ``p`` and the path, by the ``answer_choice`` rule:

    - an answer two candidates share (after normalisation) wins: the latest such candidate,
      ``p`` the highest of theirs (path ``agreement``); with ``off`` or one candidate, the
      latest (path ``rule``);
    - else, with ``logprob`` and probabilities, the loop answer with the highest ``p``, unless
      plain RAG's exceeds it by ``margin`` (:func:`takes_gate`; path ``logprobs``);
    - else the latest loop's answer, ``p`` 0 (path ``agreement``, or ``agreement_fallback``
      when the rule was ``logprob``).

    With two candidates this is the ``select`` step's rule."""
    if not candidates:
        raise ValueError("no candidate to choose from")
    last = len(candidates) - 1
    if rule == "off" or last == 0:
        return last, candidates[last][1], "rule"
    keys = [normalize(a) if a else "" for a, _ in candidates]
    for i in range(last, -1, -1):
        shared = [j for j, k in enumerate(keys) if keys[i] and k == keys[i]]
        if len(shared) > 1:
            ps = [p for j in shared if (p := candidates[j][1]) is not None]
            return i, max(ps) if ps else 1.0, "agreement"
    loops = list(range(1, last + 1))
    if rule == "logprob" and all(candidates[j][1] is not None for j in range(last + 1)):
        best = max(loops, key=lambda j: (candidates[j][1] or 0.0, j))
        if takes_gate(candidates[0][1], candidates[best][1], margin):
            return 0, candidates[0][1], "logprobs"
        return best, candidates[best][1], "logprobs"
    return last, 0.0, "agreement" if rule == "agreement" else "agreement_fallback"


#: the most passages a reread shows (plain RAG's five first, then the loop's evidence)
REREAD_PASSAGES = 10


def reread_messages(question: str, passages: Sequence[Mapping[str, Any]]) -> Messages:
    """Plain RAG's request over ``passages`` (plain RAG's, then the loop's evidence; at most
    :data:`REREAD_PASSAGES`, each cut as plain RAG cuts it): one prompt under which neither of
    the run's candidates was generated, so its answer can break their tie."""
    prompt, fmt = plain_rag()
    shown = render_passages(passages[:REREAD_PASSAGES], fmt, max_words=PLAIN_PASSAGE_WORDS)
    return prompt.render(question=question, passages=shown)
