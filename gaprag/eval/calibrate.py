"""``gaprag calibrate``: set each model-taken loop decision's threshold for one model.

1. **Run** every calibrated method on calibration questions only (index 60 on of each bundled
   set; :func:`gaprag.datasets.calibration_slice` refuses anything else) with
   ``calibration=True``: no model decision stops a loop before its bound, and each decision
   records its probability ``p`` and the answer the method would have given had it stopped
   there. The runs are ordinary ``gaprag eval`` runs (repeatable serving, resumable) under
   ``OUT/<dataset>``.
2. **Replay** every threshold ``t`` of a grid offline: a question stops at its first decision
   with ``p >= t`` and answers with that decision's answer (reduced by the short-answer
   rules), else it runs to the bound and gives its final answer. The LLM calls spent up to a
   decision are estimated in proportion to the decisions taken (``calls * (i+1) / n``).
3. **Choose** the threshold that maximises ``mean F1 - cost_per_call * mean LLM calls``
   (ties go to the higher threshold: fail toward retrieving more), and write the model's
   profile (:mod:`gaprag.profiles`), keeping the switches already in it, with a
   ``[calibration]`` table that says how it was made. The replay curves go to
   ``OUT/curves.json``.
4. Where a method also has a **switch that picks the answer of a run no decision stopped**
   (IterKey's ``fallback_policy``: which round's answer), every value of it is replayed with
   every threshold from the same rows, and the pair with the best objective is written (ties:
   the higher threshold, then the method's default value).
5. With ``gate=SIGNAL`` (``--gate``) the runs also run the shared gate (:mod:`gaprag.nodes.gate`)
   with that signal; every iterative method, IRCoT included, can be calibrated this way. The
   gate's decision is replayed like the others (a question stopped there answers with plain
   RAG's answer and spends only the gate's calls), and the profile gets ``gate`` and
   ``gate_threshold`` (the chosen ``p`` in the signal's unit), or ``gate = "off"`` where never
   stopping at the gate is best.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from gaprag.config import environ
from gaprag.context import Calibration
from gaprag.datasets import CALIBRATION_START, calibration_slice, load_dataset
from gaprag.errors import InputError
from gaprag.eval.scoring import short_f1
from gaprag.graphs import calibrated, calibration
from gaprag.metrics import normalize_answer
from gaprag.profiles import writer as profile

GRID: tuple[float, ...] = (
    0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.98, 0.99, 0.995, 1.01,
)  # fmt: skip
DATASETS = ("hotpotqa", "2wikimultihopqa", "musique")
S = TypeVar("S")
R = TypeVar("R")
#: ``rescore(rows, run_dirs)``: the rows with one method's recorded decisions re-scored (by
#: other trained weights, say; ``run_dirs``: dataset -> run directory, for the traces) and a
#: note of what was done
Rescorer = Callable[
    [list[dict[str, Any]], Mapping[str, Path]], tuple[list[dict[str, Any]], dict[str, Any]]
]


@dataclass(frozen=True)
class Point:
    """One threshold replayed over a method's calibration rows."""

    threshold: float
    f1: float
    llm_calls: float
    stop_rate: float  # share of questions stopped by a decision before the bound
    objective: float
    choice: str | None = None  # the round-choice switch's value replayed, where there is one

    @classmethod
    def of(
        cls,
        threshold: float,
        rows: Iterable[Mapping[str, Any]],
        outcome: Callable[[Mapping[str, Any]], tuple[float, float, bool]],
        cost_per_call: float,
        choice: str | None = None,
    ) -> Point:
        """The point of the rows without an error, each giving ``outcome(row)``: its F1, its
        LLM calls and whether a decision stopped it before the bound."""
        outcomes = [outcome(row) for row in rows if not row.get("error")]
        n = max(1, len(outcomes))
        mean_f1 = sum(o[0] for o in outcomes) / n
        mean_calls = sum(o[1] for o in outcomes) / n
        return cls(
            threshold=threshold,
            f1=mean_f1,
            llm_calls=mean_calls,
            stop_rate=sum(o[2] for o in outcomes) / n,
            objective=mean_f1 - cost_per_call * mean_calls,
            choice=choice,
        )

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            k: round(v, 4) for k, v in self.__dict__.items() if isinstance(v, float)
        }
        if self.choice is not None:
            out["choice"] = self.choice
        return out


def _stops(row: Mapping[str, Any], nodes: Sequence[str]) -> list[Mapping[str, Any]]:
    return [d for d in row.get("decisions") or [] if d.get("node") in nodes]


def _short_f1(row: Mapping[str, Any], answer: str) -> float:
    return short_f1(str(row.get("question", "")), answer, row.get("answers") or [])


@functools.cache
def _declared(method: str) -> Calibration | None:
    return calibration(method)


def chosen_f1(row: Mapping[str, Any], decisions: Sequence[Mapping[str, Any]], choice: str) -> float:
    """The F1 of a run no decision stopped, had its method's round-choice switch (IterKey's
    ``fallback_policy``) been ``choice``: the row's own F1 where ``choice`` picks the same
    answer as the value the row ran with (``row["round_choice"]``, from its run's settings;
    else the default), else the picked round's answer reduced by the short-answer rules."""
    declared = _declared(str(row.get("base_method") or row.get("method")))
    answers = [str(d.get("answer") or "") for d in decisions]
    if not answers or declared is None or declared.pick is None:
        return float(row.get("f1") or 0.0)
    probs = [d.get("p") for d in decisions]
    ran = declared.pick(answers, probs, row.get("round_choice", declared.choices[0]))
    picked = declared.pick(answers, probs, choice)
    if normalize_answer(answers[picked]) == normalize_answer(answers[ran]):
        return float(row.get("f1") or 0.0)
    return _short_f1(row, answers[picked])


def replay(
    rows: Iterable[Mapping[str, Any]],
    nodes: Sequence[str],
    threshold: float,
    *,
    cost_per_call: float = 0.005,
    after_last: int = 1,
    choice: str | None = None,
) -> Point:
    """What ``threshold`` would have given on calibration ``rows`` of one method.

    The calls spent up to decision ``i`` of ``n`` are estimated as ``calls * (i+1) / (n +
    after_last)``, where ``after_last`` is 1 when the method still works after its last
    decision (an answer step) and 0 when the last decision ends the run. ``choice``: the value
    of IterKey's ``fallback_policy`` for the runs no decision stops (:func:`chosen_f1`); None
    keeps each row's own answer."""

    def outcome(row: Mapping[str, Any]) -> tuple[float, float, bool]:
        total = float(row.get("llm_calls") or 0)
        decisions = _stops(row, nodes)
        f1 = float(row.get("f1") or 0.0) if choice is None else chosen_f1(row, decisions, choice)
        segments = len(decisions) + after_last
        for i, d in enumerate(decisions):
            p, answer = d.get("p"), d.get("answer")
            if p is not None and answer is not None and p >= threshold:
                return _short_f1(row, str(answer)), total * (i + 1) / segments, i + 1 < segments
        return f1, total, False

    return Point.of(threshold, rows, outcome, cost_per_call, choice)


def fit(
    grid: Iterable[S],
    evaluate: Callable[[S], R],
    rank: Callable[[S, R], tuple[Any, ...]],
) -> tuple[S, R]:
    """The one way a setting is fitted: every setting of ``grid`` evaluated on the rows
    (``evaluate``), the one whose ``rank`` (the metric, then the tie-breaks) is highest, with
    its evaluation; the first of equals. ``gaprag calibrate``'s thresholds and the lab's
    replays (answer selection, escalation) are fitted with it."""
    best: tuple[tuple[Any, ...], S, R] | None = None
    for setting in grid:
        result = evaluate(setting)
        key = rank(setting, result)
        if best is None or key > best[0]:
            best = (key, setting, result)
    if best is None:
        raise ValueError("no setting to fit: the grid is empty")
    return best[1], best[2]


def choose(points: Sequence[Point], default: str | None = None) -> Point:
    """The best objective; ties go to the higher threshold (fail toward retrieving more), then
    to the ``default`` value of the round-choice switch."""
    return fit(
        points,
        lambda pt: pt,
        lambda pt, _: (round(pt.objective, 6), pt.threshold, pt.choice == default),
    )[0]


def curves(
    rows: Sequence[Mapping[str, Any]],
    methods: Sequence[str],
    *,
    cost_per_call: float = 0.005,
    grid: Sequence[float] = GRID,
) -> dict[str, dict[str, Any]]:
    """Per method: the replayed grid and the chosen threshold."""
    out: dict[str, dict[str, Any]] = {}
    for method in methods:
        declared = _declared(method)
        mine = [r for r in rows if r.get("method") == method]
        if declared is None or not mine:
            continue
        field, nodes, after = declared.setting, declared.nodes, declared.after_last
        switch = declared.switch
        values: tuple[str | None, ...] = declared.choices or (None,)
        grids = {
            value: [
                replay(mine, nodes, t, cost_per_call=cost_per_call, after_last=after, choice=value)
                for t in grid
            ]
            for value in values
        }
        default = values[0]
        best = choose([pt for points in grids.values() for pt in points], default)
        with_p = sum(1 for r in mine for d in _stops(r, nodes) if d.get("p") is not None)
        out[method] = {
            "setting": field,
            "nodes": list(nodes),
            "questions": len(mine),
            "decisions_with_p": with_p,
            "chosen": best.as_dict(),
            "grid": [pt.as_dict() for pt in grids[best.choice]],
        }
        if switch:
            out[method]["switch"] = switch
            out[method]["choices"] = {
                str(v): choose(points).as_dict() for v, points in grids.items()
            }
    return out


def write_profile(
    path: Path,
    model: str,
    chosen: Mapping[str, Mapping[str, Any]],
    notes: Mapping[str, Any],
    *,
    gate: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """Write (or update) a profile: the chosen thresholds, the switches already there kept
    (:func:`gaprag.profiles.writer.write_profile`)."""
    settings: dict[str, dict[str, Any]] = {}
    for method, result in chosen.items():
        values = settings.setdefault(method, {})
        values[result["setting"]] = min(float(result["chosen"]["threshold"]), 1.0)
        if result.get("switch") and result["chosen"].get("choice") is not None:
            values[result["switch"]] = result["chosen"]["choice"]
    for method, result in (gate or {}).items():
        settings.setdefault(method, {}).update(result["profile"])
    records = {m: {**notes, "rows": r["questions"]} for m, r in chosen.items()}
    missing = {m: {**notes, "rows": r["questions"]} for m, r in (gate or {}).items()}
    profile.write_profile(path, settings, records, model=model, records_if_missing=missing)


def _check_methods(
    methods: Sequence[str], gate: str | None, rescore: Mapping[str, Rescorer]
) -> None:
    """Refuse what cannot be calibrated: a method without a calibrated decision (any iterative
    one with ``gate``), an unknown gate signal, a re-scorer for a method not asked for."""
    known = calibrated()
    allowed = gate_methods() if gate else tuple(known)
    unknown = [m for m in methods if m not in allowed]
    if unknown:
        raise InputError(
            f"no calibrated decision in: {', '.join(unknown)}",
            hint="calibrated methods: " + ", ".join(allowed),
        )
    check_gate_signal(gate)
    extra = [m for m in rescore if m not in methods or m not in known]
    if extra:
        raise InputError(
            f"a re-scorer for {', '.join(extra)}, not a calibrated method asked for",
            hint="calibrated methods asked for: " + ", ".join(m for m in methods if m in known),
        )


def _run_sets(
    settings: Mapping[str, Any],
    methods: Sequence[str],
    datasets: Sequence[str],
    *,
    start: int,
    limit: int,
    out_dir: Path,
    gate: str | None,
    run: bool,
) -> tuple[list[dict[str, Any]], dict[str, str], dict[str, Path]]:
    """Run (unless ``run`` is False) and read each set's calibration rows under ``out_dir``:
    (the rows, the questions used per set, each set's run directory). ``settings``: the
    evaluation's other settings (serving, resume, progress)."""
    from gaprag.eval.results import read_results
    from gaprag.eval.runner import evaluate
    from gaprag.eval.settings import EvalSettings

    rows: list[dict[str, Any]] = []
    used: dict[str, str] = {}
    run_dirs: dict[str, Path] = {}
    for name in datasets:
        ds = load_dataset(name)
        picked = calibration_slice(ds.examples, start, limit, what="calibration")
        path = out_dir / ds.name / "results.jsonl"
        if run:
            options = {m: {"calibration": True, **gate_option(gate)} for m in methods}
            evaluate(
                EvalSettings(
                    methods=list(methods), dataset=ds, limit=len(picked), offset=start,
                    out=out_dir / ds.name, options=options, report=False, **settings,
                )
            )  # fmt: skip
        mine = read_results(path) if path.is_file() else []
        if not run:  # a replay keeps to the questions asked for
            wanted = {ex.id for ex in picked}
            mine = [r for r in mine if r.get("id") in wanted]
        _note_round_choice(mine, path.parent / "run.json")
        run_dirs[ds.name] = path.parent
        rows.extend(mine)
        position = {ex.id: i for i, ex in enumerate(ds.examples)}
        indices = sorted({position[r["id"]] for r in mine if r.get("id") in position})
        if indices:
            used[ds.name] = f"{indices[0]}-{indices[-1]} ({len(indices)} questions)"
    return rows, used, run_dirs


def calibrate(
    *,
    model: str,
    methods: Sequence[str] | None = None,
    datasets: Sequence[str] = DATASETS,
    limit: int = 20,
    start: int = CALIBRATION_START,
    out: str | Path = "gaprag-calibration",
    cost_per_call: float = 0.005,
    profile_path: str | Path | None = None,
    base_url: str | None = None,
    resume: bool = True,
    progress: bool = True,
    llm: Any = None,
    embedder: Any = None,
    run: bool = True,
    rescore: Mapping[str, Rescorer] | None = None,
    gate: str | None = None,
) -> dict[str, Any]:
    """Run the calibration questions, replay the thresholds, write ``model``'s profile.

    ``model``: the embedded model's registry name (``gaprag llm models``), or with
    ``base_url`` the model name that endpoint serves; ``datasets``: bundled names or dataset
    JSONL paths; ``llm``/``embedder``: objects to use instead (tests); ``run=False``: replay the
    rows already under ``out`` (of an interrupted calibration, say) without running anything;
    ``rescore``: method -> a function ``(rows, run_dirs)`` giving the rows with the method's
    recorded decisions re-scored (by other trained weights, say) and a note of what it did
    (recorded in the curves; its ``record`` keys go into the profile's calibration record).
    Returns the curves and the profile's path."""
    known = calibrated()
    methods = list(known) if methods is None else list(methods)
    rescorers = dict(rescore or {})
    _check_methods(methods, gate, rescorers)
    out_dir = Path(out)
    serving = {"base_url": base_url, "model": model if base_url else None, "llm": llm,
               "embedder": embedder, "resume": resume, "progress": progress}  # fmt: skip
    # the embedded server serves ``model`` during these runs; the caller's setting comes back
    embedded = base_url is None and llm is None
    with environ(GAPRAG_LOCAL_MODEL=model) if embedded else contextlib.nullcontext():
        rows, used, run_dirs = _run_sets(
            serving, methods, datasets, start=start, limit=limit, out_dir=out_dir, gate=gate,
            run=run,
        )  # fmt: skip
    rows = [r for r in rows if not r.get("error") and (r.get("options") or {}).get("calibration")]
    if not rows:
        raise InputError(f"no calibration rows under {out_dir}", hint="run gaprag calibrate first")
    rescored: dict[str, dict[str, Any]] = {}
    for method, rescorer in rescorers.items():
        rows, rescored[method] = rescorer(rows, run_dirs)
    result = curves(rows, [m for m in methods if m in known], cost_per_call=cost_per_call)
    gated = gate_curves(rows, methods, gate, cost_per_call=cost_per_call) if gate else {}
    for method, note in rescored.items():
        if method in result:
            result[method]["rescored"] = note
    (out_dir / "curves.json").write_text(
        json.dumps({**result, **({"gate": gated} if gate else {})}, indent=2), encoding="utf-8"
    )
    notes = {
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(["gaprag calibrate", *sys.argv[2:]]) or "gaprag calibrate",
        "datasets": [Path(str(d)).name.split(".")[0] for d in datasets],
        "questions": used,
        "objective": f"mean F1 - {cost_per_call} x mean LLM calls",
        "cost_per_call": cost_per_call,
    }
    for note in rescored.values():
        notes.update(note.get("record", {}))
    from gaprag.profiles import normalize

    target = Path(profile_path) if profile_path else _shipped_path(normalize(model))
    write_profile(target, model, result, notes, gate=gated)
    return {"curves": result, "gate": gated, "profile": str(target)}


def _note_round_choice(rows: Sequence[dict[str, Any]], run_file: Path) -> None:
    """Mark each row with the round-choice value its run used (``round_choice``, in memory
    only), read from the run's resolved settings; the default where run.json has none."""
    try:
        settings = json.loads(run_file.read_text(encoding="utf-8")).get("settings") or {}
    except (OSError, ValueError):
        settings = {}
    for row in rows:
        method = str(row.get("method"))
        declared = _declared(str(row.get("base_method") or method))
        if declared is not None and declared.switch:
            chosen = (settings.get(method) or {}).get(declared.switch, declared.choices[0])
            row["round_choice"] = chosen


def _shipped_path(name: str) -> Path:
    from importlib import resources

    return Path(str(resources.files("gaprag.profiles"))) / f"{name}.toml"


# -- the shared gate (gaprag.nodes.gate): its decision is calibrated like a method's ---------
GATE_NODES: tuple[str, ...] = ("gate",)


def gate_methods() -> tuple[str, ...]:
    from gaprag.graphs import ITERATIVE

    return ITERATIVE


def check_gate_signal(gate: str | None) -> None:
    from gaprag.nodes.gate import LOGPROB_SIGNALS

    signals = (*LOGPROB_SIGNALS, "agreement")
    if gate is not None and gate not in signals:
        raise InputError(f"unknown gate signal {gate!r}", hint="use one of: " + ", ".join(signals))


def gate_option(gate: str | None) -> dict[str, Any]:
    return {"gate": gate} if gate else {}


def gate_replay(
    rows: Iterable[Mapping[str, Any]], threshold: float, *, cost_per_call: float = 0.005
) -> Point:
    """What stopping at the gate on ``p >= threshold`` would have given: a stopped question
    answers with plain RAG's answer (reduced by the short-answer rules) and spends the gate's
    calls (1 on logprobs, 2 on agreement); the others keep their run's F1 and calls."""

    def outcome(row: Mapping[str, Any]) -> tuple[float, float, bool]:
        for d in _stops(row, GATE_NODES)[:1]:
            p, answer = d.get("p"), d.get("answer")
            if p is not None and answer is not None and p >= threshold:
                spent = 1.0 if d.get("path") == "logprobs" else 2.0
                return _short_f1(row, str(answer)), spent, True
        return float(row.get("f1") or 0.0), float(row.get("llm_calls") or 0), False

    return Point.of(threshold, rows, outcome, cost_per_call)


def gate_curves(
    rows: Sequence[Mapping[str, Any]],
    methods: Sequence[str],
    signal: str,
    *,
    cost_per_call: float = 0.005,
    grid: Sequence[float] = GRID,
    max_calls: Mapping[str, float] | None = None,
) -> dict[str, dict[str, Any]]:
    """Per method: the gate's replayed grid, the chosen ``p`` and the profile values it
    gives (``gate`` and ``gate_threshold``, or ``gate = "off"`` when never stopping wins).
    ``max_calls``: per method, the most mean LLM calls a chosen threshold may spend (the
    choice among the thresholds within it, when there are any); where that changes the
    choice, the unbounded one is kept as ``uncapped``."""
    from gaprag.nodes.gate import threshold_setting

    def profile(best: Point) -> dict[str, Any]:
        if best.stop_rate > 0 and best.threshold <= 1.0:
            setting = threshold_setting(signal, best.threshold)  # type: ignore[arg-type]
            return {"gate": signal, "gate_threshold": round(setting, 4)}
        return {"gate": "off"}

    out: dict[str, dict[str, Any]] = {}
    for method in methods:
        mine = [r for r in rows if r.get("method") == method and _stops(r, GATE_NODES)]
        if not mine:
            continue
        points = [gate_replay(mine, t, cost_per_call=cost_per_call) for t in grid]
        cap = (max_calls or {}).get(method)
        within = [pt for pt in points if cap is None or pt.llm_calls <= cap + 1e-9]
        best, unbounded = choose(within or points), choose(points)
        out[method] = {
            "signal": signal,
            "questions": len(mine),
            "chosen": best.as_dict(),
            "profile": profile(best),
            "grid": [pt.as_dict() for pt in points],
        }
        if unbounded != best:
            out[method]["uncapped"] = {"chosen": unbounded.as_dict(), "profile": profile(unbounded)}
    return out


def calibration_lines(result: Mapping[str, Any]) -> list[str]:
    """What :func:`calibrate` chose, a line per decision (``gaprag calibrate`` prints them)."""
    lines = []
    for method, res in result.get("gate", {}).items():
        best = res["chosen"]
        lines.append(
            f"{method}: gate = {res['profile']}  (F1 {best['f1']:.3f}, {best['llm_calls']:.1f} "
            f"calls, stops at the gate on {best['stop_rate']:.0%}; {res['questions']} questions)"
        )
    for method, res in result["curves"].items():
        best = res["chosen"]
        switch = f", {res['switch']} = {best['choice']}" if res.get("switch") else ""
        lines.append(
            f"{method}: {res['setting']} = {min(best['threshold'], 1.0):g}{switch} "
            f"(F1 {best['f1']:.3f}, {best['llm_calls']:.1f} calls, stops early on "
            f"{best['stop_rate']:.0%}; {res['questions']} questions)"
        )
    return lines
