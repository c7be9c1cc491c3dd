"""The paper configuration beside the shipped profile and plain RAG, on the questions the paper
run has answered: one Markdown table, and with --readme README's section around it.

    python scripts/paper_table.py docs/results/n50/paper docs/results/n50/gated \
        [--ladder docs/results/n50/rag_ef_paper docs/results/n50/rag_ef] \
        [--readme README.md] [--pages docs/methods]

PAPER and SHIPPED are run folders with one sub-folder per set (`gaprag eval` output). Each
method's `<method>_paper` rows of PAPER are paired per question with PAPER's plain RAG rows; the
same method's rows of SHIPPED with SHIPPED's plain RAG rows, on the same questions. ΔF1 is the
paired mean with its 95% bootstrap interval (gaprag.eval.stats.paired_rows).

RAG-EF answers from its own pair store, so it is measured on its ladder (``bash
scripts/eval_n50.sh rag_ef_paper`` and ``rag_ef``): ``--ladder`` adds its row, S ∪ E_r
(``rag_ef_SE_reworded``) of each ladder paired with that ladder's plain RAG."""

from __future__ import annotations

import argparse
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gaprag.eval.results import read_results
from gaprag.eval.stats import paired_rows

METHODS = {
    "missing_knowledge": "Missing-Knowledge",
    "iterkey": "IterKey",
    "migres": "MIGRES",
    "rfm_rag": "RFM-RAG",
    "ircot": "IRCoT",
    "rag_ef": "RAG-EF (ladder, S ∪ E_r)",
}
#: LLM calls a question as each paper counts them (its method page, "the paper's count"); IterKey:
#: 3 calls a round, 1.38 rounds on average with Llama-3.1-8B, at most 5 rounds; MIGRES's paper
#: checks facts with an NLI model, an LLM call each here; RFM-RAG: 2R + 1 at the paper's mean R
#: of 1.93-2.62 retrievals; IRCoT: the released code's bound (10 reasoning steps, then the
#: reader)
PAPER_CALLS = {
    "missing_knowledge": "3",
    "iterkey": "≈ 4.1 (≤ 15)",
    "migres": "≤ 10 + NLI checks",
    "rfm_rag": "4.9-6.2",
    "ircot": "≤ 11",
    "rag_ef": "1",
}
#: the ladder's variant in the RAG-EF row: Eq. 2 over S and one reworded expert pair a question
LADDER_VARIANT = "rag_ef_SE_reworded"
SETS = {"hotpotqa": "HotpotQA", "2wikimultihopqa": "2Wiki", "musique": "MuSiQue"}
#: questions 0-19 of each set: the paper run when complete
QUESTIONS = 20
HEADING = "### Each method as its paper gives it"
NEXT = "## Fresh machine: two commands"


def rows_of(run: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for name in SETS:
        path = run / name / "results.jsonl"
        if path.is_file():
            out += [r for r in read_results(path) if not r.get("error")]
    return out


def of_method(
    rows: Sequence[dict[str, Any]], method: str, ids: set[tuple[str, str]]
) -> list[dict[str, Any]]:
    """``method``'s rows on the questions ``ids``."""
    return [r for r in rows if r["method"] == method and (r["dataset"], r["id"]) in ids]


def paired(base: list[dict[str, Any]], other: list[dict[str, Any]]) -> dict[str, Any] | None:
    """``other`` against ``base`` on the questions both answered; None without such rows."""
    return paired_rows(base, other) if base and other else None


@dataclass(frozen=True)
class Comparison:
    """One method on the questions its paper mode answered: paper mode (``mine``) and its run's
    plain RAG (``plain``), each run's paired entry against its own plain RAG (``ours``: paper
    mode, ``theirs``: the shipped profile)."""

    method: str
    mine: list[dict[str, Any]]
    plain: list[dict[str, Any]]
    ours: dict[str, Any] | None
    theirs: dict[str, Any] | None


def compare(
    paper: Sequence[dict[str, Any]],
    shipped: Sequence[dict[str, Any]],
    method: str,
    variant: str | None = None,
) -> Comparison | None:
    """``method`` in both runs, paired per question; None before the paper run has rows of it.
    Its rows are ``<method>_paper`` in the paper run and ``method`` in the shipped one, or
    ``variant`` in both (two runs of the same variant, e.g. RAG-EF's ladders)."""
    mine = [r for r in paper if r["method"] == (variant or f"{method}_paper")]
    if not mine:
        return None
    ids = {(r["dataset"], r["id"]) for r in mine}
    plain = of_method(paper, "standard_rag", ids)
    theirs = paired(
        of_method(shipped, "standard_rag", ids), of_method(shipped, variant or method, ids)
    )
    return Comparison(method, mine, plain, paired(plain, mine), theirs)


def comparisons(
    paper: Sequence[dict[str, Any]], shipped: Sequence[dict[str, Any]]
) -> list[Comparison]:
    """Every method with paper-mode rows in ``paper`` (the paper run's rows)."""
    found = (compare(paper, shipped, method) for method in METHODS)
    return [c for c in found if c is not None]


def ladder(paper: Path, shipped: Path) -> Comparison | None:
    """RAG-EF's row: S ∪ E_r of the paper ladder and of the shipped ladder, each paired with
    its own ladder's plain RAG; None before the paper ladder has rows of it."""
    return compare(rows_of(paper), rows_of(shipped), "rag_ef", LADDER_VARIANT)


def cell(entry: dict[str, Any] | None) -> tuple[str, str, str, str]:
    """(F1, ΔF1 [CI], calls, s) of a paired entry."""
    if not entry or "f1" not in entry:
        return "–", "–", "–", "–"
    lo, hi = entry["f1"]["ci"]
    after = entry["after"]
    return (
        f"{after['f1']:.3f}",
        f"{entry['f1']['mean']:+.3f} [{lo:+.3f}, {hi:+.3f}]",
        f"{after['llm_calls']:.1f}",
        f"{after['wall_s']:.0f}",
    )


def table(found: Sequence[Comparison]) -> str:
    lines = [
        "| method | questions | plain RAG F1 | paper mode F1 | ΔF1 vs plain RAG [95% CI] | LLM calls / q | s / q | the paper's calls / q | plain RAG F1 (shipped run) | shipped profile F1 | ΔF1 vs plain RAG [95% CI] | LLM calls / q | s / q |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in found:
        ours, theirs = c.ours, c.theirs
        f1, delta, calls, secs = cell(ours)
        s_f1, s_delta, s_calls, s_secs = cell(theirs)
        plain = f"{ours['before']['f1']:.3f}" if ours else "–"
        s_plain = f"{theirs['before']['f1']:.3f}" if theirs and "f1" in theirs else "–"
        if theirs and ours and theirs["n"] != ours["n"]:
            s_plain += f" (n = {theirs['n']})"
        n = ours["n"] if ours else 0
        lines.append(
            f"| {METHODS[c.method]} | {n} | {plain} | {f1} | {delta} | {calls} | {secs} "
            f"| {PAPER_CALLS[c.method]} | {s_plain} | {s_f1} | {s_delta} | {s_calls} | {s_secs} |"
        )
    return "\n".join(lines) + "\n"


def verdict(found: Sequence[Comparison]) -> str:
    """Which paper-mode ΔF1 intervals exclude 0 (a measured gain or loss), in words."""
    named = []
    for c in found:
        if c.ours and "f1" in c.ours:
            lo, hi = c.ours["f1"]["ci"]
            if lo > 0 or hi < 0:
                named.append(f"{METHODS[c.method]} {'above' if lo > 0 else 'below'} plain RAG")
    return "; ".join(named) if named else "no paper-mode interval excludes 0"


def answered(rows: Sequence[dict[str, Any]]) -> dict[str, int]:
    """How many questions of each set (by its label) a run answered with every method."""
    keys = {r["method"] for r in rows}
    counts = {}
    for name, label in SETS.items():
        per_method = [
            {r["id"] for r in rows if r["dataset"] == name and r["method"] == m} for m in keys
        ]
        common = set.intersection(*per_method) if per_method else set()
        if common:
            counts[label] = len(common)
    return counts


def covered(counts: dict[str, int]) -> str:
    """What the run covers, in words, from ``answered``'s counts."""
    if counts == dict.fromkeys(SETS.values(), QUESTIONS):
        return f"questions 0-{QUESTIONS - 1} of each set, {QUESTIONS * len(SETS)} paired"
    done = ", ".join(f"{n} of {label}" for label, n in counts.items()) or "none yet"
    return f"{done}; 0-{QUESTIONS - 1} of each set when complete"


LADDER_NOTE = """
RAG-EF on its HotpotQA ladder instead (its own corpus and plain RAG, one expert pair reworded from each test question): S by the paper's Appendix A instruction and paper mode (`{commit}`, `bash scripts/eval_n50.sh rag_ef_paper`) beside the shipped ladder, whose seconds were taken on a busy machine ([its page](docs/methods/rag_ef.md#paper-mode)).
"""


def not_yet(found: Sequence[Comparison]) -> str:
    """A line naming the methods the paper run has no rows of yet (a method whose paper mode
    changed has its rows made again at its own pinned commit)."""
    have = {c.method for c in found if c.ours}
    missing = [METHODS[m] for m in METHODS if m != "rag_ef" and m not in have]
    if not missing:
        return ""
    return (
        f"No paper-mode rows yet: {', '.join(missing)} (IRCoT's are made at commit "
        f"`{pinned_commit('PAPER_IRCOT_COMMIT')}` by `bash scripts/eval_n50.sh paper-ircot`; "
        "[its page](docs/methods/ircot.md#paper-mode-beside-the-shipped-profile))."
    )


def readme_section(found: Sequence[Comparison], done: str, commit: str) -> str:
    rag_ef = any(c.method == "rag_ef" for c in found)
    note = LADDER_NOTE.format(commit=pinned_commit("RAG_EF_PAPER_COMMIT")) if rag_ef else ""
    if missing := not_yet(found):
        note = f"\n{missing} {note.lstrip()}" if note else f"\n{missing}\n"
    return f"""{HEADING}

`--profile paper` beside the shipped profile, each paired per question with plain RAG of its own run, on what the
paper run has answered ({done}; {verdict(found)}):
commit `{commit}`, IRCoT `{pinned_commit("PAPER_IRCOT_COMMIT")}` (earlier rows: see `scripts/eval_n50.sh`), the same model, a 32k context, the prompt cache on ([it changes some replies](docs/evaluation.md#repeatability); off in the shipped run, whose seconds are not comparable),
2-core CPU, 2026-11-28 (plain RAG, IterKey) and 2026-12-02 (the others) (`bash scripts/eval_n50.sh paper`, `python scripts/paper_table.py --help`).

{table(found)}{note}
"""


PAGE_HEADING = "### Paper mode beside the shipped profile"


def page_section(c: Comparison, done: str, commit: str, shipped_commit: str) -> str:
    """A method page's section: its row of the table, one line per configuration, and where
    paper mode stopped."""
    lines = ["| configuration | questions | F1 | ΔF1 vs its run's plain RAG [95% CI] | LLM calls / q | s / q |",
             "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for label, entry in (("paper mode", c.ours), ("shipped profile", c.theirs)):
        if entry and "f1" in entry:
            f1, delta, calls, secs = cell(entry)
            before = entry["before"]
            lines.append(
                f"| plain RAG ({label} run) | {entry['n']} | {before['f1']:.3f} | | "
                f"{before['llm_calls']:.1f} | {before['wall_s']:.0f} |"
            )
            lines.append(f"| {label} | {entry['n']} | {f1} | {delta} | {calls} | {secs} |")
    answers = ""
    if c.plain:
        words = [
            sum(len(str(r.get("prediction") or "").split()) for r in side) / len(side)
            for side in (c.mine, c.plain)
        ]
        acc = [
            sum(float(r.get("acc") or 0) for r in side) / len(side) for side in (c.mine, c.plain)
        ]
        answers = (
            f"Answers: {words[0]:.1f} words on average in paper mode, {words[1]:.1f} for plain "
            f"RAG (token F1 counts every extra word against an answer); the gold answer is in the "
            f"reply (`acc`) for {acc[0]:.3f} of paper mode's and {acc[1]:.3f} of plain RAG's. "
        )
    stops = Counter(str(r.get("stop_reason")) for r in c.mine)
    stopped = ", ".join(f"`{k}` {v}" for k, v in stops.most_common())
    return f"""{PAGE_HEADING}

`--profile paper` and the shipped profile on the questions the paper run has answered
({done}), each paired per question with plain RAG of its own run: paper mode at
commit `{commit}` (earlier rows: see `scripts/eval_n50.sh`; 32k context, prompt cache on), the shipped profile from the gated run
(commit `{shipped_commit}`, prompt cache off: its seconds are not comparable); the same model, 2-core
CPU (`bash scripts/eval_n50.sh paper`; table by `python scripts/paper_table.py --pages`; all
methods in [the README](../../README.md#each-method-as-its-paper-gives-it)).

{chr(10).join(lines)}

{answers}Where paper mode stopped ({len(c.mine)} questions): {stopped}.

"""


def write_page_section(page: Path, section: str) -> None:
    """``section`` in ``page`` in place of the old one, else first under "## Measured"."""
    text = page.read_text(encoding="utf-8")
    start = text.find(PAGE_HEADING)
    if start >= 0:
        end = min(i for i in (text.find("\n### ", start + 1), text.find("\n## ", start + 1),
                              len(text)) if i >= 0) + 1  # fmt: skip
        text = text[:start] + section + text[end:]
    else:
        at = text.index("## Measured\n") + len("## Measured\n")
        text = text[:at] + "\n" + section + text[at:].lstrip("\n")
    page.write_text(text, encoding="utf-8")


def write_section(readme: Path, section: str) -> None:
    """``section`` in ``readme`` in place of the old one, else before "Fresh machine"."""
    text = readme.read_text(encoding="utf-8")
    end = text.index(NEXT)
    start = text.find(HEADING)
    text = text[: start if 0 <= start < end else end] + section + text[end:]
    readme.write_text(text, encoding="utf-8")


def pinned_commit(name: str, script: Path = Path("scripts/eval_n50.sh")) -> str:
    """The commit the evaluation script pins as ``name`` (e.g. PAPER_COMMIT)."""
    found = re.search(rf"^{name}=(\w+)", script.read_text(encoding="utf-8"), re.M)
    return found.group(1) if found else "?"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paper", type=Path, help="the paper run's folder (one sub-folder per set)")
    parser.add_argument("shipped", type=Path, help="the shipped profile's run folder")
    parser.add_argument(
        "--ladder", type=Path, nargs=2, metavar=("PAPER_LADDER", "SHIPPED_LADDER"),
        help="RAG-EF's ladder run folders (paper mode, shipped) for its row",
    )  # fmt: skip
    parser.add_argument("--readme", type=Path, help="write the section into this README too")
    parser.add_argument(
        "--pages", type=Path, metavar="DIR",
        help="write each method's section into its page DIR/<method>.md (docs/methods)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    paper = rows_of(args.paper)
    found = comparisons(paper, rows_of(args.shipped))
    rag_ef = ladder(*args.ladder) if args.ladder else None
    shown = [*found, rag_ef] if rag_ef else found
    print(table(shown), end="")
    done, commit = covered(answered(paper)), pinned_commit("PAPER_COMMIT")
    if args.readme:
        write_section(args.readme, readme_section(shown, done, commit))
    if args.pages:
        shipped_commit = pinned_commit("GATED_COMMIT")
        for c in found:
            pin = pinned_commit("PAPER_IRCOT_COMMIT") if c.method == "ircot" else commit
            section = page_section(c, done, pin, shipped_commit)
            write_page_section(args.pages / f"{c.method}.md", section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
