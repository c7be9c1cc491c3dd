"""Choosing IterKey's final answer, and the paper's per-run analyses (Tables 3, 4 and 9).

All functions read the ``history`` list a run returns (one :class:`IterationRecord` per round)
and never call a model, so they work on saved results too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Literal

from gaprag.graphs.iterkey.state import IterationRecord
from gaprag.metrics import normalize_answer

FallbackPolicy = Literal["last", "first", "majority", "confident"]


def majority_index(answers: Sequence[str]) -> int:
    """Index of the most frequent normalised non-empty answer; ties go to the latest one."""
    norms = [normalize_answer(a) for a in answers]
    counts = Counter(n for n in norms if n)
    if not counts:
        return len(answers) - 1
    best = max(counts.values())
    return max(j for j, n in enumerate(norms) if n and counts[n] == best)


def fallback_index(
    answers: Sequence[str], probs: Sequence[float | None], policy: FallbackPolicy = "last"
) -> int:
    """Which round's answer a run returns when no round was accepted: ``last``, ``first``,
    ``majority`` (most frequent normalised answer, ties to the latest) or ``confident`` (the
    highest validator P(True); a round without a probability ranks below every other, ties to
    the latest). ``answers`` and ``probs`` are per round; used by the graph and by the
    calibration replay alike."""
    if policy == "first":
        return 0
    if policy == "majority":
        return majority_index(answers)
    if policy == "confident" and any(p is not None for p in probs):
        best = max(p for p in probs if p is not None)
        return max(j for j, p in enumerate(probs) if p is not None and p == best)
    return len(answers) - 1


def final_round(
    history: Sequence[IterationRecord],
    first_true_iteration: int | None,
    policy: FallbackPolicy = "last",
) -> IterationRecord | None:
    """The round whose answer is returned: the first validated one, else the fallback policy."""
    if not history:
        return None
    if first_true_iteration is not None:
        for record in history:
            if record["iteration"] == first_true_iteration:
                return record
    answers = [r["answer"] for r in history]
    probs = [r["verdict_scores"]["p"] for r in history]
    return history[fallback_index(answers, probs, policy)]


def verified_true(history: Sequence[IterationRecord], is_correct: Callable[[str], bool]) -> bool:
    """Table 9 "VerifiedTrue": some round judged True has a correct answer."""
    return any(r["verdict"] and is_correct(r["answer"]) for r in history)


def verified_all(history: Sequence[IterationRecord], is_correct: Callable[[str], bool]) -> bool:
    """Table 9 "VerifiedAll" (oracle): some round, whatever its verdict, has a correct answer."""
    return any(is_correct(r["answer"]) for r in history)


def new_per_step(history: Sequence[IterationRecord]) -> dict[str, list[int]]:
    """Tables 3-4: keywords and documents at each round not seen in any earlier round."""
    return {
        "new_keywords": [len(r["new_keywords"]) for r in history],
        "new_doc_ids": [len(r["new_doc_ids"]) for r in history],
    }
