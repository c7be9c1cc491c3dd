"""The statistics of evaluation runs (``summary.json``): means with bootstrap intervals, costs,
decisions, paired differences, pooled and before/after comparisons.

Per dataset and method: n, EM/F1/Acc, support recall (gold paragraphs shown in a prompt) and
retrieval recall (gold paragraphs any retrieval returned), and multiple-choice accuracy where
the set has options, with 95% percentile-bootstrap intervals (seeded); the cost means (LLM
calls, prompt tokens split into instructions / passages / other, prompt-cache reuse,
completion tokens, retrievals, passages shown and retrieved, seconds per question); the
method's retrieval mode and passages per prompt; how each loop decision was taken (per node:
counts per decision, mean ``p``, defaults); the paired difference to ``standard_rag`` on the
questions both answered, stop reasons and the miss rate where a method reports ``missing``.

The headroom of a configuration (``headroom``, per dataset and pooled): on the questions it
and ``standard_rag`` both answered, the per-question oracle over its candidates (plain RAG's
answer, the method's answer, and plain RAG's answer as the method's gate gave it, recorded in
its ``gate`` decision), and the share of the oracle's gain over plain RAG the method captured.

Rules: a failed question (``error`` set) is left out of the metric means and counted under
``errors``; when a (dataset, method, id) appears more than once (a retried failure, or the
same method in several directories) the last successful row wins. Rows written before the two
recalls existed (no ``retrieval_recall`` field) counted every retrieved id as "support": their
value is reported as retrieval recall and their support recall is unknown.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from gaprag.eval.planning import resolved_settings
from gaprag.eval.record import current_settings
from gaprag.eval.results import normalize_row
from gaprag.metrics import f1_score
from gaprag.nodes.gate import read_gate

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


#: the costs a quality-per-cost comparison puts on its x axis, each with a bootstrap interval
FRONTIER_COSTS: tuple[str, ...] = ("llm_calls", "wall_s")


def pareto_front(points: Mapping[str, tuple[float, float]]) -> list[str]:
    """The names no other point beats on both: ``(quality, cost)`` pairs, higher quality and
    lower cost better; a point is beaten by one with quality at least as high at no more cost,
    one of the two strictly. In the order given."""
    return [
        name
        for name, (q, c) in points.items()
        if not any(
            oq >= q and oc <= c and (oq > q or oc < c)
            for other, (oq, oc) in points.items()
            if other != name
        )
    ]


def frontier(entries: Mapping[str, Mapping[str, Any]], metric: str) -> dict[str, list[str]]:
    """Per cost of :data:`FRONTIER_COSTS`: the methods on the Pareto front of ``metric``'s
    mean against that cost's mean (methods without both are left out)."""
    out: dict[str, list[str]] = {}
    for cost in FRONTIER_COSTS:
        points = {
            m: (float(e[metric]["mean"]), float(e["cost"][cost]))
            for m, e in entries.items()
            if (e.get(metric) or {}).get("mean") is not None
            and (e.get("cost") or {}).get(cost) is not None
        }
        out[cost] = pareto_front(points)
    return out


#: how reports name each cost of :data:`FRONTIER_COSTS` in their "unbeaten on" column
FRONTIER_LABELS: dict[str, str] = {"llm_calls": "calls", "wall_s": "s"}


def unbeaten_on(method: str, front: Mapping[str, Sequence[str]]) -> str:
    """The report cell for ``method``: the costs whose front (:func:`frontier`) holds it,
    e.g. "calls, s", or "–"."""
    marks = [FRONTIER_LABELS[cost] for cost in FRONTIER_COSTS if method in front.get(cost, ())]
    return ", ".join(marks) or "–"


def _cost_ci(
    rows: Sequence[Mapping[str, Any]], seed: int, n_boot: int
) -> dict[str, list[float] | None]:
    """Bootstrap intervals of the mean of each cost in :data:`FRONTIER_COSTS`."""
    out: dict[str, list[float] | None] = {}
    for key in FRONTIER_COSTS:
        ci = bootstrap_ci([_num(r, key) for r in rows], seed=seed, n_boot=n_boot)
        out[key] = list(ci) if ci else None
    return out


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
            settings = current_settings(run["settings"][method])
        base = (run.get("variants") or {}).get(method, base)
        if method in (run.get("methods") or {}):
            options = current_settings(run["methods"][method])
    for row in rows:
        if row.get("base_method"):
            base = str(row["base_method"])
        if isinstance(row.get("options"), dict) and not options:
            options = current_settings(row["options"])
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


def _method_entry(
    m: str,
    rows: Sequence[dict[str, Any]],
    primary: str,
    runs: Sequence[Mapping[str, Any]],
    seed: int,
    n_boot: int,
) -> dict[str, Any]:
    """One method's rows of one set: metrics with intervals, costs, settings, decisions,
    stop reasons and F1 by rounds (not yet compared with the baseline)."""
    ok = [r for r in rows if not r.get("error")]
    entry: dict[str, Any] = {"n": len(ok), "errors": len(rows) - len(ok)}
    for key in METRICS:
        vals = [float(r[key]) for r in ok if isinstance(r.get(key), int | float)]
        if vals or key != "choice_correct":
            entry[key] = _stat(vals, seed, n_boot)
    entry["cost"] = {
        key: (float(np.mean([_num(r, key) for r in ok])) if ok else None) for key in COSTS
    }
    entry["cost"].update({key: _optional_mean(ok, key) for key in OPTIONAL_COSTS})
    entry["cost_ci"] = _cost_ci(ok, seed, n_boot)
    cached, prompt = entry["cost"]["cached_tokens"], entry["cost"]["prompt_tokens"]
    entry["cost"]["cache_share"] = cached / prompt if cached is not None and prompt else None
    entry["settings"] = method_settings(m, runs, rows)
    entry["decisions"] = decision_stats(ok)
    entry["legacy_recall"] = any(r.get("legacy_recall") for r in rows)
    entry["stop_reasons"] = dict(Counter(str(r.get("stop_reason") or "") for r in rows))
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
    return entry


def _dataset_entry(
    name: str,
    ds_rows: Sequence[dict[str, Any]],
    *,
    baseline: str,
    runs: Sequence[Mapping[str, Any]],
    seed: int,
    n_boot: int,
) -> dict[str, Any]:
    """One set's summary: every method (the baseline first) against the baseline."""
    order = list(dict.fromkeys(str(r.get("method")) for r in ds_rows))
    if baseline in order:
        order.remove(baseline)
        order.insert(0, baseline)
    per: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in ds_rows:
        per[str(r.get("method"))].append(r)
    primary = (
        "choice_correct" if any(r.get("choice_correct") is not None for r in ds_rows) else "f1"
    )
    ds_runs = [r for r in runs if r.get("dataset") in (None, name)]
    methods: dict[str, Any] = {}
    for m in order:
        entry = _method_entry(m, per[m], primary, ds_runs, seed, n_boot)
        if m != baseline and baseline in per:
            entry["vs_baseline"] = _paired(per[baseline], per[m], seed, n_boot)
            entry["headroom"] = headroom(per[baseline], per[m])
        methods[m] = entry
    scored = {
        m: e[primary]["mean"]
        for m, e in methods.items()
        if e.get(primary, {}).get("mean") is not None
    }
    return {
        "questions": len({r.get("id") for r in ds_rows}),
        "primary": primary,
        "baseline": baseline if baseline in per else None,
        "best": max(scored, key=lambda k: scored[k]) if scored else None,
        "frontier": frontier(methods, primary),
        "methods": methods,
    }


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
    datasets = {
        name: _dataset_entry(name, ds_rows, baseline=baseline, runs=runs, seed=seed, n_boot=n_boot)
        for name, ds_rows in by_dataset.items()
    }
    pooled_table = pooled(normalized, baseline=baseline, seed=seed, n_boot=n_boot)
    return {
        "generated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "bootstrap": {"resamples": n_boot, "level": 0.95, "seed": seed, "kind": "percentile"},
        "baseline": baseline,
        "datasets": datasets,
        "pooled": pooled_table,
        "pooled_frontier": frontier(pooled_table, "f1") if pooled_table else {},
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
    rows: Sequence[Mapping[str, Any]],
    *,
    baseline: str = BASELINE,
    seed: int = 0,
    n_boot: int = N_BOOT,
) -> dict[str, Any]:
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
            entry[key] = _stat(
                [float(r[key]) for r in ok if isinstance(r.get(key), int | float)], seed, n_boot
            )
        entry["cost"] = {
            key: (float(np.mean([_num(r, key) for r in ok])) if ok else None)
            for key in POOLED_COSTS
        }
        entry["cost_ci"] = _cost_ci(ok, seed, n_boot)
        if m != baseline and baseline in per:
            entry["vs_baseline"] = _paired(per[baseline], per[m], seed, n_boot)
            entry["headroom"] = headroom(per[baseline], per[m])
        out[m] = entry
    return out


def versus_before(
    before: Sequence[Mapping[str, Any]],
    after: Sequence[Mapping[str, Any]],
    *,
    seed: int = 0,
    n_boot: int = N_BOOT,
) -> dict[str, Any]:
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
            if b:
                out[m] = _before_after(_paired(b, a, seed, n_boot))
        return out

    datasets = {
        str(ds): table(
            [r for r in old if r.get("dataset") == ds], [r for r in new if r.get("dataset") == ds]
        )
        for ds in dict.fromkeys(r.get("dataset") for r in new)
    }
    pooled_table = table(_pooled_rows(old), _pooled_rows(new)) if len(datasets) > 1 else {}
    return {"datasets": datasets, "pooled": pooled_table}


def paired_rows(
    before: Sequence[Mapping[str, Any]],
    after: Sequence[Mapping[str, Any]],
    *,
    seed: int = 0,
    n_boot: int = N_BOOT,
) -> dict[str, Any]:
    """``after`` against ``before`` as one paired comparison, whatever methods the rows name
    (a paper-mode variant against plain RAG, say): questions pair by (set, id) across every
    set, F1-scored rows only; the entry :func:`versus_before` gives a method. Each side holds
    one method's rows (``ValueError`` otherwise: a question would pair with either)."""
    for name, side in (("before", before), ("after", after)):
        methods = sorted({str(r.get("method")) for r in side})
        if len(methods) > 1:
            raise ValueError(f"paired_rows: {name} holds rows of {', '.join(methods)}")
    old = _pooled_rows([normalize_row(r) for r in dedupe(before) if not r.get("error")])
    new = _pooled_rows([normalize_row(r) for r in dedupe(after) if not r.get("error")])
    return _before_after(_paired(old, new, seed, n_boot))


def _before_after(entry: dict[str, Any]) -> dict[str, Any]:
    means = entry.pop("means")
    entry["before"], entry["after"] = means["base"], means["other"]
    return entry


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
        side: {
            key: (float(np.mean([_num(rs[i], key) for i in common])) if common else None)
            for key in PAIRED_MEANS
        }
        for side, rs in (("base", b), ("other", o))
    }
    out["means"] = means
    ratio: dict[str, float | None] = {}
    for key in ("tokens", "llm_calls", "wall_s"):
        bm, om = means["base"][key], means["other"][key]
        ratio[key] = om / bm if bm and om is not None else None
    out["cost_ratio"] = ratio
    return out


def _f1(row: Mapping[str, Any]) -> float | None:
    value = row.get("f1")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def captured_share(method: float, plain: float, oracle: float) -> float | None:
    """``(method − plain) / (oracle − plain)``: the share of the oracle's gain over plain RAG a
    configuration captured; None when the oracle is no better than plain RAG."""
    gap = oracle - plain
    return (method - plain) / gap if gap > 1e-12 else None


#: how reports explain their headroom columns (:func:`headroom_cells`)
HEADROOM_NOTE = (
    "*Oracle F1*: the mean over questions of the best F1 among a configuration's candidates "
    "(plain RAG's answer, its own, and its gate's answer where it records one); *captured*: "
    "(F1 − plain RAG's F1) / (oracle F1 − plain RAG's F1), on the questions both answered."
)


def headroom_cells(entry: Mapping[str, Any]) -> list[str]:
    """A report's two headroom cells for a summary entry: the oracle F1 and the share
    captured, e.g. ``["0.495", "40%"]``; "–" where there is none."""
    h = entry.get("headroom")
    if not h:
        return ["–", "–"]
    share = h.get("captured")
    return [f"{h['oracle']:.3f}", "–" if share is None else f"{share:.0%}"]


def headroom(
    base: Sequence[Mapping[str, Any]], other: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """The headroom of ``other`` over ``base`` (plain RAG) on the questions both answered with
    an F1: the means of plain RAG's F1 (``plain``), the method's (``method``), the per-question
    best of the candidates (``oracle``: plain RAG's row, the method's row and the gate's own
    answer where the method's row records one, and every candidate a composed graph's row
    records, scored with the rows' F1 against the row's gold answers), the best of the method's own candidates (``in_run``: its answer and its gate's
    answer; the method's F1 where there is no gate answer) and the ``captured`` share
    (:func:`captured_share`). ``gate_answers``: the questions whose gate answer was a
    candidate. None when no question is shared."""
    b = {r.get("id"): r for r in base if not r.get("error") and _f1(r) is not None}
    o = {r.get("id"): r for r in other if not r.get("error") and _f1(r) is not None}
    common = [i for i in o if i in b]
    if not common:
        return None
    plain, method, oracle, in_run, gated = 0.0, 0.0, 0.0, 0.0, 0
    for i in common:
        p, m = float(_f1(b[i]) or 0.0), float(_f1(o[i]) or 0.0)
        own = [m]
        answer = read_gate(o[i].get("decisions") or []).answer
        if answer is not None:
            own.append(f1_score(answer, o[i].get("answers") or []))
            gated += 1
        for c in o[i].get("candidates") or []:  # a composed graph's other answers
            if isinstance(c, Mapping) and c.get("answer"):
                own.append(f1_score(str(c["answer"]), o[i].get("answers") or []))
        plain, method = plain + p, method + m
        oracle += max(p, *own)
        in_run += max(own)
    n = len(common)
    out: dict[str, Any] = {
        "n": n,
        "plain": plain / n,
        "method": method / n,
        "oracle": oracle / n,
        "in_run": in_run / n,
        "gate_answers": gated,
    }
    out["captured"] = captured_share(out["method"], out["plain"], out["oracle"])
    return out
