"""Offline answer selection: choose between the answers an evaluation run already has.

A gated method's row holds two candidates: plain RAG's answer as its gate gave it (the
``answer`` of its ``gate`` decision, with its probability ``p``) and the method's own final
answer (the row's ``prediction``). This module scores the second the way the gate scores the
first, from the run's traces, and replays selection rules between the two:

1. :func:`locate` finds, in a question's trace, the LLM call whose reply the final answer came
   from (the short-answer step's call when it rewrote the answer, else the last reply that
   holds the answer; inside a reply, the occurrence after an answer marker such as
   ``answer is`` or a JSON ``"text"`` field, else the first one);
2. :func:`score_runs` re-sends that call's recorded messages with the recorded reply up to the
   answer as the start of the model's reply, held to the answer's text
   (:meth:`gaprag.llm.client.LLM.ascore_continuation`), and keeps the answer tokens' logprobs
   as the gate keeps its own (:func:`gaprag.nodes.gate.logprob_signals`). Each row's score is
   appended to ``selection_scores.jsonl`` beside its ``results.jsonl``, so scoring resumes
   where it stopped;
3. :func:`replay` chooses each rule's thresholds by F1 on the calibration questions (index
   :data:`gaprag.datasets.CALIBRATION_START` and on) and reports every rule there and, with
   the same thresholds, on the reported questions (below 50) where the directories hold them.

When the two candidates agree (the same answer after normalisation, or the gate answered
and the loop never ran) there is nothing to choose; the rules decide only where they differ:

- ``loop``: the method's answer (what the methods do today); ``gate``: plain RAG's answer;
- ``gate_p``: plain RAG's answer when its ``p >= a``;
- ``loop_p``: the method's answer when its ``p >= b``, else plain RAG's;
- ``margin``: plain RAG's answer when its ``p`` exceeds the method's by at least ``m``;
- ``both``: the method's answer when its ``p >= b``, else plain RAG's when its ``p >= a``,
  else the method's.

A rule that needs the method's ``p`` keeps the method's answer where it has none.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gaprag.datasets import CALIBRATION_START, REPORTED_QUESTIONS, load_dataset
from gaprag.errors import InputError
from gaprag.eval.record import RUN_FILE
from gaprag.eval.results import RESULTS, read_results
from gaprag.eval.stats import BASELINE, bootstrap_ci, captured_share, dedupe, gate_answer
from gaprag.metrics import f1_score
from gaprag.nodes.answer import clean_answer
from gaprag.nodes.choice import agrees, answer_span, takes_gate
from gaprag.nodes.gate import GATE_STOP, Signal, logprob_signals, probability
from gaprag.nodes.short_answer import rule_answer
from gaprag.traces import method_traces

if TYPE_CHECKING:
    from gaprag.llm.client import LLM

SCORES = "selection_scores.jsonl"
#: the gate's signal when a trace does not name one
DEFAULT_SIGNAL: Signal = "logprob_mean"
_ROLES = {"ai": "assistant", "system": "system"}


# -- 1. the call the final answer came from ------------------------------------------------
@dataclass(frozen=True)
class Located:
    """The final answer's place: ``llm_calls[call].reply[start:end]``."""

    call: int
    start: int
    end: int


def _short_answer(trace: Mapping[str, Any]) -> Mapping[str, Any]:
    """The short-answer step's trace record (``path``, ``original``), or an empty one."""
    for event in reversed(trace.get("trace") or []):
        if isinstance(event, Mapping) and event.get("call") == "short_answer":
            return event
    return {}


def locate(trace: Mapping[str, Any]) -> Located | None:
    """The LLM call of a question's trace whose reply the final answer (``prediction``) came
    from, and the answer's span in it; None when no recorded reply holds it.

    The gate's calls (the first one or two) count only where the gate answered. The
    short-answer step's call when it rewrote the answer (the run's last call); else the
    last call whose cleaned reply is the answer before that step (an answer step's reply),
    else the last whose reply holds it (a reasoning sentence, a JSON reply), else the last
    whose reply holds the final answer."""
    answer = str(trace.get("prediction") or "").strip()
    calls = [c for c in trace.get("llm_calls") or [] if isinstance(c, Mapping)]
    if not answer or not calls:
        return None
    step = _short_answer(trace)
    original = str(step.get("original") or answer).strip()
    skip = _gate_calls(trace) if trace.get("stop_reason") != GATE_STOP else 0
    replies = [
        (i, str(c["reply"]))
        for i, c in reversed(list(enumerate(calls)))
        if i >= skip and isinstance(c.get("reply"), str) and not c.get("error")
    ]
    if step.get("path") == "llm":
        replies = replies[:1] if replies and replies[0][0] == len(calls) - 1 else []
        original = answer
    exact = [(i, r) for i, r in replies if clean_answer(r) == original]
    for i, reply in [*exact, *replies]:
        found = answer_span(reply, original)
        if found is None:
            continue
        inner = answer_span(reply[found[0] : found[1]], answer)
        if inner is not None:
            return Located(i, found[0] + inner[0], found[0] + inner[1])
    for i, reply in replies:
        found = answer_span(reply, answer)
        if found is not None:
            return Located(i, *found)
    return None


def _gate_calls(trace: Mapping[str, Any]) -> int:
    """How many LLM calls the gate made first: one, two for the agreement signal, none
    without a gate."""
    for event in trace.get("trace") or []:
        if isinstance(event, Mapping) and event.get("call") == "gate":
            return 2 if event.get("signal") == "agreement" else 1
    return 0


def _gate_signal(trace: Mapping[str, Any]) -> Signal:
    for event in trace.get("trace") or []:
        if isinstance(event, Mapping) and event.get("call") == "gate":
            signal = event.get("signal")
            if signal in ("logprob_mean", "logprob_min", "logprob_margin", "agreement"):
                return signal  # type: ignore[no-any-return]
    return DEFAULT_SIGNAL


# -- 2. scores, cached beside the rows ----------------------------------------------------
def scores_file(run_dir: str | Path) -> Path:
    return Path(run_dir) / SCORES


def read_records(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(method, question id) -> its record in the JSON-lines file ``path`` (the last one; torn
    lines skipped; empty when there is no file)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            out[(str(record.get("method")), str(record.get("id")))] = record
    return out


def read_scores(run_dir: str | Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(method, question id) -> its score record."""
    return read_records(scores_file(run_dir))


def pending_rows(
    dirs: Sequence[str | Path], name: str, methods: Sequence[str] = ()
) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Each row of ``dirs`` (of ``methods``; all when empty), with its run directory, that has
    no record yet in the directory's JSON-lines file ``name``."""
    for d in dirs:
        run_dir = run_dir_of(d)
        done = read_records(run_dir / name)
        for row in dedupe(read_results(run_dir)):
            key = (str(row.get("method")), str(row.get("id")))
            if (not methods or key[0] in methods) and key not in done:
                yield run_dir, row


def append_record(path: Path, record: Mapping[str, Any]) -> None:
    """Append ``record`` as one JSON line, in one write (a crash loses no earlier line)."""
    data = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _messages(call: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [
        (_ROLES.get(str(m.get("role")), "user"), str(m.get("content") or ""))
        for m in call.get("messages") or []
        if isinstance(m, Mapping)
    ]


async def score_trace(llm: LLM, trace: Mapping[str, Any]) -> dict[str, Any]:
    """The score record of one row's final answer: ``path`` ``scored`` (with the answer
    tokens' ``signals`` and ``p`` in the unit of the row's gate signal), ``gate_stop`` (the
    gate answered: its own ``p`` is the answer's), ``unlocated`` (no recorded reply holds
    the answer), ``mismatch`` (the endpoint continued with other text) or ``no_logprobs``."""
    signal = _gate_signal(trace)
    record: dict[str, Any] = {
        "method": trace.get("method"),
        "id": trace.get("id"),
        "signal": signal,
        "prediction": trace.get("prediction"),
    }
    if trace.get("stop_reason") == GATE_STOP:
        return {**record, "path": "gate_stop"}
    found = locate(trace)
    if found is None:
        return {**record, "path": "unlocated"}
    call = trace["llm_calls"][found.call]
    reply = str(call["reply"])
    prefix = reply[: found.start].rstrip()
    text = reply[len(prefix) : found.end]
    record.update(call=found.call, start=found.start, end=found.end)
    if not llm.supports_logprobs:
        return {**record, "path": "no_logprobs"}
    scored = await llm.ascore_continuation(_messages(call), prefix, text)
    if scored is None or not scored.tokens:
        return {**record, "path": "no_logprobs" if not llm.supports_logprobs else "mismatch"}
    signals = logprob_signals(scored.tokens)
    if signals is None or signal not in signals:
        return {**record, "path": "mismatch"}
    return {
        **record,
        "path": "scored",
        "tokens": [[t.token, round(t.logprob, 6)] for t in scored.tokens],
        "signals": {k: round(v, 6) for k, v in signals.items()},
        "p": probability(signal, signals[signal]),
    }


def _gated(row: Mapping[str, Any]) -> bool:
    return not row.get("error") and gate_answer(row) is not None


async def ascore_runs(
    dirs: Sequence[str | Path],
    llm: LLM,
    *,
    methods: Sequence[str] = (),
    limit: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> int:
    """Score every gated row of ``dirs`` not yet in its ``selection_scores.jsonl`` (at most
    ``limit`` this time), appending as each finishes; returns how many were scored."""
    done = 0
    model = str(getattr(llm.chat, "model_name", "") or "")
    traces: dict[tuple[Path, str], dict[str, dict[str, Any]]] = {}
    for run_dir, row in pending_rows(dirs, SCORES, methods):
        if not _gated(row):
            continue
        if limit is not None and done >= limit:
            return done
        method = str(row.get("method"))
        if (run_dir, method) not in traces:
            traces[(run_dir, method)] = method_traces(run_dir, method)
        trace = traces[(run_dir, method)].get(str(row.get("id")))
        if trace is None:
            record = {"method": method, "id": row.get("id"), "path": "no_trace"}
        else:
            record = await score_trace(llm, trace)
        record["model"] = model
        append_record(scores_file(run_dir), record)
        done += 1
        if progress is not None:
            progress(f"{run_dir.name} {method} {row.get('id')}: {record['path']}")
    return done


def score_runs(dirs: Sequence[str | Path], llm: LLM, **kwargs: Any) -> int:
    """:func:`ascore_runs`, run to completion."""
    return asyncio.run(ascore_runs(dirs, llm, **kwargs))


def run_dir_of(d: str | Path) -> Path:
    """``d`` as a ``gaprag eval`` output directory; an input error when it holds no rows."""
    path = Path(d)
    if not (path / RESULTS).is_file():
        raise InputError(
            f"no {RESULTS} in {path}", hint="give directories written by `gaprag eval`"
        )
    return path


# -- 3. replay -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Candidates:
    """One question of one method: plain RAG's F1 and the two candidates with their ``p``
    (the gate's answer scored after the short-answer step's rules, as a selection step would
    give it)."""

    dataset: str
    method: str
    id: str
    index: int | None  # the question's place in its set (None: unknown)
    plain: float  # plain RAG's F1 (standard_rag's row; else the gate answer's)
    gate_f1: float
    loop_f1: float
    gate_p: float | None
    loop_p: float | None
    agree: bool

    @property
    def oracle(self) -> float:
        return max(self.plain, self.gate_f1, self.loop_f1)


def question_indices(run_dir: Path) -> dict[str, int]:
    """Question id -> its index in the run's dataset file (the one whose sha256 ``run.json``
    records); empty when the run does not say or the file is not found."""
    try:
        run = json.loads((run_dir / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    for source in (run.get("dataset"), run.get("dataset_path")):
        if not isinstance(source, str) or not source:
            continue
        try:
            dataset = load_dataset(source)
        except InputError:
            continue
        if run.get("dataset_sha256") in (None, dataset.sha256):
            return {ex.id: i for i, ex in enumerate(dataset.examples)}
    return {}


def _gate_p(row: Mapping[str, Any]) -> float | None:
    for decision in row.get("decisions") or []:
        if isinstance(decision, Mapping) and decision.get("node") == "gate":
            return _p(decision.get("p"))
    return None


def _p(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def candidates(dirs: Sequence[str | Path]) -> list[Candidates]:
    """Every gated row of ``dirs`` as :class:`Candidates` (its method's ``p`` from the scores
    file: the gate's own where the gate answered, None where it was not scored)."""
    out: list[Candidates] = []
    for d in dirs:
        run_dir = run_dir_of(d)
        rows = dedupe(read_results(run_dir))
        scores = read_scores(run_dir)
        index = question_indices(run_dir)
        plain_f1 = {
            str(r.get("id")): float(r.get("f1") or 0.0)
            for r in rows
            if r.get("method") == BASELINE and not r.get("error")
        }
        for row in rows:
            if not _gated(row):
                continue
            qid, method = str(row.get("id")), str(row.get("method"))
            answer = gate_answer(row) or ""
            short = rule_answer(str(row.get("question") or ""), answer)
            gate_f1 = f1_score(answer if short is None else short, row.get("answers") or [])
            gate_p = _gate_p(row)
            score = scores.get((method, qid)) or {}
            loop_p = gate_p if score.get("path") == "gate_stop" else _p(score.get("p"))
            out.append(
                Candidates(
                    dataset=str(row.get("dataset")),
                    method=method,
                    id=qid,
                    index=index.get(qid),
                    plain=plain_f1.get(qid, gate_f1),
                    gate_f1=gate_f1,
                    loop_f1=float(row.get("f1") or 0.0),
                    gate_p=gate_p,
                    loop_p=loop_p,
                    agree=row.get("stop_reason") == GATE_STOP
                    or agrees(answer, str(row.get("prediction") or "")),
                )
            )
    return out


Thresholds = dict[str, float]
Rule = Callable[[Candidates, Thresholds], bool]  # True: plain RAG's (the gate's) answer


def _ge(p: float | None, threshold: float) -> bool:
    return p is not None and p >= threshold


RULES: dict[str, tuple[tuple[str, ...], Rule]] = {
    "loop": ((), lambda c, t: False),
    "gate": ((), lambda c, t: True),
    "gate_p": (("a",), lambda c, t: _ge(c.gate_p, t["a"])),
    "loop_p": (("b",), lambda c, t: c.loop_p is not None and c.loop_p < t["b"]),
    "margin": (
        ("m",),
        lambda c, t: takes_gate(c.gate_p, c.loop_p, t["m"]),
    ),
    "both": (
        ("a", "b"),
        lambda c, t: c.loop_p is not None and c.loop_p < t["b"] and _ge(c.gate_p, t["a"]),
    ),
}


def choose_gate(rule: str, c: Candidates, thresholds: Thresholds) -> bool:
    """Whether ``rule`` with ``thresholds`` takes plain RAG's answer for ``c`` (never where
    the two agree: there is nothing to choose)."""
    return not c.agree and RULES[rule][1](c, thresholds)


def _f1(rule: str, cands: Sequence[Candidates], t: Thresholds) -> tuple[float, int]:
    """(mean F1, questions switched to plain RAG's answer)."""
    picks = [choose_gate(rule, c, t) for c in cands]
    total = sum(c.gate_f1 if g else c.loop_f1 for c, g in zip(cands, picks, strict=True))
    return total / len(cands), sum(picks)


def _grid(values: Iterable[float | None]) -> list[float]:
    """Every threshold that separates the observed values, and one above them all."""
    seen = sorted({v for v in values if v is not None})
    return [*seen, (seen[-1] + 1.0) if seen else 1.0]


def _grids(cands: Sequence[Candidates]) -> dict[str, list[float]]:
    gate = _grid(c.gate_p for c in cands)
    loop = _grid(c.loop_p for c in cands)
    margins = _grid(
        c.gate_p - c.loop_p for c in cands if c.gate_p is not None and c.loop_p is not None
    )
    return {"a": gate, "b": loop, "m": margins}


def fit(rule: str, cands: Sequence[Candidates]) -> Thresholds:
    """The thresholds of ``rule`` with the best mean F1 on ``cands``; ties go to the one that
    switches fewest questions to plain RAG's answer, then to the highest thresholds."""
    names, _ = RULES[rule]
    if not names or not cands:
        return {}
    grids = _grids(cands)
    best: tuple[float, int, tuple[float, ...]] | None = None
    chosen: Thresholds = {}

    def walk(i: int, current: Thresholds) -> None:
        nonlocal best, chosen
        if i == len(names):
            f1, switched = _f1(rule, cands, current)
            key = (round(f1, 12), -switched, tuple(current[n] for n in names))
            if best is None or key > best:
                best, chosen = key, dict(current)
            return
        for value in grids[names[i]]:
            walk(i + 1, {**current, names[i]: value})

    walk(0, {})
    return chosen


def _evaluate(rule: str, cands: Sequence[Candidates], t: Thresholds) -> dict[str, Any]:
    f1, switched = _f1(rule, cands, t)
    plain = sum(c.plain for c in cands) / len(cands)
    oracle = sum(c.oracle for c in cands) / len(cands)
    return {
        "f1": f1,
        "switched": switched,
        "captured": captured_share(f1, plain, oracle),
    }


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _summary(cands: Sequence[Candidates]) -> dict[str, Any]:
    """The candidates' F1 on ``cands``; ``differ``: the questions where the two candidates
    differ, with each one's F1 there (``differ_gate``, ``differ_loop``), and how many of them
    have the method's ``p`` (``loop_scored``); ``agree_f1``: F1 where they agree."""
    n = len(cands)
    differ = [c for c in cands if not c.agree]
    return {
        "n": n,
        "plain": sum(c.plain for c in cands) / n,
        "gate": sum(c.gate_f1 for c in cands) / n,
        "loop": sum(c.loop_f1 for c in cands) / n,
        "oracle": sum(c.oracle for c in cands) / n,
        "in_run": sum(max(c.gate_f1, c.loop_f1) for c in cands) / n,
        "differ": len(differ),
        "differ_gate": _mean([c.gate_f1 for c in differ]),
        "differ_loop": _mean([c.loop_f1 for c in differ]),
        "agree_f1": _mean([c.loop_f1 for c in cands if c.agree]),
        "loop_scored": sum(c.loop_p is not None for c in differ),
    }


def replay(cands: Sequence[Candidates]) -> dict[str, Any]:
    """Per method: each rule's thresholds fitted on the calibration questions (index
    :data:`CALIBRATION_START` and on), and the F1, questions switched and share of the
    headroom captured on them (``fit``) and on the reported questions (``check``, index below
    :data:`REPORTED_QUESTIONS`, never used to fit) where there are any."""
    per: dict[str, list[Candidates]] = defaultdict(list)
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


def paired_delta(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """Mean paired difference ``a - b`` with its bootstrap interval, and wins / losses."""
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    return {
        "mean": sum(diffs) / len(diffs),
        "ci": bootstrap_ci(diffs),
        "wins": sum(d > 0 for d in diffs),
        "losses": sum(d < 0 for d in diffs),
    }


def check(
    cands: Sequence[Candidates], rule: str, thresholds: Mapping[str, Thresholds]
) -> dict[str, Any]:
    """Per method, ``rule`` (its thresholds from ``thresholds[method]``, e.g. fitted on the
    calibration questions; ``loop`` where they are missing) on the reported questions (index below
    :data:`REPORTED_QUESTIONS`): F1 per set and pooled for plain RAG, the run as it was (the
    method's answer always) and the rule, with the rule's paired ΔF1 against plain RAG and
    against the run."""
    per: dict[str, list[Candidates]] = defaultdict(list)
    for c in cands:
        if c.index is not None and c.index < REPORTED_QUESTIONS:
            per[c.method].append(c)
    out: dict[str, Any] = {}
    for method, rows in per.items():
        t = dict(thresholds.get(method, {}))
        used = rule if all(n in t for n in RULES[rule][0]) else "loop"  # none fitted: the run
        chosen = [c.gate_f1 if choose_gate(used, c, t) else c.loop_f1 for c in rows]
        sets: dict[str, dict[str, float]] = {}
        for name in sorted({c.dataset for c in rows}):
            pick = [i for i, c in enumerate(rows) if c.dataset == name]
            sets[name] = {
                "n": len(pick),
                "plain": _mean([rows[i].plain for i in pick]) or 0.0,
                "run": _mean([rows[i].loop_f1 for i in pick]) or 0.0,
                "rule": _mean([chosen[i] for i in pick]) or 0.0,
            }
        plain, run = [c.plain for c in rows], [c.loop_f1 for c in rows]
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


def _signed(value: float) -> str:
    return f"{value:+.3f}".replace("-", "−")


def format_interval(d: Mapping[str, Any]) -> str:
    """A :func:`paired_delta` as ``+0.012 [−0.010, +0.034]``."""
    lo, hi = d["ci"] or (float("nan"), float("nan"))
    return f"{_signed(d['mean'])} [{_signed(lo)}, {_signed(hi)}]"


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
                f"| {method} | {rule} | {name} | {s['n']} | {_num(s['plain'])} | "
                f"{_num(s['run'])} | {_num(s['rule'])} | | | | |"
            )
        lines.append(
            f"| {method} | {rule} | **pooled** | {e['n']} | {_num(e['plain'])} | "
            f"{_num(e['run'])} | **{_num(e['f1'])}** | {e['switched']} | "
            f"{format_interval(e['vs_plain'])} | {format_interval(e['vs_run'])} | "
            f"{e['vs_run']['wins']} / {e['vs_run']['losses']} |"
        )
    return "\n".join(lines)


def _num(value: float | None, digits: int = 3) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _share(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


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
                    f"| {method} | {part} | {s['n']} | {_num(s['plain'])} | {_num(s['gate'])} | "
                    f"{_num(s['loop'])} | {_num(s['in_run'])} | {_num(s['oracle'])} | "
                    f"{s['n'] - s['differ']}: {_num(s['agree_f1'])} | {s['differ']} "
                    f"({s['loop_scored']}): {_num(s['differ_gate'])} / {_num(s['differ_loop'])} |"
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
                    [_num(v["f1"]), _share(v["captured"]), str(v["switched"])] if v else ["–"] * 3
                )
            lines.append(f"| {method} | {rule} | {t} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
