"""Record a loop decision: what was decided, on what probability, by which path."""

from __future__ import annotations

from gaprag.llm.accounting import record_loop_decision
from gaprag.state.base import Decision


def log_decision(
    node: str,
    round: int,
    decision: str,
    *,
    p: float | None = None,
    path: str,
    threshold: float | None = None,
) -> Decision:
    """Append ``{node, round, decision, p, path, threshold}`` to the run's ``decisions``.

    ``p``: the probability the decision was taken on (a logprob-derived probability, a trained
    model's score), None where none exists; ``path``: ``logprobs``, ``constrained``,
    ``parsed``, ``repaired``, ``model``, ``rule`` or ``default``.
    """
    record = Decision(
        node=node,
        round=round,
        decision=decision,
        p=None if p is None else round_p(p),
        path=path,
        threshold=threshold,
    )
    record_loop_decision(record)
    return record


def round_p(p: float) -> float:
    return float(f"{p:.6g}")
