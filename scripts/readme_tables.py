"""Print the README's n = 50 tables from a combined evaluation summary, so the README quotes
the committed numbers instead of copies typed by hand.

    python scripts/readme_tables.py docs/results/n50/after

The directory needs the ``summary.json`` that ``gaprag report SET_DIR... --out DIR [--before
BEFORE_DIR...]`` writes over several sets. Prints: the methods' F1 per set and pooled with both
recalls and the cost per question; the paired ΔF1 against the baseline per set and pooled; and,
where the summary has a before run, after against before per method.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

SET_NAMES = {"hotpotqa": "HotpotQA", "2wikimultihopqa": "2Wiki", "musique": "MuSiQue"}
LABELS = {
    "standard_rag": "standard_rag",
    "missing_knowledge": "Missing-Knowledge",
    "iterkey": "IterKey",
    "migres": "MIGRES",
    "rfm_rag": "RFM-RAG",
    "rag_ef": "RAG-EF",
}


def num(x: float, signed: bool = False, places: int = 2) -> str:
    """``x`` rounded, with a typographic minus (the README's style)."""
    text = f"{x:+.{places}f}" if signed else f"{x:.{places}f}"
    return text.replace("-", "−")


def with_ci(stat: Mapping[str, Any] | None, signed: bool = False) -> str:
    if not stat or stat.get("mean") is None:
        return "–"
    ci = stat.get("ci")
    text = num(stat["mean"], signed)
    return f"{text} [{num(ci[0], signed)}, {num(ci[1], signed)}]" if ci else text


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def order(summary: Mapping[str, Any]) -> list[str]:
    """The baseline first, then the other methods by pooled ΔF1, best first."""
    base = summary.get("baseline", "standard_rag")
    pooled = summary["pooled"]

    def delta(m: str) -> float:
        vs = (pooled[m].get("vs_baseline") or {}).get("f1") or {}
        return float(vs.get("mean") or 0.0)

    return [base, *sorted((m for m in pooled if m != base), key=delta, reverse=True)]


def absolute(summary: Mapping[str, Any]) -> str:
    sets = list(summary["datasets"])
    pooled = summary["pooled"]
    n = max(v["n"] for v in pooled.values())
    header = (
        ["method"]
        + [f"{SET_NAMES.get(s, s)} F1" for s in sets]
        + [f"pooled F1, {n} q", "support recall", "retrieval recall"]
        + ["LLM calls / q", "tokens / q", "s / q"]
    )
    rows = []
    for m in order(summary):
        p = pooled[m]
        per_set = [summary["datasets"][s]["methods"].get(m, {}).get("f1") for s in sets]
        rows.append(
            [LABELS.get(m, m)]
            + [num(f["mean"], places=3) if f else "–" for f in per_set]
            + [with_ci(p["f1"]), with_ci(p["support_recall"]), with_ci(p["retrieval_recall"])]
            + [num(p["cost"]["llm_calls"], places=1), f"{p['cost']['tokens']:,.0f}"]
            + [f"{p['cost']['wall_s']:.0f}"]
        )
    return table(header, rows)


def deltas(summary: Mapping[str, Any]) -> str:
    sets = list(summary["datasets"])
    base = summary.get("baseline", "standard_rag")
    pooled = summary["pooled"]
    n = max(v["n"] for v in pooled.values())
    header = ["method"]
    for s in sets:
        f1 = summary["datasets"][s]["methods"][base]["f1"]["mean"]
        header.append(f"{SET_NAMES.get(s, s)} ({base} F1 {num(f1)})")
    header += [f"pooled, {n} questions", "wins / losses"]
    rows = []
    for m in order(summary)[1:]:
        cells = []
        for s in sets:
            vs = (summary["datasets"][s]["methods"].get(m, {}).get("vs_baseline") or {}).get("f1")
            cells.append(with_ci(vs, signed=True))
        vs = (pooled[m].get("vs_baseline") or {}).get("f1") or {}
        wl = f"{vs['wins']} / {vs['losses']}" if vs else "–"
        rows.append([LABELS.get(m, m), *cells, f"**{with_ci(vs, signed=True)}**", wl])
    return table(header, rows)


def versus_before(summary: Mapping[str, Any]) -> str | None:
    before = summary.get("versus_before")
    if not before:
        return None
    sets = list(before.get("datasets") or {})
    n = max(v["f1"]["n"] for v in before["pooled"].values())
    header = ["method", *(f"{SET_NAMES.get(s, s)} ΔF1" for s in sets)]
    header += [f"F1 before → after, {n} q", "ΔF1 [95% CI]", "wins / losses"]
    header += ["LLM calls before → after"]
    rows = []
    for m, v in before["pooled"].items():
        f1 = v["f1"]
        per_set = []
        for s in sets:
            entry = before["datasets"][s].get(m)
            per_set.append(num(entry["f1"]["mean"], signed=True) if entry else "–")
        calls = (
            f"{num(v['before']['llm_calls'], places=1)} → {num(v['after']['llm_calls'], places=1)}"
        )
        rows.append(
            [
                LABELS.get(m, m),
                *per_set,
                f"{num(v['before']['f1'], places=3)} → {num(v['after']['f1'], places=3)}",
                with_ci(f1, signed=True),
                f"{f1['wins']} / {f1['losses']}",
                calls,
            ]
        )
    return table(header, rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("dir", type=Path, help="a directory with a combined summary.json")
    args = ap.parse_args()
    summary = json.loads((args.dir / "summary.json").read_text())
    print(absolute(summary), end="\n\n")
    print(deltas(summary))
    vb = versus_before(summary)
    if vb:
        print()
        print(vb)


if __name__ == "__main__":
    main()
