"""The answer-choice rules, as plain functions over candidates: how a candidate is scored, how
the answer is chosen among candidates, and when escalating_rag stops or runs another loop.

The graph steps that choose (the shared ``select`` step, :mod:`gaprag.nodes.select`;
escalating_rag's ``choose`` and its loops, :mod:`gaprag.composed.escalating_rag.nodes`) and
every offline replay of them (the repository's lab, ``python -m lab replay``) call these
functions, so a replay applies the graph's rule by construction.

- Scoring: :func:`answer_span` finds the answer in the reply it came from (after the last
  answer marker, such as ``the answer is`` or a JSON ``"text"`` field), and
  :func:`answer_probability` gives ``p = exp(mean logprob)`` of the reply tokens that hold it,
  as the gate scores plain RAG's answer.
- Choosing: :func:`agrees` (two answers equal after :func:`gaprag.metrics.normalize_answer`),
  :func:`takes_gate` (the ``logprob`` rule's margin test) and :func:`choose_answer` (among
  plain RAG's answer and each loop's: the ``select`` step's two, escalating_rag's ``choose``'s
  any number).
- Escalating: :func:`next_step`, after each loop (:class:`Ladder`: the loops and the
  settings that decide): the answer chosen so far and either the loop to run next or why the
  question ends (:func:`stop_reason`); :func:`may_start_loop` (enough calls left to start a
  loop). escalating_rag's ``choose`` node and the offline replay of it call these two at the
  same points of a question, so the replay takes the graph's steps.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from gaprag.llm.client import TokenLogprob
from gaprag.metrics import normalize_answer

#: the rules of the ``answer_choice`` setting
Rule = Literal["off", "logprob", "agreement"]
#: where an answer starts inside a reply: a chain-of-thought marker or a JSON answer field
ANSWER_MARKER = re.compile(r"""answer\s+is\s*:?|answer\s*:|"text"\s*:\s*\"""", re.IGNORECASE)
#: the fewest calls a loop needs (one step and its answer): a loop is not started with less
MIN_LOOP_CALLS = 2


# -- scoring a candidate ------------------------------------------------------------------------
def answer_span(reply: str, answer: str) -> tuple[int, int] | None:
    """Where ``answer`` is in ``reply`` (case ignored), as ``(start, end)``: the first
    occurrence after the last answer marker, else the first one; None when the reply does not
    hold it."""
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


def mean_logprob(tokens: Sequence[TokenLogprob]) -> float | None:
    """The mean logprob of the tokens that are not whitespace; None when there is none."""
    kept = [t.logprob for t in tokens if t.token.strip()]
    return sum(kept) / len(kept) if kept else None


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
    mean = mean_logprob(inside)
    return None if mean is None else math.exp(min(mean, 0.0))


# -- choosing among candidates ------------------------------------------------------------------
@dataclass(frozen=True)
class Candidate:
    """One answer to choose from and its probability (None: not scored)."""

    answer: str
    p: float | None = None


@dataclass(frozen=True)
class Choice:
    """The chosen candidate's place, its ``p`` and the rule's path: ``logprobs``,
    ``agreement``, ``agreement_fallback`` (``logprob`` without both probabilities) or
    ``rule`` (one candidate, or the rule off); ``agree``: two candidates share the answer."""

    index: int
    p: float | None
    path: str
    agree: bool = False


def agrees(a: str, b: str) -> bool:
    """Whether two answers are the same answer: equal after
    :func:`gaprag.metrics.normalize_answer` (the empty answer agrees with none)."""
    key = normalize_answer(a) if a else ""
    return bool(key) and key == normalize_answer(b)


def takes_gate(gate_p: float | None, loop_p: float | None, margin: float) -> bool:
    """The ``logprob`` rule: plain RAG's answer when its probability exceeds the loop
    answer's by at least ``margin`` (never without both)."""
    return gate_p is not None and loop_p is not None and gate_p - loop_p >= margin


def choose_answer(candidates: Sequence[Candidate], rule: Rule, margin: float) -> Choice:
    """The answer chosen among ``candidates`` (plain RAG's first, then each loop's in order)
    by ``rule``:

    - an answer two candidates share (:func:`agrees`) wins: the latest such candidate, ``p``
      the highest of theirs (path ``agreement``); with ``off`` or one candidate, the latest
      (path ``rule``);
    - else, with ``logprob`` and every probability, the loop answer with the highest ``p``,
      unless plain RAG's exceeds it by ``margin`` (:func:`takes_gate`; path ``logprobs``);
    - else the latest loop's answer, ``p`` 0 (path ``agreement``, or ``agreement_fallback``
      when the rule was ``logprob``)."""
    if not candidates:
        raise ValueError("no candidate to choose from")
    last = len(candidates) - 1
    if rule == "off" or last == 0:
        return Choice(last, candidates[last].p, "rule")
    for i in range(last, -1, -1):
        shared = [j for j, c in enumerate(candidates) if agrees(candidates[i].answer, c.answer)]
        if len(shared) > 1:
            ps = [p for j in shared if (p := candidates[j].p) is not None]
            return Choice(i, max(ps) if ps else 1.0, "agreement", True)
    if rule == "logprob" and all(c.p is not None for c in candidates):
        best = max(range(1, last + 1), key=lambda j: (candidates[j].p or 0.0, j))
        if takes_gate(candidates[0].p, candidates[best].p, margin):
            return Choice(0, candidates[0].p, "logprobs")
        return Choice(best, candidates[best].p, "logprobs")
    return Choice(last, 0.0, "agreement" if rule == "agreement" else "agreement_fallback")


# -- escalating ---------------------------------------------------------------------------------
def may_start_loop(calls_left: int) -> bool:
    """Whether a loop may start with ``calls_left`` LLM calls left (:data:`MIN_LOOP_CALLS`)."""
    return calls_left >= MIN_LOOP_CALLS


def stop_reason(choice: Choice, *, escalate_p: float, last: bool, calls_left: int) -> str:
    """Why the question ends after ``choice``, '' when the next loop runs: ``agreed`` (two
    candidates share the answer), ``confident`` (its ``p`` reaches ``escalate_p``),
    ``last_loop`` (``last``: no loop follows) or ``call_budget`` (too few calls left)."""
    if choice.path == "agreement" and choice.p:
        return "agreed"
    if choice.p is not None and choice.p >= escalate_p:
        return "confident"
    if last:
        return "last_loop"
    if not may_start_loop(calls_left):
        return "call_budget"
    return ""


@dataclass(frozen=True)
class Ladder:
    """What decides escalating_rag's steps: the loops of its rungs in order (``"none"``, no
    second loop, left out), how the answer is chosen and when a chosen answer is sure enough."""

    loops: tuple[str, ...]
    answer_choice: Rule = "logprob"
    choice_margin: float = 0.0
    escalate_p: float = 1.01


@dataclass(frozen=True)
class Step:
    """escalating_rag's step after a loop: ``choice`` among the candidates (None: no
    candidate has an answer), then the loop to run (``method``) or why the question ends
    (``stop_reason``: exactly one of the two is set)."""

    choice: Choice | None
    method: str = ""
    stop_reason: str = ""


def next_step(
    candidates: Sequence[Candidate],
    rungs: int,
    ladder: Ladder,
    calls_left: int,
    limit: str = "",
) -> Step:
    """The step after rung ``rungs`` (1: the first loop ran or was skipped) with
    ``candidates`` (plain RAG's answer first, then each loop's that gave one) and
    ``calls_left`` LLM calls: the answer chosen by ``ladder.answer_choice``
    (:func:`choose_answer`), then stop (:func:`stop_reason`, with ``last`` when no rung
    follows) or run the next rung's loop. ``limit``: a limit the run reached (a call past
    ``call_budget`` refused, say): the question ends, and reports the limit as its reason,
    as every step that ends a question after a limit does (:mod:`gaprag.nodes.wiring`)."""
    chosen = (
        choose_answer(candidates, ladder.answer_choice, ladder.choice_margin)
        if candidates
        else None
    )
    why = stop_reason(
        chosen or Choice(-1, None, "rule"),
        escalate_p=ladder.escalate_p,
        last=rungs >= len(ladder.loops),
        calls_left=calls_left,
    )
    if limit:
        return Step(chosen, stop_reason=limit)
    if why:
        return Step(chosen, stop_reason=why)
    return Step(chosen, method=ladder.loops[rungs])
