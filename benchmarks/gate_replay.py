"""What the shared gate would give each iterative method, replayed from calibration rows.

The gate answers as plain RAG does, scores that answer and runs the method's loop only when
the score is under a threshold. Given, on the same calibration questions (index 60 on),

- plain RAG's answer and its token-logprob signals (``benchmarks/gate_signals.py`` rows), and
- the method's own calibration rows (``gaprag calibrate`` runs, every decision recorded),

each method row is replayed at the method's shipped loop threshold (its model profile), and the
gate is put in front of it: a question whose plain-RAG confidence ``p`` (``exp`` of the signal,
a token logprob) reaches the gate's threshold answers with plain RAG's answer at one call;
the others pay that call plus the loop's. Rows from a calibration run with the gate
(``gaprag calibrate --gate``) carry the gate decision themselves and are replayed as they are.
The threshold is chosen as ``gaprag calibrate`` chooses (:func:`gaprag.eval.calibrate.gate_curves`:
mean F1 minus a cost per LLM call, ties to the higher threshold), and every grid point is
marked when no other point of that method (ungated included) beats it on F1 and calls.

    python benchmarks/gate_replay.py \\
        --signals docs/results/calibration/gate_signals/qwen2.5-coder-1.5b.jsonl \\
        --runs docs/results/calibration/qwen2.5-coder-1.5b/{a,b,rfm,gate}/* \\
        --out docs/results/calibration/gate_replay/qwen2.5-coder-1.5b
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gaprag.datasets import CALIBRATION_START
from gaprag.eval.calibrate import GATE_NODES, gate_curves, gate_replay, replay
from gaprag.eval.results import read_results
from gaprag.eval.stats import pareto_front
from gaprag.graphs import ITERATIVE, calibration, context_class
from gaprag.nodes.gate import probability
from gaprag.profiles import load_profile

SIGNAL = "logprob_mean"
#: LLM calls per question each method's paper spends (MIGRES 6-10: the upper end; IterKey
#: about 4: taken as at most 5; IRCoT: its step bound plus one); a gate threshold whose mean
#: calls exceed it is chosen only with --no-caps
PAPER_CALLS: dict[str, float] = {
    "missing_knowledge": 3.0, "iterkey": 5.0, "migres": 10.0, "rfm_rag": 6.0, "ircot": 6.0,
}  # fmt: skip
#: the gate_signals field of each gate signal
SIGNAL_FIELDS = {
    "logprob_mean": "lp_mean",
    "logprob_min": "lp_min",
    "logprob_margin": "lp_first_margin",
}


def plain_rag(
    rows: Sequence[Mapping[str, Any]], signal: str
) -> dict[tuple[str, str], dict[str, Any]]:
    """(dataset, id) -> plain RAG's answer and the gate's ``p`` on it."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        if int(r.get("index", CALIBRATION_START)) < CALIBRATION_START:
            raise SystemExit(
                f"gate_replay: {r.get('dataset')} question {r.get('index')} is not a calibration question"
            )
        value = (r.get("signals") or {}).get(SIGNAL_FIELDS[signal])
        rag = r.get("rag") or {}
        if value is None or rag.get("answer") is None:
            continue
        out[(str(r["dataset"]), str(r["id"]))] = {
            "answer": rag["answer"],
            "p": probability(signal, float(value)),  # type: ignore[arg-type]
            "f1": rag.get("f1"),
        }
    return out


def at_profile(
    row: Mapping[str, Any], method: str, settings: Mapping[str, Any]
) -> tuple[float, float]:
    """The row's F1 and LLM calls had its loop decisions been taken at the shipped threshold."""
    declared = calibration(method)
    if declared is None:
        return float(row.get("f1") or 0.0), float(row.get("llm_calls") or 0)
    default = getattr(context_class(method)(), declared.setting)
    threshold = float(settings.get(declared.setting, default))
    choice = settings.get(declared.switch) if declared.switch else None
    if declared.switch and choice is None:
        choice = declared.choices[0] if declared.choices else None
    point = replay([row], declared.nodes, threshold, after_last=declared.after_last, choice=choice)
    return point.f1, point.llm_calls


def gated_rows(
    runs: Sequence[Path], plain: Mapping[tuple[str, str], Mapping[str, Any]], profile: Any
) -> list[dict[str, Any]]:
    """Every iterative method's calibration row with a gate decision: its own, or plain RAG's
    answer and ``p`` put in front of the row replayed at the shipped threshold."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for run in runs:
        for row in read_results(run):
            method, key = str(row.get("method")), (str(row.get("dataset")), str(row.get("id")))
            if method not in ITERATIVE or row.get("error"):
                continue
            if any(d.get("node") in GATE_NODES for d in row.get("decisions") or []):
                out[(method, *key)] = {**row, "source": "gated run"}
                continue
            if key not in plain or (method, *key) in out:
                continue
            f1, calls = at_profile(row, method, profile.settings(method) if profile else {})
            gate = {
                "node": "gate",
                "round": 0,
                "decision": "continue",
                "path": "logprobs",
                "p": plain[key]["p"],
                "answer": plain[key]["answer"],
            }
            out[(method, *key)] = {
                **row,
                "f1": f1,
                "llm_calls": calls + 1.0,
                "decisions": [gate],
                "source": "replayed",
            }
    return list(out.values())


def report(
    rows: Sequence[Mapping[str, Any]], signal: str, cost_per_call: float, caps: bool = True
) -> dict[str, Any]:
    methods = [m for m in ITERATIVE if any(r.get("method") == m for r in rows)]
    caps_used = PAPER_CALLS if caps else None
    curves = gate_curves(rows, methods, signal, cost_per_call=cost_per_call, max_calls=caps_used)
    for method, entry in curves.items():
        mine = [r for r in rows if r.get("method") == method]
        # every question stopped at the gate: plain RAG's answer alone
        entry["plain"] = gate_replay(mine, 0.0, cost_per_call=cost_per_call).as_dict()
        entry["cap"] = (caps_used or {}).get(method)
        entry["sources"] = {
            s: sum(r["source"] == s for r in mine) for s in ("replayed", "gated run")
        }
        entry["sets"] = sorted({str(r.get("dataset")) for r in mine})
        points = {f"{pt['threshold']}": (pt["f1"], pt["llm_calls"]) for pt in entry["grid"]}
        front = set(pareto_front(points))
        for pt in entry["grid"]:
            pt["unbeaten"] = f"{pt['threshold']}" in front
    return curves


def markdown(curves: Mapping[str, Any], signal: str, command: str) -> str:
    lines = [
        f"# The gate replayed on calibration questions ({signal})",
        "",
        f"Command: `{command}`",
        "",
        "Per method: each gate threshold `p` (probability of stopping, exp of the signal), the "
        "mean F1 and LLM calls per question had the gate stopped at it, the share stopped, and "
        "whether no other threshold of that method (the ungated loop is `p` = 1.01) has an F1 "
        "at least as high for no more calls. *chosen*: the best mean F1 - cost x calls.",
        "",
    ]
    for method, e in curves.items():
        chosen = e["chosen"]
        lines += [
            f"## {method}: {e['questions']} questions ({', '.join(e['sets'])}; "
            f"{e['sources']['replayed']} replayed, {e['sources']['gated run']} from gated runs)",
            "",
            f"Plain RAG's answer on these questions: F1 {e['plain']['f1']:.3f} at 1 call.",
            f"Chosen p = {chosen['threshold']}: F1 {chosen['f1']:.3f} at {chosen['llm_calls']:.2f} "
            f"calls, {chosen['stop_rate']:.0%} stopped at the gate -> profile {e['profile']}"
            + (f" (at most {e['cap']:g} calls, the paper's count)." if e.get("cap") else "."),
            *(
                [
                    f"Without that cap: p = {e['uncapped']['chosen']['threshold']}, F1 "
                    f"{e['uncapped']['chosen']['f1']:.3f} at {e['uncapped']['chosen']['llm_calls']:.2f} calls."
                ]
                if e.get("uncapped")
                else []
            ),
            "",
            "| p | F1 | LLM calls | stopped | unbeaten |",
            "|---:|---:|---:|---:|---|",
        ]
        for pt in e["grid"]:
            lines.append(
                f"| {pt['threshold']} | {pt['f1']:.3f} | {pt['llm_calls']:.2f} | "
                f"{pt['stop_rate']:.0%} | {'yes' if pt['unbeaten'] else ''} |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--signals", type=Path, required=True, help="gate_signals.py rows (JSONL)")
    ap.add_argument("--runs", type=Path, nargs="+", required=True, help="calibration run dirs")
    ap.add_argument(
        "--profile",
        default="qwen2.5-coder-1.5b",
        help="model profile (name or path; none: defaults)",
    )
    ap.add_argument("--signal", default=SIGNAL, choices=sorted(SIGNAL_FIELDS))
    ap.add_argument("--cost-per-call", type=float, default=0.005)
    ap.add_argument("--no-caps", action="store_true", help="ignore the papers' call counts")
    ap.add_argument("--out", type=Path, required=True, help="writes OUT.json and OUT.md")
    args = ap.parse_args(argv)
    if not args.signals.is_file():
        sys.exit(f"gate_replay: no {args.signals}")
    signal_rows = [json.loads(x) for x in args.signals.read_text().splitlines() if x.strip()]
    plain = plain_rag(signal_rows, args.signal)
    runs = [d for d in args.runs if (d / "results.jsonl").is_file()]
    profile = None if args.profile == "none" else load_profile(args.profile)
    rows = gated_rows(runs, plain, profile)
    if not rows:
        sys.exit("gate_replay: no method row shares a question with the signal rows")
    curves = report(rows, args.signal, args.cost_per_call, caps=not args.no_caps)
    command = "python benchmarks/gate_replay.py " + " ".join(argv or sys.argv[1:])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # OUT may hold dots (a model name): the suffixes are appended, not swapped in
    Path(f"{args.out}.json").write_text(json.dumps(curves, indent=2) + "\n")
    Path(f"{args.out}.md").write_text(markdown(curves, args.signal, command) + "\n")
    print(markdown(curves, args.signal, command))


if __name__ == "__main__":
    main()
