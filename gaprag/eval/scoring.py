"""The metric fields of a row: which passage ids a run showed and retrieved, and the answer
and support scores (:mod:`gaprag.metrics`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gaprag.datasets import Example
from gaprag.metrics import (
    accuracy,
    choose_option,
    exact_match,
    f1_score,
    gold_option,
    support_recall,
)
from gaprag.nodes.short_answer import rule_answer

_ID_KEYS = ("id", "ids", "doc_id", "doc_ids", "evidence_ids")


def _ids_in(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list | tuple):
        for v in value:
            if isinstance(v, str):
                yield v
            elif isinstance(v, dict) and isinstance(v.get("id"), str):
                yield v["id"]


def _id_list(value: Any) -> list[str] | None:
    """A graph output's id list (``shown_ids``/``retrieved_ids``), or None when absent."""
    if not isinstance(value, list | tuple):
        return None
    return list(dict.fromkeys(_ids_in(value)))


def shown_ids(output: Mapping[str, Any]) -> list[str] | None:
    """The passage ids rendered into at least one LLM prompt, as the graph recorded them.

    ``None`` when the graph does not report them (support recall is then left empty rather
    than guessed from text).
    """
    return _id_list(output.get("shown_ids"))


def retrieved_ids(output: Mapping[str, Any], retrievals: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every passage id any retrieval of the question returned: the graph's ``retrieved_ids``
    plus every search result recorded at the store, in order, once each."""
    seen: dict[str, None] = dict.fromkeys(_id_list(output.get("retrieved_ids")) or [])
    for hit in retrievals:
        for i in hit.get("ids", []):
            seen[i] = None
    return list(seen)


def seen_ids(output: Mapping[str, Any], retrievals: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every paragraph id the run touched: retrievals, evidence, ids in its trace (for traces)."""
    seen: dict[str, None] = dict.fromkeys(retrieved_ids(output, retrievals))
    for i in shown_ids(output) or []:
        seen[i] = None
    for ev in output.get("evidence") or []:
        if isinstance(ev, dict) and isinstance(ev.get("id"), str):
            seen[ev["id"]] = None
    for entry in output.get("trace") or []:
        if isinstance(entry, dict):
            for key in _ID_KEYS:
                for i in _ids_in(entry.get(key)):
                    seen[i] = None
    return list(seen)


def score(
    example: Example,
    prediction: str,
    shown: Iterable[str] | None,
    retrieved: Iterable[str] = (),
) -> dict[str, Any]:
    """The metric fields of a row (plus ``choice``/``choice_correct`` for multiple choice).

    ``support_recall`` is the share of gold supporting paragraphs among ``shown`` (the ids
    rendered into a prompt; ``None`` when the graph did not report them);
    ``retrieval_recall`` the share among ``retrieved`` (any retrieval's results).
    For a multiple-choice question whose prediction names an option ("D", "D. Masson
    trichrome", "Masson trichrome stain"), EM/F1/Acc compare that option's text with the
    gold, so they agree with ``choice_correct``; a prediction naming no option is scored as is.
    """
    scored = prediction
    extra: dict[str, Any] = {}
    if example.options:
        gold = gold_option(example.options, example.answers, example.answer_idx)
        choice = choose_option(prediction, example.options)
        extra = {
            "choice": choice,
            "choice_correct": None if gold is None else float(choice == gold),
        }
        if choice is not None:
            scored = example.options[choice]
    return {
        "em": exact_match(scored, example.answers),
        "f1": round(f1_score(scored, example.answers), 6),
        "acc": accuracy(scored, example.answers),
        "support_recall": None if shown is None else support_recall(example.supporting, shown),
        "retrieval_recall": support_recall(example.supporting, retrieved),
        **extra,
    }


def short_f1(question: str, answer: str, golds: Sequence[str]) -> float:
    """The F1 of ``answer`` after the short-answer step's rules (no model call)."""
    short = rule_answer(question, answer)
    return f1_score(answer if short is None else short, list(golds))
