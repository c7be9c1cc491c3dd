"""The candidates a run already has, read from its rows: one :class:`Candidate` type for every
answer (plain RAG's, as the gate gave it, and each method's loop answer) and one
:class:`Pair` per row of a gated method (its two candidates), which every replay reads.

A loop answer's ``p`` comes from the run's ``selection_scores.jsonl``
(:mod:`lab.replay.scoring`); a row of escalating_rag carries its candidates itself.
F1 of an answer a run did not give is taken after the short-answer step's rules
(:func:`short_f1`), as the graph would have given it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gaprag.eval.scoring import short_f1
from gaprag.eval.stats import BASELINE
from gaprag.nodes import choice
from gaprag.nodes.gate import GATE_STOP, PLAIN_TOP_K, read_gate
from lab.replay.rundir import Key, question_indices, read_records, rows, run_dir_of

#: the re-scored final answers beside a run's rows
SCORES = "selection_scores.jsonl"


def read_scores(run_dir: str | Path) -> dict[Key, dict[str, Any]]:
    """(method, question id) -> its score record."""
    return read_records(Path(run_dir) / SCORES)


def number(value: Any) -> float | None:
    """A recorded probability as a float; None for anything else."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Candidate(choice.Candidate):
    """One answer a run produced for a question, as the answer-choice rules take it (its text
    and probability ``p``, None: not scored), with its F1 and the LLM calls it took."""

    f1: float = 0.0
    calls: int = 0


@dataclass(frozen=True)
class Pair:
    """One row of a gated method: plain RAG's answer as the gate gave it (``gate``) and the
    method's (``loop``), with plain RAG's own answer in the same run (``plain``: standard_rag's
    row, None without one) and the row's F1 (``run_f1``)."""

    dataset: str
    method: str
    id: str
    index: int | None  # the question's place in its set (None: unknown)
    question: str
    answers: tuple[str, ...]
    plain: Candidate | None
    run_f1: float
    gate: Candidate
    loop: Candidate
    gate_stop: bool = False  # the gate answered: the loop never ran
    passages: tuple[str, ...] = ()  # plain RAG's passages, then the method's evidence, each once

    @property
    def agree(self) -> bool:
        """Nothing to choose: the gate answered, or the two answers agree."""
        return self.gate_stop or choice.agrees(self.gate.answer, self.loop.answer)

    @property
    def plain_f1(self) -> float:
        """Plain RAG's F1: its own row's, else the gate answer's."""
        return self.gate.f1 if self.plain is None else self.plain.f1

    @property
    def oracle(self) -> float:
        return max(self.plain_f1, self.gate.f1, self.loop.f1)


def _loop(row: Mapping[str, Any], score: Mapping[str, Any], gate_p: float | None) -> Candidate:
    """The method's answer: the row's (its ``p`` from its score record: the gate's own where
    the gate answered), or escalating_rag's last recorded candidate."""
    question, golds = str(row.get("question") or ""), row.get("answers") or []
    cands = [c for c in row.get("candidates") or [] if isinstance(c, Mapping)]
    if len(cands) >= 2:
        last = cands[-1]
        answer = str(last.get("answer") or "")
        calls = int(last.get("llm_calls") or 0)
        return Candidate(answer, number(last.get("p")), short_f1(question, answer, golds), calls)
    p = gate_p if score.get("path") == "gate_stop" else number(score.get("p"))
    calls = max(0, int(row.get("llm_calls") or 0) - 1)  # the gate's call is plain RAG's
    return Candidate(str(row.get("prediction") or ""), p, float(row.get("f1") or 0.0), calls)


def pair(
    row: Mapping[str, Any],
    *,
    index: int | None = None,
    plain: Candidate | None = None,
    score: Mapping[str, Any] | None = None,
) -> Pair | None:
    """The row's two candidates, or None for a row without both (an error, no gate answer).
    ``plain``: standard_rag's answer to the question in the same run (:func:`plain_answers`);
    ``score``: the row's score record."""
    if row.get("error"):
        return None
    cands = [c for c in row.get("candidates") or [] if isinstance(c, Mapping)]
    reading = read_gate(row.get("decisions") or [])
    said = str(cands[0].get("answer") or "") if len(cands) >= 2 else reading.answer
    if said is None:
        return None
    question, golds = str(row.get("question") or ""), tuple(row.get("answers") or ())
    gate_p = reading.p
    gate = Candidate(said, gate_p, short_f1(question, said, golds), 1)
    # plain RAG's passages are the first the run showed (its gate's call comes first)
    shown = [str(i) for i in row.get("shown_ids") or []][:PLAIN_TOP_K]
    return Pair(
        dataset=str(row.get("dataset")),
        method=str(row.get("method")),
        id=str(row.get("id")),
        index=index,
        question=question,
        answers=golds,
        plain=plain,
        run_f1=float(row.get("f1") or 0.0),
        gate=gate,
        loop=_loop(row, score or {}, gate_p),
        gate_stop=row.get("stop_reason") == GATE_STOP,
        passages=tuple(dict.fromkeys(shown + [str(i) for i in row.get("evidence_ids") or []])),
    )


def plain_answers(run_rows: Sequence[Mapping[str, Any]]) -> dict[str, Candidate]:
    """Question id -> plain RAG's (standard_rag's) answer in the same run, with its F1."""
    return {
        str(r.get("id")): Candidate(
            str(r.get("prediction") or ""), None, float(r.get("f1") or 0.0), 1
        )
        for r in run_rows
        if r.get("method") == BASELINE and not r.get("error")
    }


def walk(
    dirs: Sequence[str | Path], methods: Sequence[str] = ()
) -> Iterator[tuple[Path, dict[str, Any], int | None, Candidate | None]]:
    """Every row of ``dirs`` (of ``methods``; all when empty) with its run directory, its
    question's index in the set and plain RAG's answer to it in the same run."""
    for d in dirs:
        run_dir = run_dir_of(d)
        found = rows(run_dir)
        index = question_indices(run_dir)
        plain = plain_answers(found)
        for row in found:
            qid = str(row.get("id"))
            if not methods or str(row.get("method")) in methods:
                yield run_dir, row, index.get(qid), plain.get(qid)


def pairs(dirs: Sequence[str | Path], methods: Sequence[str] = ()) -> list[Pair]:
    """Every gated row of ``dirs`` (of ``methods``; all when empty) as a :class:`Pair`."""
    scores: dict[Path, dict[Key, dict[str, Any]]] = {}
    out: list[Pair] = []
    for run_dir, row, index, plain in walk(dirs, methods):
        if run_dir not in scores:
            scores[run_dir] = read_scores(run_dir)
        key = (str(row.get("method")), str(row.get("id")))
        made = pair(row, index=index, plain=plain, score=scores[run_dir].get(key))
        if made is not None:
            out.append(made)
    return out
