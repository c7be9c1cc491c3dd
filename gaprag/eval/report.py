"""Summaries of evaluation runs: ``summary.json``, ``summary.md``, PNG plots and ``report.html``.

Per dataset and method: n, EM/F1/Acc, support recall (gold paragraphs shown in a prompt) and
retrieval recall (gold paragraphs any retrieval returned), and multiple-choice accuracy where
the set has options, with 95% percentile-bootstrap intervals (seeded); the cost means (LLM
calls, prompt tokens split into instructions / passages / other, prompt-cache reuse,
completion tokens, retrievals, passages shown and retrieved, seconds per question); the
method's retrieval mode and passages per prompt; how each loop decision was taken (per node:
counts per decision, mean ``p``, defaults); the paired difference to ``standard_rag`` on the
questions both answered, stop reasons and the miss rate where a method reports ``missing``.

Rules: a failed question (``error`` set) is left out of the metric means and counted under
``errors``; when a (dataset, method, id) appears more than once (a retried failure, or the
same method in several directories) the last successful row wins. Rows written before the two
recalls existed (no ``retrieval_recall`` field) counted every retrieved id as "support": their
value is reported as retrieval recall and their support recall is unknown.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gaprag.errors import InputError
from gaprag.eval.runner import RESULTS, RUN_FILE, read_results, resolved_settings

BASELINE = "standard_rag"
METRICS: tuple[str, ...] = (
    "em",
    "f1",
    "acc",
    "support_recall",
    "retrieval_recall",
    "choice_correct",
)
COSTS: tuple[str, ...] = (
    "llm_calls",
    "prompt_tokens",
    "completion_tokens",
    "tokens",
    "retrieval_calls",
    "iterations",
    "wall_s",
)
# means over the rows that report them (older rows and other graphs may not)
OPTIONAL_COSTS: tuple[str, ...] = (
    "instruction_tokens",
    "passage_tokens",
    "other_tokens",
    "cached_tokens",
    "short_answer_calls",
    "shown_passages",
    "retrieved_passages",
)
LABELS = {
    "em": "EM",
    "f1": "F1",
    "acc": "Acc",
    "support_recall": "Support recall",
    "retrieval_recall": "Retrieval recall",
    "choice_correct": "MC acc",
}
N_BOOT = 2000


# -- statistics ----------------------------------------------------------------------------
def bootstrap_ci(
    values: Sequence[float], *, seed: int = 0, n_boot: int = N_BOOT, level: float = 0.95
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean; ``None`` for no values."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return None
    if data.size == 1 or np.all(data == data[0]):
        return float(data[0]), float(data[0])
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, data.size, size=(n_boot, data.size))
    means = data[idx].mean(axis=1)
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return float(lo), float(hi)


def _stat(values: Sequence[float], seed: int, n_boot: int) -> dict[str, Any]:
    ci = bootstrap_ci(values, seed=seed, n_boot=n_boot)
    return {
        "mean": float(np.mean(values)) if values else None,
        "ci": list(ci) if ci else None,
        "n": len(values),
    }


# -- rows ----------------------------------------------------------------------------------
def dedupe(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per (dataset, method, id): the last successful one, else the last one."""
    keep: dict[tuple[Any, Any, Any], dict[str, Any]] = {}
    for row in rows:
        key = (row.get("dataset"), row.get("method"), row.get("id"))
        old = keep.get(key)
        if old is not None and not old.get("error") and row.get("error"):
            continue
        keep[key] = dict(row)
    return list(keep.values())


def _num(row: Mapping[str, Any], key: str) -> float:
    if key == "tokens":
        return float(row.get("prompt_tokens") or 0) + float(row.get("completion_tokens") or 0)
    value = row.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def normalize_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row in the current format: an older row's ``support_recall`` (every retrieved id)
    becomes its ``retrieval_recall``, and its support recall is unknown."""
    out = dict(row)
    if "retrieval_recall" not in out:
        out["retrieval_recall"] = out.get("support_recall")
        out["support_recall"] = None
        out["legacy_recall"] = True
    return out


def _optional(row: Mapping[str, Any], key: str) -> float | None:
    if key == "other_tokens":
        instr, passages = row.get("instruction_tokens"), row.get("passage_tokens")
        if not isinstance(instr, int | float) or not isinstance(passages, int | float):
            return None
        return max(0.0, _num(row, "prompt_tokens") - float(instr) - float(passages))
    if key in ("shown_passages", "retrieved_passages"):
        ids = row.get("shown_ids" if key == "shown_passages" else "retrieved_ids")
        return float(len(ids)) if isinstance(ids, list) else None
    value = row.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _optional_mean(rows: Sequence[Mapping[str, Any]], key: str) -> float | None:
    vals = [v for v in (_optional(r, key) for r in rows) if v is not None]
    return float(np.mean(vals)) if vals else None


def decision_stats(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Per node: how many decisions, how often each was taken, mean ``p``, paths, defaults."""
    nodes: dict[str, dict[str, Any]] = {}
    for row in rows:
        for d in row.get("decisions") or []:
            if not isinstance(d, Mapping):
                continue
            node = str(d.get("node") or "?")
            e = nodes.setdefault(
                node, {"n": 0, "decisions": Counter(), "paths": Counter(), "p": []}
            )
            e["n"] += 1
            e["decisions"][str(d.get("decision"))] += 1
            e["paths"][str(d.get("path") or "?")] += 1
            p = d.get("p")
            if isinstance(p, int | float) and not isinstance(p, bool):
                e["p"].append(float(p))
    out: dict[str, Any] = {}
    for node, e in nodes.items():
        ps = e["p"]
        out[node] = {
            "n": e["n"],
            "decisions": dict(e["decisions"].most_common()),
            "mean_p": float(np.mean(ps)) if ps else None,
            "with_p": len(ps),
            "paths": dict(e["paths"].most_common()),
            "default": int(e["paths"].get("default", 0)),
            "default_rate": e["paths"].get("default", 0) / e["n"] if e["n"] else None,
        }
    return out


def method_settings(
    method: str, runs: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The method key's method, retrieval mode, passages per prompt and options, from the
    run files (or, for runs that did not record them, the current defaults plus options)."""
    base = method
    options: dict[str, Any] = {}
    settings: dict[str, Any] | None = None
    for run in runs:
        if method in (run.get("settings") or {}):
            settings = dict(run["settings"][method])
        base = (run.get("variants") or {}).get(method, base)
        if method in (run.get("methods") or {}):
            options = dict(run["methods"][method])
    for row in rows:
        if row.get("base_method"):
            base = str(row["base_method"])
        if isinstance(row.get("options"), dict) and not options:
            options = dict(row["options"])
    recorded = settings is not None
    if settings is None:
        settings = resolved_settings(base, options)
    passages = next(
        (settings[k] for k in ("passages_per_prompt", "top_k") if settings.get(k) is not None),
        None,
    )
    return {
        "method": base,
        "retrieval_mode": settings.get("retrieval_mode"),
        "passages_per_prompt": passages,
        "options": options,
        "recorded": recorded,
    }


def _missing(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value > 0
    return bool(value)


def summarize(
    rows: Iterable[Mapping[str, Any]],
    *,
    seed: int = 0,
    n_boot: int = N_BOOT,
    baseline: str = BASELINE,
    runs: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The summary structure written to ``summary.json`` (``runs``: the runs' ``run.json``)."""
    normalized = [normalize_row(r) for r in dedupe(rows)]
    by_dataset: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in normalized:
        by_dataset[str(row.get("dataset"))].append(row)
    datasets: dict[str, Any] = {}
    for name, ds_rows in by_dataset.items():
        order = list(dict.fromkeys(str(r.get("method")) for r in ds_rows))
        if baseline in order:
            order.remove(baseline)
            order.insert(0, baseline)
        per: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in ds_rows:
            per[str(r.get("method"))].append(r)
        has_mc = any(r.get("choice_correct") is not None for r in ds_rows)
        primary = "choice_correct" if has_mc else "f1"
        methods: dict[str, Any] = {}
        for m in order:
            ok = [r for r in per[m] if not r.get("error")]
            entry: dict[str, Any] = {"n": len(ok), "errors": len(per[m]) - len(ok)}
            for key in METRICS:
                vals = [float(r[key]) for r in ok if isinstance(r.get(key), int | float)]
                if vals or key != "choice_correct":
                    entry[key] = _stat(vals, seed, n_boot)
            entry["cost"] = {
                key: (float(np.mean([_num(r, key) for r in ok])) if ok else None) for key in COSTS
            }
            entry["cost"].update({key: _optional_mean(ok, key) for key in OPTIONAL_COSTS})
            cached, prompt = entry["cost"]["cached_tokens"], entry["cost"]["prompt_tokens"]
            entry["cost"]["cache_share"] = (
                cached / prompt if cached is not None and prompt else None
            )
            ds_runs = [r for r in runs if r.get("dataset") in (None, name)]
            entry["settings"] = method_settings(m, ds_runs, per[m])
            entry["decisions"] = decision_stats(ok)
            entry["legacy_recall"] = any(r.get("legacy_recall") for r in per[m])
            entry["stop_reasons"] = dict(Counter(str(r.get("stop_reason") or "") for r in per[m]))
            flagged = [r for r in ok if "missing" in r]
            entry["miss_rate"] = (
                sum(_missing(r["missing"]) for r in flagged) / len(flagged) if flagged else None
            )
            by_iter: dict[int, list[float]] = defaultdict(list)
            for r in ok:
                if isinstance(r.get(primary), int | float):
                    by_iter[int(r.get("iterations") or 0)].append(float(r[primary]))
            entry["by_iterations"] = {
                str(k): {"n": len(v), "mean": float(np.mean(v))} for k, v in sorted(by_iter.items())
            }
            if m != baseline and baseline in per:
                entry["vs_baseline"] = _paired(per[baseline], per[m], seed, n_boot)
            methods[m] = entry
        scored = {
            m: e[primary]["mean"]
            for m, e in methods.items()
            if e.get(primary, {}).get("mean") is not None
        }
        datasets[name] = {
            "questions": len({r.get("id") for r in ds_rows}),
            "primary": primary,
            "baseline": baseline if baseline in per else None,
            "best": max(scored, key=lambda k: scored[k]) if scored else None,
            "methods": methods,
        }
    return {
        "generated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "bootstrap": {"resamples": n_boot, "level": 0.95, "seed": seed, "kind": "percentile"},
        "baseline": baseline,
        "datasets": datasets,
        "pooled": pooled(normalized, baseline=baseline, seed=seed, n_boot=n_boot),
        "serving": {
            str(r.get("dataset")): r["serving"] for r in runs if isinstance(r.get("serving"), dict)
        },
    }


POOLED_METRICS: tuple[str, ...] = ("em", "f1", "acc", "support_recall", "retrieval_recall")
POOLED_COSTS: tuple[str, ...] = ("llm_calls", "tokens", "wall_s")
PAIRED_MEANS: tuple[str, ...] = ("f1", "llm_calls", "tokens", "wall_s")


def _pooled_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The F1-scored rows (multiple-choice sets left out), each id made ``dataset/id`` so that
    questions pair across a pooled table only with themselves."""
    return [
        {**r, "id": f"{r.get('dataset')}/{r.get('id')}"}
        for r in rows
        if r.get("choice_correct") is None
    ]


def pooled(
    rows: Sequence[Mapping[str, Any]], *, baseline: str = BASELINE, seed: int = 0,
    n_boot: int = N_BOOT,
) -> dict[str, Any]:  # fmt: skip
    """Every method over all the datasets of a report that are scored by F1 (multiple-choice
    sets are left out): each question weighs the same, the paired difference to ``baseline``
    is taken per (dataset, question), and the cost is the mean per question. Empty when the
    rows come from fewer than two datasets."""
    scored = _pooled_rows(rows)
    if len({r.get("dataset") for r in scored}) < 2:
        return {}
    per: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in scored:
        per[str(r.get("method"))].append(r)
    order = [baseline] * (baseline in per) + [m for m in per if m != baseline]
    out: dict[str, Any] = {}
    for m in order:
        ok = [r for r in per[m] if not r.get("error")]
        entry: dict[str, Any] = {
            "n": len(ok),
            "errors": len(per[m]) - len(ok),
            "datasets": sorted({str(r.get("dataset")) for r in ok}),
        }
        for key in POOLED_METRICS:
            entry[key] = _stat([float(r[key]) for r in ok if isinstance(r.get(key), int | float)],
                               seed, n_boot)  # fmt: skip
        entry["cost"] = {
            key: (float(np.mean([_num(r, key) for r in ok])) if ok else None)
            for key in POOLED_COSTS
        }
        if m != baseline and baseline in per:
            entry["vs_baseline"] = _paired(per[baseline], per[m], seed, n_boot)
        out[m] = entry
    return out


def versus_before(
    before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]], *, seed: int = 0,
    n_boot: int = N_BOOT,
) -> dict[str, Any]:  # fmt: skip
    """Each method of ``after`` against the same method in ``before`` (another code version
    on the same questions): per dataset and pooled, the paired difference after − before on
    the questions both answered, each side's mean F1 and LLM calls on those questions."""
    old = [normalize_row(r) for r in dedupe(before)]
    new = [normalize_row(r) for r in dedupe(after)]

    def table(b_rows: list[dict[str, Any]], a_rows: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for m in dict.fromkeys(str(r.get("method")) for r in a_rows):
            b = [r for r in b_rows if r.get("method") == m]
            a = [r for r in a_rows if r.get("method") == m]
            if not b:
                continue
            entry = _paired(b, a, seed, n_boot)
            means = entry.pop("means")
            entry["before"], entry["after"] = means["base"], means["other"]
            out[m] = entry
        return out

    datasets = {
        str(ds): table(
            [r for r in old if r.get("dataset") == ds], [r for r in new if r.get("dataset") == ds]
        )
        for ds in dict.fromkeys(r.get("dataset") for r in new)
    }
    pooled_table = table(_pooled_rows(old), _pooled_rows(new)) if len(datasets) > 1 else {}
    return {"datasets": datasets, "pooled": pooled_table}


def _paired(
    base: Sequence[Mapping[str, Any]], other: Sequence[Mapping[str, Any]], seed: int, n_boot: int
) -> dict[str, Any]:
    """``other - base`` per metric, on the questions both answered without error."""
    b = {r.get("id"): r for r in base if not r.get("error")}
    o = {r.get("id"): r for r in other if not r.get("error")}
    common = [i for i in o if i in b]
    out: dict[str, Any] = {"n": len(common)}
    for key in METRICS:
        diffs = [
            float(o[i][key]) - float(b[i][key])
            for i in common
            if isinstance(o[i].get(key), int | float) and isinstance(b[i].get(key), int | float)
        ]
        if not diffs:
            continue
        stat = _stat(diffs, seed, n_boot)
        stat["wins"] = sum(d > 0 for d in diffs)
        stat["losses"] = sum(d < 0 for d in diffs)
        stat["ties"] = sum(d == 0 for d in diffs)
        out[key] = stat
    # each side's means on the shared questions, and the cost of ``other`` relative to ``base``
    means = {
        side: {key: (float(np.mean([_num(rs[i], key) for i in common])) if common else None)
               for key in PAIRED_MEANS}
        for side, rs in (("base", b), ("other", o))
    }  # fmt: skip
    out["means"] = means
    ratio: dict[str, float | None] = {}
    for key in ("tokens", "llm_calls", "wall_s"):
        bm, om = means["base"][key], means["other"][key]
        ratio[key] = om / bm if bm and om is not None else None
    out["cost_ratio"] = ratio
    return out


# -- rendering -----------------------------------------------------------------------------
def _fmt(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _cell(stat: Mapping[str, Any] | None, signed: bool = False) -> str:
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
    text = f"**Best {label}: `{best}` {_cell(entry[primary])}**"
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


def _calls(cost: Mapping[str, Any]) -> str:
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
        "per question.",
        "",
        f"| method | n | EM | F1 | Acc | Support recall | Retrieval recall | ΔF1 vs {base} "
        "| wins / losses | LLM calls | tokens | s/question | errors |",
        "|---|" + "---:|" * 12,
    ]
    for m, e in table.items():
        vs = e.get("vs_baseline") or {}
        d = vs.get("f1")
        cells = [m, str(e["n"])] + [_cell(e.get(k)) for k in POOLED_METRICS]
        cells.append(_cell(d, signed=True) if d else "–")
        cells.append(f"{d['wins']} / {d['losses']}" if d else "–")
        c = e["cost"]
        cells += [_fmt(c["llm_calls"], 2), _fmt(c["tokens"], 0), _fmt(c["wall_s"], 1)]
        cells.append(str(e["errors"]))
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


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
                f"{_cell(d, signed=True) if d else '–'} | "
                f"{record} | "
                f"{_fmt(b['llm_calls'], 2)} → {_fmt(a['llm_calls'], 2)} | "
                f"{_fmt(b['wall_s'], 1)} → {_fmt(a['wall_s'], 1)} |"
            )
    return [*lines, ""]


def render_markdown(
    summary: Mapping[str, Any], runs: Sequence[Mapping[str, Any]], plots: Mapping[str, list[str]]
) -> str:
    boot = summary["bootstrap"]
    lines = ["# gaprag evaluation summary", ""]
    lines.append(
        f"Means with 95% percentile-bootstrap intervals ({boot['resamples']} resamples, seed {boot['seed']}). "
        "Failed questions are left out of the means and counted under *errors*; "
        f"Δ columns are paired differences to `{summary['baseline']}` on the questions both answered. "
        "*Support recall*: share of the gold supporting paragraphs shown in at least one LLM "
        "prompt; *retrieval recall*: share that any retrieval returned."
    )
    lines.append("")
    if runs:
        lines += ["## Protocol", ""]
        for run in runs:
            corpus = run.get("corpus") or {}
            sel = f"first {run.get('selected')} questions" + (
                f" from offset {run['offset']}" if run.get("offset") else ""
            )
            variants = run.get("variants") or {}
            # a method run.json lists but no row has (a resumed run's earlier method list)
            # is left out: the protocol names what the tables show
            shown = (summary["datasets"].get(str(run.get("dataset"))) or {}).get("methods")
            listed = {
                m: o for m, o in (run.get("methods") or {}).items() if not shown or m in shown
            }
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
        lines.append("")
    lines += _pooled_markdown(summary)
    lines += _versus_before_markdown(summary)
    for name, ds in summary["datasets"].items():
        primary = ds["primary"]
        lines += [f"## {name} ({ds['questions']} questions)", "", _verdict(name, ds), ""]
        metric_keys = ["em", "f1", "acc", "support_recall", "retrieval_recall"] + (
            ["choice_correct"] if primary == "choice_correct" else []
        )
        head = ["method", "n"] + [LABELS[k] for k in metric_keys]
        head += [f"Δ{LABELS[primary]} vs {ds['baseline'] or BASELINE}", "errors"]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
        for m, e in ds["methods"].items():
            name_cell = f"**{m}**" if m == ds["best"] else m
            cells = [name_cell, str(e["n"])] + [_cell(e.get(k)) for k in metric_keys]
            vs = e.get("vs_baseline")
            cells.append(_cell(vs.get(primary), signed=True) if vs else "–")
            cells.append(str(e["errors"]))
            lines.append("| " + " | ".join(cells) + " |")
        if any(e.get("legacy_recall") for e in ds["methods"].values()):
            lines += [
                "",
                "Rows written before the two recalls existed: their recall counted every "
                "retrieved id, so it is shown as retrieval recall and support recall is unknown.",
            ]
        lines += ["", "Cost per question and settings:", ""]
        head = [
            "method", "retrieval", "passages/prompt", "LLM calls", "prompt tok",
            "instructions / passages / other", "cached", "completion tok", "retrievals",
            "shown", "retrieved", "iterations", "s/question",
        ]  # fmt: skip
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "|".join(["---"] * 3 + ["---:"] * (len(head) - 3)) + "|")
        for m, e in ds["methods"].items():
            c, st = e["cost"], e.get("settings") or {}
            method_cell = m if st.get("method") in (None, m) else f"{m} (`{st['method']}`)"
            cells = [
                method_cell,
                _fmt(st.get("retrieval_mode")),
                _fmt(st.get("passages_per_prompt")),
                _calls(c),
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
        lines.append("")
        for plot in plots.get(name, []):
            lines.append(f"![{Path(plot).stem}]({plot})")
        lines.append("")
    return "\n".join(lines)


def plot(summary: Mapping[str, Any], out: Path) -> dict[str, list[str]]:
    """Per dataset: primary metric vs tokens per question, and by iteration count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made: dict[str, list[str]] = {}
    (out / "plots").mkdir(parents=True, exist_ok=True)
    for name, ds in summary["datasets"].items():
        primary, label = ds["primary"], LABELS[ds["primary"]]
        files: list[str] = []
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        for m, e in ds["methods"].items():
            stat, tokens = e.get(primary) or {}, e["cost"]["tokens"]
            if stat.get("mean") is None or tokens is None:
                continue
            lo, hi = stat["ci"]
            ax.errorbar(
                [tokens], [stat["mean"]], yerr=[[stat["mean"] - lo], [hi - stat["mean"]]],
                fmt="o", capsize=4, label=m,
            )  # fmt: skip
            ax.annotate(
                m, (tokens, stat["mean"]), textcoords="offset points", xytext=(6, 4), fontsize=8
            )
        if any(e["cost"]["tokens"] for e in ds["methods"].values()):
            ax.set_xscale("log")
        ax.set_xlabel("tokens per question (prompt + completion, log)")
        ax.set_ylabel(f"{label} (95% CI)")
        ax.set_title(f"{name}: {label} vs cost")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        fig.tight_layout()
        path = f"plots/{name}_{primary}_vs_tokens.png"
        fig.savefig(out / path, dpi=110)
        plt.close(fig)
        files.append(path)

        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        for m, e in ds["methods"].items():
            its = e["by_iterations"]
            if not its:
                continue
            xs = [int(k) for k in its]
            ax.plot(xs, [its[k]["mean"] for k in its], marker="o", label=m)
            for x, k in zip(xs, its, strict=True):
                ax.annotate(
                    f"n={its[k]['n']}",
                    (x, its[k]["mean"]),
                    textcoords="offset points",
                    xytext=(4, -10),
                    fontsize=7,
                )
        ax.set_xlabel("retrieval rounds (iterations)")
        ax.set_ylabel(f"mean {label}")
        ax.set_title(f"{name}: {label} by iteration count")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        fig.tight_layout()
        path = f"plots/{name}_{primary}_by_iterations.png"
        fig.savefig(out / path, dpi=110)
        plt.close(fig)
        files.append(path)
        made[name] = files
    return made


def _require_results(path: Path, hint: str) -> None:
    if not (path / RESULTS).is_file():
        raise InputError(f"no {RESULTS} in {path}", hint=hint)


def write_report(
    dirs: Sequence[str | Path],
    out: str | Path | None = None,
    *,
    seed: int = 0,
    n_boot: int = N_BOOT,
    plots: bool = True,
    html: bool = True,
    before: Sequence[str | Path] = (),
) -> dict[str, Any]:
    """Read ``results.jsonl`` of each dir; write ``summary.json``, ``summary.md``, plots and
    ``report.html`` (see :mod:`gaprag.eval.html`) to ``out``. ``before``: directories of an
    earlier run of the same questions (another code version), compared method by method."""
    for d in before:
        _require_results(Path(d), "--before takes `gaprag eval` directories")
    rows: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    for d in dirs:
        path = Path(d)
        _require_results(path, "give directories written by `gaprag eval`")
        rows += read_results(path)
        if (path / RUN_FILE).is_file():
            with contextlib.suppress(ValueError):
                runs.append(json.loads((path / RUN_FILE).read_text(encoding="utf-8")))
    if not rows:
        raise InputError("no results to report", hint="run `gaprag eval` first")
    target = Path(out) if out is not None else Path(dirs[0])
    target.mkdir(parents=True, exist_ok=True)
    summary = summarize(rows, seed=seed, n_boot=n_boot, runs=runs)
    summary["runs"] = runs
    if before:
        old_rows = [r for d in before for r in read_results(Path(d))]
        summary["versus_before"] = {
            # relative to the report, so a committed summary names no machine path
            "dirs": [os.path.relpath(Path(d).resolve(), target.resolve()) for d in before],
            **versus_before(old_rows, rows, seed=seed, n_boot=n_boot),
        }
    made = plot(summary, target) if plots else {}
    summary["plots"] = made
    tmp = target / ".summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2, ensure_ascii=False), encoding="utf-8")
    tmp.replace(target / "summary.json")
    (target / "summary.md").write_text(render_markdown(summary, runs, made), encoding="utf-8")
    if html:
        from gaprag.eval.html import write_html

        rows = [normalize_row(r) for r in dedupe(rows)]
        write_html(summary, rows, [Path(d) for d in dirs], target, made)
    return summary
