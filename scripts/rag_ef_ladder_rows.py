"""Print RAG-EF's ladder tables (README, rag_ef page) from the ladder's set directories, so the
pages quote the committed rows instead of copies typed by hand.

    python scripts/rag_ef_ladder_rows.py docs/results/n50/rag_ef/{hotpotqa,2wikimultihopqa,musique}

Each directory is one set of ``bash scripts/eval_n50.sh rag_ef``: ``results.jsonl`` (rows of
``standard_rag``, ``rag_ef_standard``, ``rag_ef_S``, ``rag_ef_SE`` and ``rag_ef_SE_reworded``),
``pairs.jsonl`` (the pair store as text; E's pairs carry the test question they reword) and,
where built, ``expert_reworded.jsonl`` (E_r, near copies replaced by sampled rewordings).
Prints:

1. per set and pooled, each variant's F1 and its paired ΔF1 against ``standard_rag`` (95%
   percentile-bootstrap interval, wins / losses);
2. for E and E_r, how far their questions are from the test questions, and S ∪ E (S ∪ E_r)
   against ``standard_rag`` split by it: on the questions whose pair is a near copy
   (word-overlap F1 >= 0.8 with the test question, the ladder's own cut) and on the real
   rewordings. E is an oracle to the degree its questions are the test questions, so the
   rewordings are the realistic part;
3. per set, what S is: its pairs, the paragraphs they were written for, and how long their
   answers are (the paper's Appendix A instruction asks for no length).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# the repository's research lab (lab/) is not installed: import it from this checkout
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from readme_tables import SET_NAMES  # this script's directory is on sys.path

from gaprag.eval.results import read_results
from gaprag.eval.stats import dedupe, summarize
from gaprag.metrics import f1_score
from lab.ladder import NEAR_COPY, paraphrase_overlap
from lab.replay.tables import delta_cell, figure, paired_delta

BASE = "standard_rag"
VARIANTS = ("rag_ef_standard", "rag_ef_S", "rag_ef_SE", "rag_ef_SE_reworded")
#: each expert set: its label, the journal it is read from, the variant that uses it
EXPERTS = (
    ("E", "pairs.jsonl", "rag_ef_SE"),
    ("E_r", "expert_reworded.jsonl", "rag_ef_SE_reworded"),
)
Overlap = dict[str, tuple[float, bool]]
#: (label, F1 by method, overlap by expert set, expert answer F1 by expert set)
Block = tuple[str, dict[str, dict[str, float]], dict[str, Overlap], dict[str, dict[str, float]]]


def f1_by_method(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """``{method: {question id: F1}}``, the last error-free row of each (method, id)."""
    out: dict[str, dict[str, float]] = {}
    for r in dedupe(rows):
        if r.get("error") or not isinstance(r.get("f1"), int | float):
            continue
        out.setdefault(str(r["method"]), {})[str(r["id"])] = float(r["f1"])
    return out


def expert_overlap(pairs: Sequence[Mapping[str, Any]]) -> dict[str, tuple[float, bool]]:
    """``{test question id: (word-overlap F1 of its E question against it, identical after
    normalisation)}``, as the ladder's ``expert_divergence`` measures them."""
    out: dict[str, tuple[float, bool]] = {}
    for p in pairs:
        meta = p.get("meta") or {}
        if p.get("source") == "expert" and meta.get("origin_id") and meta.get("original_question"):
            overlap = paraphrase_overlap(str(p["question"]), str(meta["original_question"]))
            out[str(meta["origin_id"])] = overlap
    return out


def expert_answer_f1(
    pairs: Sequence[Mapping[str, Any]], gold: Mapping[str, Sequence[str]]
) -> dict[str, float]:
    """``{test question id: F1 of the expert's stored answer against the test question's gold
    answers}``: whether the pair still carries the right answer (a rewording that changed the
    question gets the answer to the changed question)."""
    out: dict[str, float] = {}
    for p in pairs:
        origin = str((p.get("meta") or {}).get("origin_id") or "")
        if p.get("source") == "expert" and origin in gold:
            out[origin] = f1_score(str(p["answer"]), list(gold[origin]))
    return out


#: an answer longer than this many words reads as a sentence, not a short phrase
LONG_ANSWER = 10


def synthetic_cells(pairs: Sequence[Mapping[str, Any]]) -> list[str] | None:
    """S's row: pairs, paragraphs, pairs a paragraph, mean answer words, the share of answers
    over ``LONG_ANSWER`` words; None without synthetic pairs."""
    synthetic = [p for p in pairs if p.get("source") == "synthetic"]
    if not synthetic:
        return None
    words = [len(str(p.get("answer") or "").split()) for p in synthetic]
    paragraphs = len({p.get("chunk_id") for p in synthetic})
    return [
        f"{len(synthetic):,}",
        f"{paragraphs:,}",
        figure(len(synthetic) / paragraphs, places=1),
        figure(sum(words) / len(words), places=1),
        figure(sum(w > LONG_ANSWER for w in words) / len(words)),
    ]


def paired(base: Mapping[str, float], other: Mapping[str, float], ids: Sequence[str]) -> str:
    """``other - base`` on ``ids`` answered by both: mean [95% CI] (wins / losses, n)."""
    common = [i for i in ids if i in base and i in other]
    if not common:
        return "–"
    d = paired_delta([other[i] for i in common], [base[i] for i in common])
    return delta_cell({**d, "n": len(common)})


def stat_mean(stat: Mapping[str, Any] | None) -> str:
    """A summary statistic's mean, three places."""
    mean = (stat or {}).get("mean")
    return figure(float(mean), places=3) if mean is not None else "–"


def versus(vs: Mapping[str, Any] | None) -> str:
    """A summary's paired F1 difference: mean [95% CI] (wins / losses, n)."""
    return delta_cell((vs or {}).get("f1"))


def tables(
    sets: Sequence[tuple[str, list[dict[str, Any]], Mapping[str, list[dict[str, Any]]]]],
) -> str:
    """The two tables for ``(set name, result rows, {expert label: journal rows})`` per set,
    then pooled."""
    pooled_f1: dict[str, dict[str, float]] = {}
    pooled_overlap: dict[str, Overlap] = {}
    pooled_answers: dict[str, dict[str, float]] = {}
    blocks: list[Block] = []
    for name, rows, journals in sets:
        scores = f1_by_method(rows)
        gold = {str(r["id"]): r["answers"] for r in rows if isinstance(r.get("answers"), list)}
        overlaps = {label: expert_overlap(journals.get(label, [])) for label, _, _ in EXPERTS}
        answers = {
            label: expert_answer_f1(journals.get(label, []), gold) for label, _, _ in EXPERTS
        }
        blocks.append((SET_NAMES.get(name, name), scores, overlaps, answers))
        for m, s in scores.items():  # ids are unique across sets
            pooled_f1.setdefault(m, {}).update(s)
        for label, overlap in overlaps.items():
            pooled_overlap.setdefault(label, {}).update(overlap)
        for label, f1s in answers.items():
            pooled_answers.setdefault(label, {}).update(f1s)
    if len(blocks) > 1:
        blocks.append(("pooled", pooled_f1, pooled_overlap, pooled_answers))

    # the first table from the report's own summary, so its numbers are the report's
    summary = summarize([r for _, rows, _ in sets for r in rows])
    entries = [(SET_NAMES.get(n, n), summary["datasets"].get(n, {}).get("methods", {}))
               for n, _, _ in sets]  # fmt: skip
    if len(sets) > 1:
        entries.append(("pooled", summary.get("pooled") or {}))
    head = "| set | " + " | ".join([BASE, *VARIANTS]) + " |"
    out = [
        "F1 (ΔF1 against standard_rag [95% CI] (wins / losses, n)), as in the report:",
        "",
        head,
        "|---|" + "---:|" * (1 + len(VARIANTS)),
    ]
    for label, methods in entries:
        base = methods.get(BASE) or {}
        cells = [f"{stat_mean(base.get('f1'))} (n = {base.get('n', 0)})"]
        for v in VARIANTS:
            entry = methods.get(v)
            cells.append(
                f"{stat_mean(entry.get('f1'))}; {versus(entry.get('vs_baseline'))}"
                if entry
                else "–"
            )
        out.append(f"| {label} | " + " | ".join(cells) + " |")

    out += [
        "",
        f"The expert's questions against the test questions (word-overlap F1; near copy >="
        f" {NEAR_COPY}), the expert's answers against the gold answers (F1), and S ∪ E"
        " (S ∪ E_r) against standard_rag on each part:",
        "",
        "| set | expert set | pairs | mean overlap | identical | near copies | expert answer F1"
        " | S ∪ it − standard_rag, near copies | S ∪ it − standard_rag, rewordings | rag_ef_S −"
        " standard_rag, rewordings |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, scores, overlaps, answers in blocks:
        base, s = scores.get(BASE, {}), scores.get("rag_ef_S", {})
        for expert, _, variant in EXPERTS:
            overlap = overlaps.get(expert) or {}
            if not overlap:
                continue
            se = scores.get(variant, {})
            near = sorted(i for i, (o, _) in overlap.items() if o >= NEAR_COPY)
            reworded = sorted(i for i, (o, _) in overlap.items() if o < NEAR_COPY)
            identical = sum(same for _, same in overlap.values())
            mean = figure(sum(o for o, _ in overlap.values()) / len(overlap))
            right = answers.get(expert) or {}
            answer_f1 = figure(sum(right.values()) / len(right)) if right else "–"
            out.append(
                f"| {label} | {expert} | {len(overlap)} | {mean} | {identical} | {len(near)} "
                f"| {answer_f1} | {paired(base, se, near)} | {paired(base, se, reworded)} "
                f"| {paired(base, s, reworded)} |"
            )
    s_rows = [(SET_NAMES.get(n, n), synthetic_cells(j.get("E", []))) for n, _, j in sets]
    if any(cells for _, cells in s_rows):
        out += [
            "",
            "S, the synthetic pairs:",
            "",
            "| set | pairs | paragraphs | pairs a paragraph | answer words | answers over"
            f" {LONG_ANSWER} words |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        out += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in s_rows if cells]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path, help="ladder set directories")
    args = ap.parse_args()
    sets = []
    for d in args.dirs:
        for f in ("results.jsonl", "pairs.jsonl"):
            if not (d / f).is_file():
                raise SystemExit(f"rag_ef_ladder_rows: {d / f} not found (run the ladder first)")
        journals = {label: read_results(d / f) for label, f, _ in EXPERTS if (d / f).is_file()}
        sets.append((d.name, read_results(d / "results.jsonl"), journals))
    print(tables(sets))


if __name__ == "__main__":
    main()
