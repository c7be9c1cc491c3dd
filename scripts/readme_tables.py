"""Print the results tables from combined evaluation summaries, so README.md and
docs/results/README.md quote the committed numbers instead of copies typed by hand.

    python scripts/readme_tables.py docs/results/n50/after
    python scripts/readme_tables.py docs/results/n50/after --readme docs/results/n50/rag_ef

The directory needs the ``summary.json`` that ``gaprag report SET_DIR... --out DIR [--before
BEFORE_DIR...]`` writes over several sets. Prints (docs/results/README.md): the methods' F1 per
set and pooled with both recalls and the cost per question; the paired ΔF1 against the
baseline per set and pooled, with the pooled oracle F1 and the share of it captured; and, where the summary has a before run, after against before per
method; for RAG-EF's ladder directory (``docs/results/n50/rag_ef``), its ladder table. With
``--readme LADDER_DIR`` it prints instead README.md's one results table: each
method's settings, pooled F1 and ΔF1 against plain RAG, its oracle F1 and the share captured,
with the cost per question, and last
RAG-EF's row from its ladder's summary (its own corpus and plain RAG).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# the repository's research lab (lab/) is not installed: import it from this checkout
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gaprag.eval.stats import headroom_cells
from gaprag.nodes.gate import GATE_STOP, probability
from lab.replay.tables import figure, with_ci

SET_NAMES = {"hotpotqa": "HotpotQA", "2wikimultihopqa": "2Wiki", "musique": "MuSiQue"}
LABELS = {
    "standard_rag": "standard_rag",
    "missing_knowledge": "Missing-Knowledge",
    "iterkey": "IterKey",
    "migres": "MIGRES",
    "rfm_rag": "RFM-RAG",
    "rag_ef": "RAG-EF",
    "ircot": "IRCoT",
    "escalating_rag": "Escalating RAG",
}
#: the gate's settings, shown in their own column
GATE_SETTINGS = ("gate", "gate_threshold")


def label(summary: Mapping[str, Any], key: str) -> str:
    """A method's name in the tables; a variant (``--variant``) is its method's name and the
    variant's key: ``IRCoT (ircot_gate_p75)``."""
    if key in LABELS:
        return LABELS[key]
    for run in summary.get("runs") or []:
        base = (run.get("variants") or {}).get(key)
        if base:
            return f"{LABELS.get(base, base)} (`{key}`)"
    return key


def table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> str:
    """A Markdown table, its first ``left`` columns left-aligned and the rest right-aligned."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * left + "---:|" * (len(header) - left)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def has_headroom(summary: Mapping[str, Any]) -> bool:
    """Whether the summary's pooled table has the headroom columns (reports written before
    them have none)."""
    return any(e.get("headroom") for e in summary["pooled"].values())


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
            [label(summary, m)]
            + [figure(f["mean"], places=3) if f else "–" for f in per_set]
            + [with_ci(p["f1"]), with_ci(p["support_recall"]), with_ci(p["retrieval_recall"])]
            + [figure(p["cost"]["llm_calls"], places=1), f"{p['cost']['tokens']:,.0f}"]
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
        header.append(f"{SET_NAMES.get(s, s)} ({base} F1 {figure(f1)})")
    header += [f"pooled, {n} questions", "wins / losses"]
    header += ["oracle F1", "captured"] * has_headroom(summary)
    rows = []
    for m in order(summary)[1:]:
        cells = []
        for s in sets:
            vs = (summary["datasets"][s]["methods"].get(m, {}).get("vs_baseline") or {}).get("f1")
            cells.append(with_ci(vs, signed=True))
        vs = (pooled[m].get("vs_baseline") or {}).get("f1") or {}
        wl = f"{vs['wins']} / {vs['losses']}" if vs else "–"
        row = [label(summary, m), *cells, f"**{with_ci(vs, signed=True)}**", wl]
        rows.append([*row, *headroom_cells(pooled[m])[: len(header) - len(row)]])
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
            per_set.append(figure(entry["f1"]["mean"], signed=True) if entry else "–")
        calls = f"{figure(v['before']['llm_calls'], places=1)} → {figure(v['after']['llm_calls'], places=1)}"
        rows.append(
            [
                label(summary, m),
                *per_set,
                f"{figure(v['before']['f1'], places=3)} → {figure(v['after']['f1'], places=3)}",
                with_ci(f1, signed=True),
                f"{f1['wins']} / {f1['losses']}",
                calls,
            ]
        )
    return table(header, rows)


#: settings every row shows first, as "<retrieval_mode> top <top_k>"
SHOWN_FIRST = ("retrieval_mode", "top_k")
#: RAG-EF's ladder variant the README's table shows: expert pairs that really reword
LADDER_VARIANT = "rag_ef_SE_reworded"


def value(x: Any) -> str:
    """A setting's value as in a profile file: ``true``, ``0.85``, ``hybrid``."""
    return json.dumps(x) if isinstance(x, bool) else str(x)


def settings_cell(summary: Mapping[str, Any], method: str, skip: Sequence[str] = ()) -> str:
    """``"hybrid top 5; judge_threshold=1.0"``: the retrieval every set used, then each setting
    that did not come from the method's defaults (a model profile or an explicit value), with
    the sets it applied to when not all; the settings in ``skip`` left out."""
    runs = [r for r in summary.get("runs") or [] if method in (r.get("settings") or {})]
    if not runs:
        return "–"
    first = runs[0]["settings"][method]
    cell = f"{first.get('retrieval_mode', '?')} top {first.get('top_k', '?')}"
    if "top_k" not in first:  # a composed graph: its methods retrieve
        cell = "composed"
    seen: dict[str, list[str]] = {}
    for r in runs:
        for key in (r.get("setting_sources") or {}).get(method) or {}:
            if key not in SHOWN_FIRST and key not in skip:
                item = f"{key}={value(r['settings'][method][key])}"
                seen.setdefault(item, []).append(SET_NAMES.get(r["dataset"], r["dataset"]))
    extras = [
        item if len(sets) == len(runs) else f"{item} ({', '.join(sets)})"
        for item, sets in sorted(seen.items())
    ]
    return "; ".join([cell, ", ".join(extras)]) if extras else cell


def gate_cell(summary: Mapping[str, Any], method: str) -> str:
    """When the method loops: ``p < 0.75`` (the gate's threshold as the probability it
    compares, :func:`gaprag.nodes.gate.probability`; signals other than ``logprob_mean``
    named), ``–`` when no run of the summary gated it."""
    runs = [
        r["settings"][method] for r in summary.get("runs") or [] if method in r.get("settings", {})
    ]
    ctx = next((c for c in runs if c.get("gate", "off") != "off"), None)
    if ctx is None:
        return "–"
    signal = ctx["gate"]
    if signal == "agreement":
        return "answers differ"
    p = probability(signal, float(ctx.get("gate_threshold", 0.0)))
    return f"p < {p:.2f}" if signal == "logprob_mean" else f"{signal} p < {p:.2f}"


def looped(summary: Mapping[str, Any], method: str) -> str:
    """The share of the method's questions that went past the gate into the loop."""
    reasons: Counter[str] = Counter()
    for entry in summary["datasets"].values():
        reasons.update(entry["methods"].get(method, {}).get("stop_reasons") or {})
    total = reasons.total()
    return f"{(total - reasons[GATE_STOP]) / total:.0%}" if total else "–"


def overview(
    summary: Mapping[str, Any],
    ladder: Mapping[str, Any] | None = None,
    also: Mapping[str, Any] | None = None,
    also_label: str = "",
) -> str:
    """README.md's results table: the baseline, the methods by pooled ΔF1, then the methods of
    another run (``also``, each against that run's own baseline, named with ``also_label``)
    that this one does not have, then RAG-EF's ladder row (``LADDER_VARIANT`` against the
    ladder's own baseline) when given. When a method ran gated, two columns give when each
    gated method loops (plain RAG's answer under the gate's threshold) and on what share of
    the questions it did."""
    pooled = summary["pooled"]
    n = max(v["n"] for v in pooled.values())
    gates = {m: gate_cell(summary, m) for m in pooled}
    others = [m for m in order(also) if m not in pooled] if also is not None else []
    if also is not None:
        gates.update({m: gate_cell(also, m) for m in others})
    any_gate = any(cell != "–" for cell in gates.values())
    header = ["method", "settings", f"pooled F1, {n} q", "ΔF1 vs plain RAG [95% CI]"]
    any_headroom = has_headroom(summary) or (also is not None and has_headroom(also))
    header += ["oracle F1", "captured"] * any_headroom
    header += ["loops when", "looped"] * any_gate + ["LLM calls / q", "s / q"]

    def row(
        label: str, settings: str, entry: Mapping[str, Any], gate: Sequence[str] = ("–", "–")
    ) -> list[str]:
        vs = (entry.get("vs_baseline") or {}).get("f1")
        cost = entry["cost"]
        return [label, settings, with_ci(entry["f1"]), with_ci(vs, signed=True) if vs else "–",
                *headroom_cells(entry)[: 2 * any_headroom], *gate[: 2 * any_gate], figure(cost["llm_calls"], places=1), f"{cost['wall_s']:.0f}"]  # fmt: skip

    base_name = summary.get("baseline", "standard_rag")
    rows = [
        row(
            f"plain RAG (`{m}`)" if m == base_name else label(summary, m),
            settings_cell(summary, m, skip=GATE_SETTINGS),
            pooled[m],
            (gates[m], looped(summary, m)) if gates[m] != "–" else ("–", "–"),
        )
        for m in order(summary)
    ]
    if also is not None:
        base = also["pooled"][also.get("baseline", "standard_rag")]
        suffix = f" {also_label}" if also_label else ""
        rows += [
            row(
                f"{label(also, m)}{suffix}",
                settings_cell(also, m, skip=GATE_SETTINGS)
                + f"; its run's plain RAG F1 {figure(base['f1']['mean'])}",
                also["pooled"][m],
                (gates[m], looped(also, m)) if gates[m] != "–" else ("–", "–"),
            )
            for m in others
        ]
    if ladder is not None:
        entry = ladder["pooled"][LADDER_VARIANT]
        base = ladder["pooled"][ladder.get("baseline", "standard_rag")]
        run = next(r for r in ladder["runs"] if LADDER_VARIANT in r["settings"])
        ctx = run["settings"][LADDER_VARIANT]
        settings = (
            f"{ctx.get('similarity', '?')} top {ctx.get('top_k', '?')} over S ∪ E_r (synthetic "
            "pairs + one reworded expert pair a question); its own corpus and plain RAG "
            f"(F1 {figure(base['f1']['mean'])})"
        )
        rows.append(row(f"{LABELS['rag_ef']} (ladder)", settings, entry))
    return table(header, rows, left=2)


#: RAG-EF's ladder, in the ladder's order, with what each row is
LADDER_ROWS = {
    "standard_rag": "standard_rag (hybrid top 5 of the set's paragraphs)",
    "rag_ef_standard": "RAG-EF's Eq. 1 baseline (dense top 5 of S's chunks)",
    "rag_ef_S": "RAG-EF over S (the model's pairs for every paragraph)",
    "rag_ef_SE": "RAG-EF over S ∪ E (+ one expert pair a question, 83 of 150 near copies of it)",
    "rag_ef_SE_reworded": (
        "RAG-EF over S ∪ E_r (E's near copies replaced by sampled rewordings; 10 of 150 left)"
    ),
}


def ladder(summary: Mapping[str, Any]) -> str:
    """RAG-EF's ladder (docs/results/README.md): per set F1, pooled ΔF1 against the ladder's
    own baseline, wins / losses, support recall and LLM calls per question."""
    sets = list(summary["datasets"])
    pooled = summary["pooled"]
    n = max(v["n"] for v in pooled.values())
    header = [f"RAG-EF's ladder, {n} questions", *(f"{SET_NAMES.get(s, s)} F1" for s in sets)]
    header += ["pooled ΔF1 vs standard_rag [95% CI]", "wins / losses", "support recall"]
    header += ["LLM calls / q"]
    rows = []
    for m, label in LADDER_ROWS.items():
        p = pooled[m]
        vs = (p.get("vs_baseline") or {}).get("f1")
        per_set = [summary["datasets"][s]["methods"][m]["f1"]["mean"] for s in sets]
        delta = with_ci(vs, signed=True) if vs else "–"
        wins = f"{vs['wins']} / {vs['losses']}" if vs else "–"
        recall, calls = figure(p["support_recall"]["mean"]), figure(p["cost"]["llm_calls"])
        rows.append([label, *(figure(f, places=3) for f in per_set), delta, wins, recall, calls])
    return table(header, rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("dir", type=Path, help="a directory with a combined summary.json")
    ap.add_argument(
        "--readme",
        type=Path,
        metavar="LADDER_DIR",
        help="print README.md's table, with RAG-EF's row from this ladder's summary",
    )
    ap.add_argument(
        "--also",
        type=Path,
        metavar="DIR",
        help="with --readme: also the methods of this run's summary that DIR's lacks",
    )
    ap.add_argument("--also-label", default="", help="what names --also's rows, e.g. its date")
    args = ap.parse_args()
    summary = json.loads((args.dir / "summary.json").read_text())
    if args.readme:
        also = json.loads((args.also / "summary.json").read_text()) if args.also else None
        ladder_summary = json.loads((args.readme / "summary.json").read_text())
        print(overview(summary, ladder_summary, also, args.also_label))
        return
    if set(LADDER_ROWS) <= set(summary["pooled"]):
        print(ladder(summary))
        return
    print(absolute(summary), end="\n\n")
    print(deltas(summary))
    vb = versus_before(summary)
    if vb:
        print()
        print(vb)


if __name__ == "__main__":
    main()
