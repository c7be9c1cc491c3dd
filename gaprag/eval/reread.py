"""Offline reread: break a tie between a run's candidates with one more reading.

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
import json
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gaprag.datasets import CALIBRATION_START, REPORTED_QUESTIONS, load_dataset
from gaprag.eval.record import RUN_FILE
from gaprag.eval.results import read_results
from gaprag.eval.selection import (
    append_record,
    format_interval,
    paired_delta,
    pending_rows,
    question_indices,
    read_records,
    run_dir_of,
)
from gaprag.eval.stats import BASELINE, dedupe, gate_answer
from gaprag.metrics import f1_score
from gaprag.nodes.answer import clean_answer
from gaprag.nodes.choice import agrees
from gaprag.nodes.gate import (
    GATE_STOP,
    PLAIN_ANSWER_MAX_TOKENS,
    PLAIN_PASSAGE_WORDS,
    PLAIN_TOP_K,
    logprob_signals,
    plain_rag,
)
from gaprag.nodes.render import render_passages
from gaprag.nodes.short_answer import rule_answer

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


@dataclass(frozen=True)
class Pair:
    """One row's two candidates, as answers and as F1."""

    dataset: str
    method: str
    id: str
    question: str
    answers: tuple[str, ...]
    plain: str
    loop: str
    run_f1: float  # the row's own F1
    plain_f1: float
    loop_f1: float
    passages: tuple[str, ...]  # plain RAG's passages, then the method's evidence, each once

    @property
    def differ(self) -> bool:
        return not agrees(self.plain, self.loop)


def _f1(question: str, answer: str, golds: Sequence[str]) -> float:
    short = rule_answer(question, answer)
    return f1_score(answer if short is None else short, list(golds))


def pair(row: Mapping[str, Any]) -> Pair | None:
    """The row's candidates, or None for a row without both (an error, no gate answer, the
    gate answered)."""
    if row.get("error") or row.get("stop_reason") == GATE_STOP:
        return None
    question, golds = str(row.get("question") or ""), tuple(row.get("answers") or ())
    cands = [c for c in row.get("candidates") or [] if isinstance(c, Mapping)]
    if len(cands) >= 2:
        plain, loop = str(cands[0].get("answer") or ""), str(cands[-1].get("answer") or "")
        loop_f1 = _f1(question, loop, golds)
    else:
        plain, loop = gate_answer(row) or "", str(row.get("prediction") or "")
        loop_f1 = float(row.get("f1") or 0.0)
    if not plain:
        return None
    # plain RAG's passages are the first the run showed (its gate's call comes first)
    plain_ids = [str(i) for i in row.get("shown_ids") or []][:PLAIN_TOP_K]
    return Pair(
        dataset=str(row.get("dataset")),
        method=str(row.get("method")),
        id=str(row.get("id")),
        question=question,
        answers=golds,
        plain=plain,
        loop=loop,
        run_f1=float(row.get("f1") or 0.0),
        plain_f1=_f1(question, plain, golds),
        loop_f1=loop_f1,
        passages=tuple(dict.fromkeys(plain_ids + [str(i) for i in row.get("evidence_ids") or []])),
    )


def read_rereads(run_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """``(method, id) -> record`` of ``reread.jsonl`` (empty when there is none)."""
    return read_records(run_dir / REREAD_FILE)


def _documents(run_dir: Path) -> dict[str, Mapping[str, Any]]:
    run = json.loads((run_dir / RUN_FILE).read_text(encoding="utf-8"))
    dataset = load_dataset(str(run.get("dataset_path") or run.get("dataset")))
    return {str(d["id"]): d for d in dataset.documents()}


async def areread_runs(
    dirs: Sequence[str | Path],
    llm: LLM,
    *,
    methods: Sequence[str] = (),
    limit: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> int:
    """Reread every row of ``dirs`` whose candidates differ and that has none yet (at most
    ``limit`` this time), appending as each finishes; returns how many were sent."""
    done = 0
    docs: dict[Path, dict[str, Mapping[str, Any]]] = {}
    for run_dir, row in pending_rows(dirs, REREAD_FILE, methods):
        found = pair(row)
        if found is None or not found.differ:
            continue
        if limit is not None and done >= limit:
            return done
        if run_dir not in docs:
            docs[run_dir] = _documents(run_dir)
        passages = [docs[run_dir][i] for i in found.passages if i in docs[run_dir]]
        scored = await llm.agenerate_scored(
            reread_messages(found.question, passages), max_tokens=PLAIN_ANSWER_MAX_TOKENS
        )
        signals = logprob_signals(scored.tokens) if scored.tokens else None
        record = {
            "method": found.method,
            "id": found.id,
            "answer": clean_answer(scored.text),
            "logprob_mean": None if signals is None else signals.get("logprob_mean"),
            "passages": len(passages),
        }
        append_record(run_dir / REREAD_FILE, record)
        done += 1
        if progress is not None:
            progress(f"{run_dir.name} {found.method} {found.id}: {record['answer']!r}")
    return done


def reread_runs(dirs: Sequence[str | Path], llm: LLM, **kwargs: Any) -> int:
    """:func:`areread_runs`, run to completion."""
    return asyncio.run(areread_runs(dirs, llm, **kwargs))


def pick(rule: str, p: Pair, reread: str) -> float:
    """The F1 of the answer ``rule`` keeps for ``p`` given the reread's answer (where the two
    candidates agree, theirs)."""
    if not p.differ:
        return p.loop_f1
    reread_f1 = _f1(p.question, reread, p.answers)
    if rule == "reread":
        return reread_f1
    to_plain = f1_score(reread, [p.plain])
    to_loop = f1_score(reread, [p.loop])
    if max(to_plain, to_loop) >= MATCH_F1:
        return p.plain_f1 if to_plain > to_loop else p.loop_f1
    fallback = {"vote_loop": p.loop_f1, "vote_plain": p.plain_f1, "vote_reread": reread_f1}
    return fallback[rule]


def replay(dirs: Sequence[str | Path], methods: Sequence[str] = ()) -> str:
    """Per method and part (``fit``: questions 60 on; ``check``: below 50): the run's F1 and
    each rule's, over every row of the method (agreeing and gate-stopped rows keep their
    answer), as Markdown; rows whose reread is missing keep the run's answer."""
    parts: dict[tuple[str, str], list[tuple[float, float, float | None, dict[str, float]]]]
    parts = defaultdict(list)
    for d in dirs:
        run_dir = run_dir_of(d)
        index = question_indices(run_dir)
        rereads = read_rereads(run_dir)
        rows = dedupe(read_results(run_dir))
        plain_f1 = {
            str(r.get("id")): float(r.get("f1") or 0.0) for r in rows if r.get("method") == BASELINE
        }
        for row in rows:
            method, qid = str(row.get("method")), str(row.get("id"))
            if method == BASELINE or (methods and method not in methods) or row.get("error"):
                continue
            i = index.get(qid)
            if i is None or REPORTED_QUESTIONS <= i < CALIBRATION_START:
                continue
            part = "fit" if i >= CALIBRATION_START else "check"
            found, record = pair(row), rereads.get((method, qid))
            run = float(row.get("f1") or 0.0)
            plain = plain_f1.get(qid, found.plain_f1 if found else run)
            if found is None or not found.differ or record is None:
                rules = dict.fromkeys(RULES, run)
                sent = None
            else:
                rules = {r: pick(r, found, str(record.get("answer") or "")) for r in RULES}
                sent = 1.0
            parts[(method, part)].append((plain, run, sent, rules))
    lines = [
        "| method | part | n | rereads / q | plain RAG | the run | "
        + " | ".join(RULES)
        + " | vote_loop − the run | vote_loop − plain RAG |",
        "|---|---|---:|---:|---:|---:|" + "---:|" * len(RULES) + "---:|---:|",
    ]
    for (method, part), items in sorted(parts.items()):
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
