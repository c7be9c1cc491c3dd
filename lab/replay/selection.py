"""Offline answer selection (``python -m lab replay select``): choose between the answers an
evaluation run already has.

A gated method's row holds two candidates: plain RAG's answer as its gate gave it (the
``answer`` of its ``gate`` decision, with its probability ``p``) and the method's own final
answer (the row's ``prediction``). This module scores the second the way the gate scores the
first, from the run's traces (:mod:`lab.replay.scoring`), and replays selection
rules between the two (:class:`lab.replay.candidates.Pair`): :func:`replay`
chooses each rule's thresholds by F1 on the calibration questions (index
:data:`gaprag.datasets.CALIBRATION_START` and on) and reports every rule there and, with the
same thresholds, on the reported questions (below 50) where the directories hold them.

When the two candidates agree (the same answer after normalisation, or the gate answered
and the loop never ran) there is nothing to choose; the rules decide only where they differ:

- ``loop``: the method's answer (what the methods do today); ``gate``: plain RAG's answer;
- ``gate_p``: plain RAG's answer when its ``p >= a``;
- ``loop_p``: the method's answer when its ``p >= b``, else plain RAG's;
- ``margin``: plain RAG's answer when its ``p`` exceeds the method's by at least ``m``: the
  graph's own rule (``answer_choice="logprob"``, ``choice_margin=m``:
  :func:`gaprag.nodes.choice.choose_answer`);
- ``both``: the method's answer when its ``p >= b``, else plain RAG's when its ``p >= a``,
  else the method's.

A rule that needs the method's ``p`` keeps the method's answer where it has none.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import product
from typing import Any

from gaprag.datasets import CALIBRATION_START, REPORTED_QUESTIONS
from gaprag.eval.calibrate import fit as fit_grid
from gaprag.eval.stats import captured_share
from gaprag.nodes.choice import choose_answer
from lab.replay.candidates import Pair
from lab.replay.tables import format_interval, mean, num, paired_delta, share

Thresholds = dict[str, float]
Rule = Callable[[Pair, Thresholds], bool]  # True: plain RAG's (the gate's) answer


def _ge(p: float | None, threshold: float) -> bool:
    return p is not None and p >= threshold


RULES: dict[str, tuple[tuple[str, ...], Rule]] = {
    "loop": ((), lambda c, t: False),
    "gate": ((), lambda c, t: True),
    "gate_p": (("a",), lambda c, t: _ge(c.gate.p, t["a"])),
    "loop_p": (("b",), lambda c, t: c.loop.p is not None and c.loop.p < t["b"]),
    # the graph's own rule (answer_choice="logprob", choice_margin=m)
    "margin": (
        ("m",),
        lambda c, t: choose_answer([c.gate, c.loop], "logprob", t["m"]).index == 0,
    ),
    "both": (
        ("a", "b"),
        lambda c, t: c.loop.p is not None and c.loop.p < t["b"] and _ge(c.gate.p, t["a"]),
    ),
}


def choose_gate(rule: str, c: Pair, thresholds: Thresholds) -> bool:
    """Whether ``rule`` with ``thresholds`` takes plain RAG's answer for ``c`` (never where
    the two agree: there is nothing to choose)."""
    return not c.agree and RULES[rule][1](c, thresholds)


def _f1(rule: str, cands: Sequence[Pair], t: Thresholds) -> tuple[float, int]:
    """(mean F1, questions switched to plain RAG's answer)."""
    picks = [choose_gate(rule, c, t) for c in cands]
    total = sum(c.gate.f1 if g else c.loop.f1 for c, g in zip(cands, picks, strict=True))
    return total / len(cands), sum(picks)


def _grid(values: Iterable[float | None]) -> list[float]:
    """Every threshold that separates the observed values, and one above them all."""
    seen = sorted({v for v in values if v is not None})
    return [*seen, (seen[-1] + 1.0) if seen else 1.0]


def _grids(cands: Sequence[Pair]) -> dict[str, list[float]]:
    gate = _grid(c.gate.p for c in cands)
    loop = _grid(c.loop.p for c in cands)
    margins = _grid(
        c.gate.p - c.loop.p for c in cands if c.gate.p is not None and c.loop.p is not None
    )
    return {"a": gate, "b": loop, "m": margins}


def fit(rule: str, cands: Sequence[Pair]) -> Thresholds:
    """The thresholds of ``rule`` with the best mean F1 on ``cands``; ties go to the one that
    switches fewest questions to plain RAG's answer, then to the highest thresholds."""
    names, _ = RULES[rule]
    if not names or not cands:
        return {}
    grids = _grids(cands)
    grid = (dict(zip(names, values, strict=True)) for values in product(*(grids[n] for n in names)))
    chosen, _ = fit_grid(
        grid,
        lambda t: _f1(rule, cands, t),
        lambda t, r: (round(r[0], 12), -r[1], tuple(t[n] for n in names)),
    )
    return chosen


def _evaluate(rule: str, cands: Sequence[Pair], t: Thresholds) -> dict[str, Any]:
    f1, switched = _f1(rule, cands, t)
    plain = sum(c.plain_f1 for c in cands) / len(cands)
    oracle = sum(c.oracle for c in cands) / len(cands)
    return {
        "f1": f1,
        "switched": switched,
        "captured": captured_share(f1, plain, oracle),
    }


def _summary(cands: Sequence[Pair]) -> dict[str, Any]:
    """The candidates' F1 on ``cands``; ``differ``: the questions where the two candidates
    differ, with each one's F1 there (``differ_gate``, ``differ_loop``), and how many of them
    have the method's ``p`` (``loop_scored``); ``agree_f1``: F1 where they agree."""
    n = len(cands)
    differ = [c for c in cands if not c.agree]
    return {
        "n": n,
        "plain": sum(c.plain_f1 for c in cands) / n,
        "gate": sum(c.gate.f1 for c in cands) / n,
        "loop": sum(c.loop.f1 for c in cands) / n,
        "oracle": sum(c.oracle for c in cands) / n,
        "in_run": sum(max(c.gate.f1, c.loop.f1) for c in cands) / n,
        "differ": len(differ),
        "differ_gate": mean([c.gate.f1 for c in differ]),
        "differ_loop": mean([c.loop.f1 for c in differ]),
        "agree_f1": mean([c.loop.f1 for c in cands if c.agree]),
        "loop_scored": sum(c.loop.p is not None for c in differ),
    }


def replay(cands: Sequence[Pair]) -> dict[str, Any]:
    """Per method: each rule's thresholds fitted on the calibration questions (index
    :data:`CALIBRATION_START` and on), and the F1, questions switched and share of the
    headroom captured on them (``fit``) and on the reported questions (``check``, index below
    :data:`REPORTED_QUESTIONS`, never used to fit) where there are any."""
    per: dict[str, list[Pair]] = defaultdict(list)
    for c in cands:
        per[c.method].append(c)
    out: dict[str, Any] = {}
    for method, rows in per.items():
        fit_rows = [c for c in rows if c.index is not None and c.index >= CALIBRATION_START]
        check_rows = [c for c in rows if c.index is not None and c.index < REPORTED_QUESTIONS]
        entry: dict[str, Any] = {
            "fit": _summary(fit_rows) if fit_rows else None,
            "check": _summary(check_rows) if check_rows else None,
            "rules": {},
        }
        for rule in RULES:
            thresholds = fit(rule, fit_rows) if fit_rows else {}
            if RULES[rule][0] and not thresholds:
                continue  # no calibration questions to choose its thresholds on
            entry["rules"][rule] = {
                "thresholds": thresholds,
                "fit": _evaluate(rule, fit_rows, thresholds) if fit_rows else None,
                "check": _evaluate(rule, check_rows, thresholds) if check_rows else None,
            }
        out[method] = entry
    return out


def check(cands: Sequence[Pair], rule: str, thresholds: Mapping[str, Thresholds]) -> dict[str, Any]:
    """Per method, ``rule`` (its thresholds from ``thresholds[method]``, e.g. fitted on the
    calibration questions; ``loop`` where they are missing) on the reported questions (index below
    :data:`REPORTED_QUESTIONS`): F1 per set and pooled for plain RAG, the run as it was (the
    method's answer always) and the rule, with the rule's paired ΔF1 against plain RAG and
    against the run."""
    per: dict[str, list[Pair]] = defaultdict(list)
    for c in cands:
        if c.index is not None and c.index < REPORTED_QUESTIONS:
            per[c.method].append(c)
    out: dict[str, Any] = {}
    for method, rows in per.items():
        t = dict(thresholds.get(method, {}))
        used = rule if all(n in t for n in RULES[rule][0]) else "loop"  # none fitted: the run
        chosen = [c.gate.f1 if choose_gate(used, c, t) else c.loop.f1 for c in rows]
        sets: dict[str, dict[str, float]] = {}
        for name in sorted({c.dataset for c in rows}):
            pick = [i for i, c in enumerate(rows) if c.dataset == name]
            sets[name] = {
                "n": len(pick),
                "plain": mean([rows[i].plain_f1 for i in pick]) or 0.0,
                "run": mean([rows[i].loop.f1 for i in pick]) or 0.0,
                "rule": mean([chosen[i] for i in pick]) or 0.0,
            }
        plain, run = [c.plain_f1 for c in rows], [c.loop.f1 for c in rows]
        out[method] = {
            "rule": used,
            "thresholds": t,
            "n": len(rows),
            "plain": sum(plain) / len(rows),
            "run": sum(run) / len(rows),
            "f1": sum(chosen) / len(rows),
            "switched": sum(choose_gate(used, c, t) for c in rows),
            "vs_plain": paired_delta(chosen, plain),
            "vs_run": paired_delta(chosen, run),
            "run_vs_plain": paired_delta(run, plain),
            "sets": sets,
        }
    return out


def render_check(result: Mapping[str, Any]) -> str:
    """:func:`check` as Markdown: per method and set, then pooled with intervals."""
    lines = [
        "| method | rule | set | n | plain RAG | the run | with the rule | switched | ΔF1 vs plain "
        "RAG | ΔF1 vs the run | wins / losses vs the run |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for method, e in result.items():
        t = ", ".join(f"{k}={v:.3f}" for k, v in e["thresholds"].items())
        rule = f"{e['rule']} ({t})" if t else e["rule"]
        for name, s in e["sets"].items():
            lines.append(
                f"| {method} | {rule} | {name} | {s['n']} | {num(s['plain'])} | "
                f"{num(s['run'])} | {num(s['rule'])} | | | | |"
            )
        lines.append(
            f"| {method} | {rule} | **pooled** | {e['n']} | {num(e['plain'])} | "
            f"{num(e['run'])} | **{num(e['f1'])}** | {e['switched']} | "
            f"{format_interval(e['vs_plain'])} | {format_interval(e['vs_run'])} | "
            f"{e['vs_run']['wins']} / {e['vs_run']['losses']} |"
        )
    return "\n".join(lines)


def render(result: Mapping[str, Any]) -> str:
    """The replay as Markdown: per method the candidates' F1, then each rule."""
    lines = [
        "| method | set | n | plain RAG | gate answer | loop answer | best of the two | oracle "
        "| agree: F1 | differ (method p known): gate / loop F1 |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for method, e in result.items():
        for part in ("fit", "check"):
            s = e[part]
            if s:
                lines.append(
                    f"| {method} | {part} | {s['n']} | {num(s['plain'])} | {num(s['gate'])} | "
                    f"{num(s['loop'])} | {num(s['in_run'])} | {num(s['oracle'])} | "
                    f"{s['n'] - s['differ']}: {num(s['agree_f1'])} | {s['differ']} "
                    f"({s['loop_scored']}): {num(s['differ_gate'])} / {num(s['differ_loop'])} |"
                )
    lines += [
        "",
        "| method | rule | thresholds | F1 fit | captured fit | switched fit | F1 check "
        "| captured check | switched check |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for method, e in result.items():
        for rule, r in e["rules"].items():
            t = ", ".join(f"{k}={v:.3f}" for k, v in r["thresholds"].items()) or "–"
            cells = []
            for part in ("fit", "check"):
                v = r[part]
                cells += (
                    [num(v["f1"]), share(v["captured"]), str(v["switched"])] if v else ["–"] * 3
                )
            lines.append(f"| {method} | {rule} | {t} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
