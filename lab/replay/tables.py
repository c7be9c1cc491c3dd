"""Paired intervals and the number formats of the replays' tables (and of the scripts that
write the result pages' tables)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from gaprag.eval.stats import bootstrap_ci


def paired_delta(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """Mean paired difference ``a - b`` with its bootstrap interval, and wins / losses."""
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    return {
        "mean": sum(diffs) / len(diffs),
        "ci": bootstrap_ci(diffs),
        "wins": sum(d > 0 for d in diffs),
        "losses": sum(d < 0 for d in diffs),
    }


def signed(value: float) -> str:
    """``+0.012``, ``−0.010`` (a true minus sign)."""
    return f"{value:+.3f}".replace("-", "−")


def format_interval(d: Mapping[str, Any]) -> str:
    """A :func:`paired_delta` as ``+0.012 [−0.010, +0.034]``."""
    lo, hi = d["ci"] or (float("nan"), float("nan"))
    return f"{signed(d['mean'])} [{signed(lo)}, {signed(hi)}]"


def num(value: float | None, digits: int = 3) -> str:
    """A number with ``digits`` places; ``–`` for none."""
    return "–" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def share(value: float | None) -> str:
    """A share as a percentage; ``–`` for none."""
    return "–" if value is None else f"{value:.0%}"


def mean(values: Sequence[float]) -> float | None:
    """The mean; None for no values."""
    return sum(values) / len(values) if values else None


def figure(x: float, signed: bool = False, places: int = 2) -> str:
    """``x`` rounded to ``places``, with a typographic minus (the result pages' style)."""
    text = f"{x:+.{places}f}" if signed else f"{x:.{places}f}"
    return text.replace("-", "−")


def with_ci(stat: Mapping[str, Any] | None, signed: bool = False, places: int = 2) -> str:
    """A summary statistic (``mean``, ``ci``) as ``0.41 [0.34, 0.49]``; ``–`` without one."""
    if not stat or stat.get("mean") is None:
        return "–"
    ci = stat.get("ci")
    text = figure(stat["mean"], signed, places)
    return (
        f"{text} [{figure(ci[0], signed, places)}, {figure(ci[1], signed, places)}]" if ci else text
    )


def delta_cell(d: Mapping[str, Any] | None, places: int = 2) -> str:
    """A paired difference (``mean``, ``ci``, ``wins``, ``losses``, ``n``: a summary's
    ``vs_baseline`` entry or a :func:`paired_delta` with its ``n``) as ``+0.03 [−0.03, +0.09]
    (19 / 12, n = 150)``; ``–`` without one."""
    if not d or d.get("mean") is None:
        return "–"
    text = with_ci(d, signed=True, places=places)
    return f"{text} ({d.get('wins', 0)} / {d.get('losses', 0)}, n = {d.get('n', 0)})"
