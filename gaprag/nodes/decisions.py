"""Loop decisions: take them on a probability against a threshold, and record them.

The convention every method follows for a decision a model takes (IterKey's validation,
Missing-Knowledge's judge, MIGRES's sufficiency, RFM-RAG's R-Feedback):

- ``p`` is the probability of the *stop* outcome ("the answer is valid", "the evidence is
  enough"), from first-token logprobs of a forced choice (:func:`option_probability`) or a
  trained model's score.
- The loop stops when ``p >= threshold`` (:func:`should_stop`). Without a probability (the
  endpoint gives no logprobs, the reply is malformed) the decision falls toward retrieving
  more: small models stop too early far more often than too late.
- In a calibration run (``calibration=True`` in the context) no model decision stops a loop
  before its bound; each decision records the answer the method would have returned had it
  stopped there, so ``gaprag calibrate`` can replay any threshold offline.
"""

from __future__ import annotations

from gaprag.accounting import record_loop_decision
from gaprag.llm.client import Choice
from gaprag.state.base import Decision


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
    model's score), None where none exists; ``path``: ``logprobs``, ``constrained``,
    ``parsed``, ``repaired``, ``model``, ``rule`` or ``default``; ``answer``: the answer the
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


def should_stop(p: float | None, threshold: float, *, calibration: bool = False) -> bool:
    """Stop on ``p >= threshold``; never without a probability, never in a calibration run."""
    return p is not None and p >= threshold and not calibration
