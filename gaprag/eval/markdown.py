"""``summary.md``: the summary of evaluation runs as Markdown tables."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gaprag.eval.stats import (
    BASELINE,
    HEADROOM_NOTE,
    LABELS,
    POOLED_METRICS,
    headroom_cells,
    unbeaten_on,
)


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def stat_cell(stat: Mapping[str, Any] | None, signed: bool = False) -> str:
    """A mean with its interval, ``0.412 [0.340, 0.486]`` (signed: ``+0.030 [−…]``)."""
    if not stat or stat.get("mean") is None:
        return "–"
    mean, ci = stat["mean"], stat.get("ci")
    text = f"{mean:+.3f}" if signed else f"{mean:.3f}"
    if ci:
        text += f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if signed else f" [{ci[0]:.3f}, {ci[1]:.3f}]"
    return text


def _verdict(name: str, ds: Mapping[str, Any]) -> str:
    primary, best, base = ds["primary"], ds["best"], ds["baseline"]
    label = LABELS[primary]
    if best is None:
        return "No scored questions."
    entry = ds["methods"][best]
    text = f"**Best {label}: `{best}` {stat_cell(entry[primary])}**"
    vs = entry.get("vs_baseline")
    if vs and primary in vs:
        d = vs[primary]
        significant = d["ci"] and (d["ci"][0] > 0 or d["ci"][1] < 0)
        ratio = vs["cost_ratio"].get("tokens")
        text += (
            f", {d['mean']:+.3f} {label} over `{base}` (95% CI {d['ci'][0]:+.3f} to {d['ci'][1]:+.3f}, "
            f"{'significant' if significant else 'not significant'}; {d['wins']} wins / {d['losses']} losses "
            f"on {vs['n']} shared questions)"
        )
        if ratio:
            text += f" at {ratio:.1f}× the tokens"
    elif best == base:
        text += " (the baseline)"
    return text + "."


def calls_cell(cost: Mapping[str, Any]) -> str:
    """LLM calls per question, with the short-answer step's share where there is one."""
    text = _fmt(cost["llm_calls"], 2)
    extra = cost.get("short_answer_calls")
    return f"{text} ({_fmt(extra, 2)} short-answer)" if extra else text


def _split(c: Mapping[str, Any]) -> str:
    parts = [c.get("instruction_tokens"), c.get("passage_tokens"), c.get("other_tokens")]
    if any(p is None for p in parts):
        return "–"
    return " / ".join(_fmt(p, 0) for p in parts)


def _decision_cell(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items())


def _pooled_markdown(summary: Mapping[str, Any]) -> list[str]:
    table = summary.get("pooled") or {}
    if not table:
        return []
    sets = sorted({d for e in table.values() for d in e["datasets"]})
    base = summary["baseline"]
    lines = [
        f"## Pooled over {len(sets)} datasets ({', '.join(sets)})",
        "",
        "Every question weighs the same; Δ is paired per (dataset, question); costs are means "
        "per question. *Unbeaten on*: the costs at which no other configuration has an F1 at "
        "least as high for no more of that cost (one of the two strictly).",
        "",
        f"| method | n | EM | F1 | Acc | Support recall | Retrieval recall | ΔF1 vs {base} "
        "| wins / losses | oracle F1 | captured | LLM calls | tokens | s/question | unbeaten on "
        "| errors |",
        "|---|" + "---:|" * 15,
    ]
    front = summary.get("pooled_frontier") or {}
    for m, e in table.items():
        vs = e.get("vs_baseline") or {}
        d = vs.get("f1")
        cells = [m, str(e["n"])] + [stat_cell(e.get(k)) for k in POOLED_METRICS]
        cells.append(stat_cell(d, signed=True) if d else "–")
        cells.append(f"{d['wins']} / {d['losses']}" if d else "–")
        cells += headroom_cells(e)
        c = e["cost"]
        cells += [_fmt(c["llm_calls"], 2), _fmt(c["tokens"], 0), _fmt(c["wall_s"], 1)]
        cells += [unbeaten_on(m, front), str(e["errors"])]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def _pooled_plots(plots: Mapping[str, list[str]]) -> list[str]:
    return [*(f"![{Path(p).stem}]({p})" for p in plots.get("pooled", [])), ""]


def _versus_before_markdown(summary: Mapping[str, Any]) -> list[str]:
    vb = summary.get("versus_before") or {}
    groups = [("pooled", vb.get("pooled") or {}), *(vb.get("datasets") or {}).items()]
    groups = [(g, t) for g, t in groups if t]
    if not groups:
        return []
    lines = [
        "## Against the before run",
        "",
        "The same method on the same questions, before (`--before` directories) and after: "
        "means on the questions both runs answered, Δ = after − before, paired per question.",
        "",
        "| method | set | n | F1 before | F1 after | ΔF1 [95% CI] | wins / losses "
        "| LLM calls before → after | s/question before → after |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for group, table in groups:
        for m, e in table.items():
            d = e.get("f1")
            b, a = e["before"], e["after"]
            record = f"{d['wins']} / {d['losses']}" if d else "–"
            lines.append(
                f"| {m} | {group} | {e['n']} | {_fmt(b['f1'])} | {_fmt(a['f1'])} | "
                f"{stat_cell(d, signed=True) if d else '–'} | "
                f"{record} | "
                f"{_fmt(b['llm_calls'], 2)} → {_fmt(a['llm_calls'], 2)} | "
                f"{_fmt(b['wall_s'], 1)} → {_fmt(a['wall_s'], 1)} |"
            )
    return [*lines, ""]


def _protocol(summary: Mapping[str, Any], runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The protocol of each run: questions, file, corpus, model, methods, serving."""
    lines = ["## Protocol", ""]
    for run in runs:
        corpus = run.get("corpus") or {}
        sel = f"first {run.get('selected')} questions" + (
            f" from offset {run['offset']}" if run.get("offset") else ""
        )
        variants = run.get("variants") or {}
        # a method run.json lists but no row has (a resumed run's earlier method list)
        # is left out: the protocol names what the tables show
        shown = (summary["datasets"].get(str(run.get("dataset"))) or {}).get("methods")
        listed = {m: o for m, o in (run.get("methods") or {}).items() if not shown or m in shown}
        opts = "; ".join(
            f"`{m}`"
            + (f" = `{variants[m]}`" if m in variants else "")
            + (f" ({', '.join(f'{k}={v}' for k, v in o.items())})" if o else "")
            for m, o in listed.items()
        )
        lines.append(
            f"- **{run.get('dataset')}**: {sel} of {run.get('questions_in_file')} in "
            f"`{Path(str(run.get('dataset_path', ''))).name}` (sha256 {str(run.get('dataset_sha256', ''))[:12]}); "
            f"corpus {corpus.get('documents')} paragraphs (union of the file's paragraphs, "
            f"{corpus.get('embedder')} + {corpus.get('bm25')}); model `{run.get('model')}`; methods {opts}."
        )
        serving = run.get("serving")
        if isinstance(serving, dict) and serving:
            text = ", ".join(f"{k}={v}" for k, v in serving.items() if v not in (None, ""))
            lines.append(f"  Serving: {text}.")
    return [*lines, ""]


def _metrics_table(ds: Mapping[str, Any]) -> list[str]:
    """A set's metrics per method, with ΔF1 to the baseline, headroom and errors."""
    primary = ds["primary"]
    metric_keys = ["em", "f1", "acc", "support_recall", "retrieval_recall"] + (
        ["choice_correct"] if primary == "choice_correct" else []
    )
    head = ["method", "n"] + [LABELS[k] for k in metric_keys]
    head += [f"Δ{LABELS[primary]} vs {ds['baseline'] or BASELINE}", "oracle F1", "captured"]
    head += ["unbeaten on", "errors"]
    lines = ["| " + " | ".join(head) + " |"]
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
    for m, e in ds["methods"].items():
        name_cell = f"**{m}**" if m == ds["best"] else m
        cells = [name_cell, str(e["n"])] + [stat_cell(e.get(k)) for k in metric_keys]
        vs = e.get("vs_baseline")
        cells.append(stat_cell(vs.get(primary), signed=True) if vs else "–")
        cells += headroom_cells(e)
        cells += [unbeaten_on(m, ds.get("frontier") or {}), str(e["errors"])]
        lines.append("| " + " | ".join(cells) + " |")
    if any(e.get("legacy_recall") for e in ds["methods"].values()):
        lines += [
            "",
            "Rows written before the two recalls existed: their recall counted every "
            "retrieved id, so it is shown as retrieval recall and support recall is unknown.",
        ]
    return lines


def _cost_table(ds: Mapping[str, Any]) -> list[str]:
    """A set's cost per question and the settings that shape it, per method."""
    head = [
        "method", "retrieval", "passages/prompt", "LLM calls", "prompt tok",
        "instructions / passages / other", "cached", "completion tok", "retrievals",
        "shown", "retrieved", "iterations", "s/question",
    ]  # fmt: skip
    lines = ["", "Cost per question and settings:", ""]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join(["---"] * 3 + ["---:"] * (len(head) - 3)) + "|")
    for m, e in ds["methods"].items():
        c, st = e["cost"], e.get("settings") or {}
        method_cell = m if st.get("method") in (None, m) else f"{m} (`{st['method']}`)"
        cells = [
            method_cell,
            _fmt(st.get("retrieval_mode")),
            _fmt(st.get("passages_per_prompt")),
            calls_cell(c),
            _fmt(c["prompt_tokens"], 0),
            _split(c),
            _fmt(c.get("cached_tokens"), 0),
            _fmt(c["completion_tokens"], 0),
            _fmt(c["retrieval_calls"], 2),
            _fmt(c.get("shown_passages"), 1),
            _fmt(c.get("retrieved_passages"), 1),
            _fmt(c["iterations"], 2),
            _fmt(c["wall_s"], 2),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _decisions_and_stops(ds: Mapping[str, Any]) -> list[str]:
    """A set's loop decisions per method and node, and its stop reasons."""
    lines: list[str] = []
    decided = [(m, e) for m, e in ds["methods"].items() if e.get("decisions")]
    if decided:
        lines += ["", "Loop decisions (per method and node):", ""]
        lines.append("| method | node | n | taken | mean p (n with p) | paths | default |")
        lines.append("|---|---|---:|---|---:|---|---:|")
        for m, e in decided:
            for node, d in e["decisions"].items():
                mean_p = f"{_fmt(d['mean_p'], 3)} ({d['with_p']})"
                lines.append(
                    f"| {m} | {node} | {d['n']} | {_decision_cell(d['decisions'])} | "
                    f"{mean_p} | {_decision_cell(d['paths'])} | {d['default']} |"
                )
    lines += ["", "Stop reasons:", ""]
    for m, e in ds["methods"].items():
        reasons = ", ".join(
            f"{k} {v}" for k, v in sorted(e["stop_reasons"].items(), key=lambda kv: -kv[1])
        )
        extra = f"; miss rate {e['miss_rate']:.3f}" if e.get("miss_rate") is not None else ""
        lines.append(f"- `{m}`: {reasons}{extra}")
    return lines


def render_markdown(
    summary: Mapping[str, Any], runs: Sequence[Mapping[str, Any]], plots: Mapping[str, list[str]]
) -> str:
    """summary.md: the protocol, the pooled tables, then each set's tables and plots."""
    boot = summary["bootstrap"]
    lines = ["# gaprag evaluation summary", ""]
    lines.append(
        f"Means with 95% percentile-bootstrap intervals ({boot['resamples']} resamples, seed {boot['seed']}). "
        "Failed questions are left out of the means and counted under *errors*; "
        f"Δ columns are paired differences to `{summary['baseline']}` on the questions both answered. "
        "*Support recall*: share of the gold supporting paragraphs shown in at least one LLM "
        "prompt; *retrieval recall*: share that any retrieval returned. " + HEADROOM_NOTE
    )
    lines.append("")
    if runs:
        lines += _protocol(summary, runs)
    lines += _pooled_markdown(summary)
    if summary.get("pooled"):
        lines += _pooled_plots(plots)
    lines += _versus_before_markdown(summary)
    for name, ds in summary["datasets"].items():
        lines += [f"## {name} ({ds['questions']} questions)", "", _verdict(name, ds), ""]
        lines += _metrics_table(ds) + _cost_table(ds) + _decisions_and_stops(ds)
        lines.append("")
        for plot in plots.get(name, []):
            lines.append(f"![{Path(plot).stem}]({plot})")
        lines.append("")
    return "\n".join(lines)
