"""Offline reread (``python -m lab replay reread``): break a tie between a run's candidates with one more reading.

Where plain RAG's answer and a method's answer differ, a reread sends plain RAG's request over
plain RAG's passages followed by the method's evidence
(:func:`reread_messages`): a prompt under which neither candidate was
generated. Its answer then picks the candidate it matches.

1. :func:`reread_runs` sends that request for every row of ``gaprag eval`` directories whose
   candidates differ, and appends its answer and ``p`` to ``reread.jsonl`` beside the rows
   (resumable);
2. :func:`replay` reports, per method, on the calibration questions (index 60 on) and on the
   reported ones (below 50), the run's F1 and each rule's:

   - ``reread``: the reread's own answer;
   - ``vote_loop`` / ``vote_plain`` / ``vote_reread``: the candidate the reread's answer matches
     (token F1 at least :data:`MATCH_F1`, the closer one), else the method's answer, plain
     RAG's, or the reread's.

A row's candidates are its gate's answer (plain RAG's) and its method's answer; for
``escalating_rag`` rows, the ``candidates`` it recorded.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from gaprag.datasets import CALIBRATION_START, REPORTED_QUESTIONS
from gaprag.eval.scoring import short_f1
from gaprag.eval.stats import BASELINE
from gaprag.metrics import f1_score
from gaprag.nodes.answer import clean_answer
from gaprag.nodes.gate import (
    PLAIN_ANSWER_MAX_TOKENS,
    PLAIN_PASSAGE_WORDS,
    logprob_signals,
    plain_rag,
)
from gaprag.nodes.render import render_passages
from lab.replay.candidates import Pair, pair, walk
from lab.replay.rundir import (
    Extending,
    Key,
    documents,
    extend_runs,
    read_records,
)
from lab.replay.tables import format_interval, paired_delta

if TYPE_CHECKING:
    from gaprag.llm.client import LLM, Messages

#: the file of reread answers beside a run's rows
REREAD_FILE = "reread.jsonl"
#: the token F1 at which a reread's answer counts as naming a candidate
MATCH_F1 = 0.5
RULES = ("reread", "vote_loop", "vote_plain", "vote_reread")
#: the most passages a reread shows (plain RAG's five first, then the loop's evidence)
REREAD_PASSAGES = 10


def reread_messages(question: str, passages: Sequence[Mapping[str, Any]]) -> Messages:
    """Plain RAG's request over ``passages`` (plain RAG's, then the loop's evidence; at most
    :data:`REREAD_PASSAGES`, each cut as plain RAG cuts it): one prompt under which neither of
    the run's candidates was generated, so its answer can break their tie."""
    prompt, fmt = plain_rag()
    shown = render_passages(passages[:REREAD_PASSAGES], fmt, max_words=PLAIN_PASSAGE_WORDS)
    return prompt.render(question=question, passages=shown)


def tie(found: Pair | None) -> bool:
    """Whether a row's candidates differ, so a reread can break their tie (never where the
    gate answered or plain RAG gave no answer)."""
    return found is not None and bool(found.gate.answer) and not found.agree


def read_rereads(run_dir: Path) -> dict[Key, dict[str, Any]]:
    """``(method, id) -> record`` of ``reread.jsonl`` (empty when there is none)."""
    return read_records(run_dir / REREAD_FILE)


async def areread_runs(dirs: Sequence[str | Path], llm: LLM, **options: Unpack[Extending]) -> int:
    """Reread every row of ``dirs`` whose candidates differ and that has none yet (at most
    ``limit`` this time), appending as each finishes; returns how many were sent."""
    docs: dict[Path, dict[str, Mapping[str, Any]]] = {}

    async def reread(run_dir: Path, row: dict[str, Any]) -> dict[str, Any] | None:
        found = pair(row)
        if found is None or not tie(found):
            return None
        if run_dir not in docs:
            docs[run_dir] = documents(run_dir)
        passages = [docs[run_dir][i] for i in found.passages if i in docs[run_dir]]
        scored = await llm.agenerate_scored(
            reread_messages(found.question, passages), max_tokens=PLAIN_ANSWER_MAX_TOKENS
        )
        signals = logprob_signals(scored.tokens) if scored.tokens else None
        return {
            "method": found.method,
            "id": found.id,
            "answer": clean_answer(scored.text),
            "logprob_mean": None if signals is None else signals.get("logprob_mean"),
            "passages": len(passages),
        }

    return await extend_runs(dirs, REREAD_FILE, reread, shown="answer", **options)


def reread_runs(dirs: Sequence[str | Path], llm: LLM, **options: Unpack[Extending]) -> int:
    """:func:`areread_runs`, run to completion."""
    return asyncio.run(areread_runs(dirs, llm, **options))


def pick(rule: str, p: Pair, reread: str) -> float:
    """The F1 of the answer ``rule`` keeps for ``p`` given the reread's answer (where the two
    candidates agree, theirs)."""
    if p.agree:
        return p.loop.f1
    reread_f1 = short_f1(p.question, reread, p.answers)
    if rule == "reread":
        return reread_f1
    to_plain = f1_score(reread, [p.gate.answer])
    to_loop = f1_score(reread, [p.loop.answer])
    if max(to_plain, to_loop) >= MATCH_F1:
        return p.gate.f1 if to_plain > to_loop else p.loop.f1
    fallback = {"vote_loop": p.loop.f1, "vote_plain": p.gate.f1, "vote_reread": reread_f1}
    return fallback[rule]


Scored = tuple[float, float, float | None, dict[str, float]]


def _part(index: int | None) -> str | None:
    """``fit`` (questions 60 on), ``check`` (below 50), None for any other."""
    if index is None or REPORTED_QUESTIONS <= index < CALIBRATION_START:
        return None
    return "fit" if index >= CALIBRATION_START else "check"


def _scored(
    dirs: Sequence[str | Path], methods: Sequence[str]
) -> dict[tuple[str, str], list[Scored]]:
    """Per (method, part): each row's (plain RAG's F1, the run's, 1 where reread, each rule's
    F1); a row without both candidates, or without its reread, keeps the run's answer."""
    parts: dict[tuple[str, str], list[Scored]] = defaultdict(list)
    rereads: dict[Path, dict[Key, dict[str, Any]]] = {}
    for run_dir, row, index, plain in walk(dirs, methods):
        method, qid = str(row.get("method")), str(row.get("id"))
        part = _part(index)
        if method == BASELINE or row.get("error") or part is None:
            continue
        if run_dir not in rereads:
            rereads[run_dir] = read_rereads(run_dir)
        p, record = pair(row, plain=plain), rereads[run_dir].get((method, qid))
        run = float(row.get("f1") or 0.0)
        if p is None or not tie(p) or record is None:
            rules, sent = dict.fromkeys(RULES, run), None
        else:
            rules = {r: pick(r, p, str(record.get("answer") or "")) for r in RULES}
            sent = 1.0
        plain_f1 = p.plain_f1 if p else plain.f1 if plain else run
        parts[(method, part)].append((plain_f1, run, sent, rules))
    return parts


def replay(dirs: Sequence[str | Path], methods: Sequence[str] = ()) -> str:
    """Per method and part (``fit``: questions 60 on; ``check``: below 50): the run's F1 and
    each rule's, over every row of the method (agreeing and gate-stopped rows keep their
    answer), as Markdown; rows whose reread is missing keep the run's answer."""
    lines = [
        "| method | part | n | rereads / q | plain RAG | the run | "
        + " | ".join(RULES)
        + " | vote_loop − the run | vote_loop − plain RAG |",
        "|---|---|---:|---:|---:|---:|" + "---:|" * len(RULES) + "---:|---:|",
    ]
    for (method, part), items in sorted(_scored(dirs, methods).items()):
        n = len(items)
        plains, runs = [x[0] for x in items], [x[1] for x in items]
        cells = [f"{sum(x[3][r] for x in items) / n:.3f}" for r in RULES]
        vote = [x[3]["vote_loop"] for x in items]
        lines.append(
            f"| {method} | {part} | {n} | {sum(1 for x in items if x[2]) / n:.2f} | "
            f"{sum(plains) / n:.3f} | {sum(runs) / n:.3f} | "
            + " | ".join(cells)
            + f" | {format_interval(paired_delta(vote, runs))} | "
            + f"{format_interval(paired_delta(vote, plains))} |"
        )
    return "\n".join(lines)
