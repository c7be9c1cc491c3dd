"""Loop decisions: take them on a probability against a threshold, and record them.

The convention every method follows for a decision a model takes (IterKey's validation,
Missing-Knowledge's judge, MIGRES's sufficiency, RFM-RAG's R-Feedback):

- ``p`` is the probability of the *stop* outcome ("the answer is valid", "the evidence is
  enough"), from first-token logprobs of a forced choice (:func:`option_probability`) or a
  trained model's score.
- The loop stops when ``p >= threshold`` (:func:`should_stop`). Without a probability (the
  endpoint gives no logprobs, the reply is malformed) the decision falls toward retrieving
  more: small models stop too early far more often than too late. The decision's path says
  so (``constrained-no-logprobs``, ``parsed-no-logprobs``: :func:`read_choice`). The setting
  ``no_logprobs="trust_answer"`` (every method's context) takes the model's constrained
  answer instead, as the papers do: the loop stops when the model chose the stop option.
- In a calibration run (``calibration=True`` in the context) no model decision stops a loop
  before its bound; each decision records the answer the method would have returned had it
  stopped there, so ``gaprag calibrate`` can replay any threshold offline.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from gaprag.accounting import record_loop_decision
from gaprag.llm.client import Choice
from gaprag.state.base import Decision

#: What a decision without a probability does: ``retrieve_more`` (the loop goes on to its
#: bound) or ``trust_answer`` (the model's constrained answer decides).
NoLogprobs = Literal["retrieve_more", "trust_answer"]
#: The suffix of a decision path taken without a probability.
NO_LOGPROBS = "-no-logprobs"


class Reading(NamedTuple):
    """A forced choice read as a loop decision."""

    p: float | None
    """P(stop option) from first-token logprobs; None without them."""
    path: str
    """``logprobs``; ``constrained-no-logprobs`` / ``parsed-no-logprobs`` (an answer without a
    probability); ``default`` (no readable answer)."""
    says_stop: bool | None
    """Whether the model's answer is the stop option, where it answered without a
    probability (what ``no_logprobs="trust_answer"`` goes by); None otherwise."""


def log_decision(
    node: str,
    round: int,
    decision: str,
    *,
    p: float | None = None,
    path: str,
    threshold: float | None = None,
    answer: str | None = None,
) -> Decision:
    """Append ``{node, round, decision, p, path, threshold}`` to the run's ``decisions``.

    ``p``: the probability the decision was taken on (a logprob-derived probability, a trained
    model's score), None where none exists; ``path``: ``logprobs``,
    ``constrained-no-logprobs``, ``parsed-no-logprobs``, ``no-logprobs`` (not asked: the
    endpoint gives none), ``constrained``, ``parsed``, ``repaired``, ``model``, ``rule`` or
    ``default``; ``answer``: the answer the
    method would return if it stopped here (recorded when known; calibration needs it).
    """
    record = Decision(
        node=node,
        round=round,
        decision=decision,
        p=None if p is None else round_p(p),
        path=path,
        threshold=threshold,
    )
    if answer is not None:
        record["answer"] = answer
    record_loop_decision(record)
    return record


def round_p(p: float) -> float:
    return float(f"{p:.6g}")


def option_probability(choice: Choice, option: str) -> float | None:
    """P(``option``) among the choice's options, renormalised over the options seen in the
    first-token logprobs; None when the choice was not decided on logprobs."""
    total = sum(choice.probs.values())
    if choice.path != "logprobs" or total <= 0:
        return None
    return choice.probs.get(option, 0.0) / total


def read_choice(choice: Choice, stop_option: str) -> Reading:
    """``choice`` as a loop decision on ``stop_option`` (e.g. "True", "Yes")."""
    p = option_probability(choice, stop_option)
    if p is not None or choice.path in ("logprobs", "default"):
        return Reading(p, choice.path, None)
    return Reading(None, choice.path + NO_LOGPROBS, choice.value == stop_option)


def should_stop(
    p: float | None,
    threshold: float,
    *,
    calibration: bool = False,
    says_stop: bool | None = None,
    no_logprobs: NoLogprobs = "retrieve_more",
) -> bool:
    """Stop on ``p >= threshold``; never in a calibration run. Without a probability: never
    (``no_logprobs="retrieve_more"``), or when the model's own answer is the stop option
    (``says_stop``, with ``no_logprobs="trust_answer"``)."""
    if calibration:
        return False
    if p is not None:
        return p >= threshold
    return no_logprobs == "trust_answer" and bool(says_stop)
