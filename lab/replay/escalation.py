"""Offline escalation (``python -m lab replay escalation``): replay ``escalating_rag``'s choices on evaluation rows that already hold
every candidate, and choose its settings on the calibration questions.

A run of every method with each gate recording plain RAG's answer but never stopping
(``gate_threshold`` above any probability) holds, per question, plain RAG's answer and its
``p`` (the ``gate`` decision), and each method's loop answer, its F1 and its calls; the loop
answers' ``p`` come from the rows' selection scores (:func:`lab.replay.scoring.score_runs`).
:func:`replay` runs the graph's rules on them (the gate, the choice of
:func:`gaprag.nodes.choice.choose_answer`, the stop of :func:`gaprag.nodes.choice.stop_reason`,
the call budget)
for a grid of settings, and :func:`fit` keeps the one with the best mean F1 whose mean calls
stay within a cap (fewer calls breaking ties), on questions from index
:data:`gaprag.datasets.CALIBRATION_START` only.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gaprag.datasets import CALIBRATION_START
from gaprag.eval.calibrate import fit as fit_grid
from gaprag.metrics import normalize_answer
from gaprag.nodes import choice as rules
from gaprag.nodes.gate import GATE_STOP
from gaprag.nodes.short_answer import rule_answer
from gaprag.profiles import writer as profile
from lab.replay.candidates import Candidate, Pair, pairs


@dataclass(frozen=True)
class Question:
    """One question with plain RAG's candidate and each method's loop candidate."""

    dataset: str
    id: str
    index: int | None
    plain: Candidate
    loops: Mapping[str, Candidate] = field(default_factory=dict)


@dataclass(frozen=True)
class Setting:
    """escalating_rag's settings, as in its context (the gate as a probability)."""

    first: str
    second: str  # "none": no second loop
    gate_p: float  # plain RAG stops the question when its p >= gate_p
    escalate_p: float
    margin: float = 0.0
    call_budget: int = 8


def _plain(first: Pair) -> Candidate:
    """Plain RAG's candidate: the gate's answer, with plain RAG's own F1 where its own row gave
    the same answer (after the short-answer step), else the gate answer's."""
    gate, own = first.gate, first.plain
    short = rule_answer(first.question, gate.answer)
    same = own is not None and normalize_answer(own.answer) in (
        normalize_answer(gate.answer),
        normalize_answer(short or ""),
    )
    f1 = own.f1 if own is not None and same else gate.f1
    return Candidate(gate.answer, gate.p, f1, 1)


def questions(dirs: Sequence[str | Path]) -> list[Question]:
    """Every question of ``dirs`` with plain RAG's answer (a gate decision) and the loops'
    (a loop's ``p`` only where its answer was scored)."""
    grouped: dict[tuple[str, str], list[Pair]] = {}
    for p in pairs(dirs):
        grouped.setdefault((p.dataset, p.id), []).append(p)
    return [
        Question(
            dataset=group[0].dataset,
            id=group[0].id,
            index=group[0].index,
            plain=_plain(group[0]),
            loops={p.method: p.loop for p in group},
        )
        for group in grouped.values()
    ]


def ladder(s: Setting) -> rules.Ladder:
    """The graph's step settings (``answer_choice="logprob"``) of setting ``s``."""
    loops = tuple(m for m in (s.first, s.second) if m != "none")
    return rules.Ladder(loops, "logprob", s.margin, s.escalate_p)


def run(q: Question, s: Setting) -> tuple[float, int, str]:
    """(F1, LLM calls, stop reason) of escalating_rag with settings ``s`` on question ``q``:
    the graph's steps on the recorded candidates. After plain RAG's gate, each rung starts its
    loop when :func:`gaprag.nodes.choice.may_start_loop` allows (a loop whose recorded calls
    overrun the budget is cut, gives no answer and ends the question at the call budget; a
    loop the rows lack gives none), then :func:`gaprag.nodes.choice.next_step` chooses the
    answer and stops or names the next loop, as escalating_rag's ``first_loop``/``second_loop``
    and ``choose`` nodes do."""
    if q.plain.p is not None and q.plain.p >= s.gate_p:
        return q.plain.f1, 1, GATE_STOP
    steps = ladder(s)
    cands = [q.plain] if q.plain.answer else []
    calls, method, rungs, limit = 1, s.first, 0, ""
    while True:
        rungs += 1
        loop = q.loops.get(method)
        if loop is not None and rules.may_start_loop(s.call_budget - calls):
            if calls + loop.calls > s.call_budget:  # the call past the budget is refused
                calls, limit = s.call_budget, "call_budget"
            else:
                calls += loop.calls
                if loop.answer:
                    cands.append(loop)
        step = rules.next_step(cands, rungs, steps, s.call_budget - calls, limit)
        if step.stop_reason:
            f1 = cands[step.choice.index].f1 if step.choice is not None else 0.0
            return f1, calls, step.stop_reason
        method = step.method


def measure(qs: Sequence[Question], s: Setting) -> dict[str, float]:
    """Mean F1, mean calls, plain RAG's mean F1 and the oracle's over ``qs``."""
    results = [run(q, s) for q in qs]
    n = max(1, len(qs))
    oracle = [
        max([q.plain.f1, *(q.loops[m].f1 for m in (s.first, s.second) if m in q.loops)]) for q in qs
    ]
    return {
        "n": len(qs),
        "f1": sum(r[0] for r in results) / n,
        "calls": sum(r[1] for r in results) / n,
        "plain_f1": sum(q.plain.f1 for q in qs) / n,
        "oracle_f1": sum(oracle) / n,
    }


def _grid(values: Iterable[float | None]) -> list[float]:
    found = sorted({round(v, 4) for v in values if v is not None})
    return [0.0, *found, 1.01]


def fit(
    qs: Sequence[Question],
    *,
    max_calls: float = 3.0,
    margins: Sequence[float] = (0.0, 0.1, 0.2, 0.3),
    call_budget: int = 8,
    firsts: Sequence[str] = (),
    seconds: Sequence[str] = (),
    gate_ps: Sequence[float] = (),
) -> tuple[Setting, dict[str, float]]:
    """The setting with the best mean F1 on the calibration questions of ``qs`` whose mean
    calls are at most ``max_calls`` (fewer calls, then a higher gate, breaking ties);
    ``firsts``/``seconds``: the loops tried at each rung (default: every method the rows hold,
    and ``none`` second); ``gate_ps``: the gate probabilities tried (default: every plain
    RAG ``p`` the rows hold)."""
    calib = [q for q in qs if q.index is None or q.index >= CALIBRATION_START]
    methods = sorted({m for q in calib for m in q.loops})
    gates = list(gate_ps) or _grid(q.plain.p for q in calib)
    escalates = _grid(a.p for q in calib for a in q.loops.values())
    grid = (
        Setting(first, second, gate_p, escalate_p, margin, call_budget)
        for first, second in itertools.product(firsts or methods, seconds or [*methods, "none"])
        if first != second
        for gate_p, escalate_p, margin in itertools.product(gates, escalates, margins)
    )
    chosen, result = fit_grid(
        grid,
        lambda s: measure(calib, s),
        # within the calls cap first; then F1, fewer calls, a higher gate
        lambda s, r: (r["calls"] <= max_calls, round(r["f1"], 6), -round(r["calls"], 6), s.gate_p),
    )
    if result["calls"] > max_calls:
        raise ValueError(f"no setting keeps the mean calls within {max_calls}")
    if chosen.escalate_p <= 0.0:  # every choice stops after the first loop: name no second
        chosen = dataclasses.replace(chosen, second="none")
    return chosen, result


def write_profile(
    path: Path, setting: Setting, result: Mapping[str, Any], notes: Mapping[str, Any]
) -> None:
    """Write ``setting`` as the profile's ``[escalating_rag]`` section (the gate as a
    ``logprob_mean`` threshold) and how it was chosen as ``[calibration.escalating_rag]``,
    keeping everything else in the profile."""
    from gaprag.nodes.gate import threshold_setting

    gate = threshold_setting("logprob_mean", setting.gate_p) if setting.gate_p <= 1.0 else 1.0
    section = {
        "gate": "logprob_mean",
        "gate_threshold": round(gate, 4),
        "first_loop": setting.first,
        "second_loop": setting.second,
        "escalate_threshold": round(setting.escalate_p, 4),
        "choice_margin": setting.margin,
        "call_budget": setting.call_budget,
    }
    record = {
        **notes,
        "chosen_gate_p": round(setting.gate_p, 4),
        **{k: round(float(v), 4) for k, v in result.items()},
    }
    profile.write_profile(path, {"escalating_rag": section}, {"escalating_rag": record})
