"""RAG-EF state: ranked pairs, the assembled Q&A and context blocks, and the feedback loop.

Item types are TypedDicts (plain dicts in checkpoints). ``ScoredPair`` comes from the pair
store: a pair plus ``sim_q``, ``sim_c`` (the two factors of Eq. 2), ``score`` and ``rank``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import Field
from typing_extensions import TypedDict  # pydantic needs it for JSON schemas on 3.11

from gaprag.state import base
from gaprag.state.base import PERSISTENT, BaseState, Evidence
from gaprag.stores.pairs import ScoredPair

Verdict = Literal["correct", "incorrect", "unknown", ""]


class QAItem(TypedDict):
    """One rendered line of the Q&A block (``answer`` is empty in ``q_only`` mode)."""

    pair_id: str
    question: str
    answer: str


class ContextItem(TypedDict):
    """One unique chunk shown as ``Context{n}``."""

    chunk_id: str
    text: str
    score: float


class Feedback(TypedDict):
    """An expert correction: the triple inserted into the pair store."""

    question: str
    answer: str
    chunk: str
    chunk_id: str | None
    source: str


@dataclass(kw_only=True)
class InputState(base.InputState):
    gold_answers: Annotated[
        list[str] | None,
        Field(
            description="Optional gold answers; with judge='gold' a wrong answer asks for feedback."
        ),
        PERSISTENT,
    ] = None
    """An input, so it must survive the start-of-question reset that clears per-question
    fields (the reset would otherwise wipe the value just passed in). Like every input field,
    LangGraph keeps it on a thread until an invoke gives a new value: pass ``gold_answers``
    with every question of a thread that is judged with ``judge="gold"``."""


@dataclass(kw_only=True)
class OutputState(base.OutputState):
    """The common output plus what the feedback loop decided."""

    first_answer: Annotated[
        str, Field(description="The answer before any expert feedback was applied.")
    ] = ""
    verdict: Annotated[
        Verdict, Field(description="feedback_classifier's verdict on the first answer.")
    ] = ""
    inserted_pair_id: Annotated[
        str | None, Field(description="Id of the expert pair inserted by this run, if any.")
    ] = None
    retrieved_pairs: Annotated[
        list[ScoredPair],
        Field(description="The ranked (question, answer, chunk) pairs, with their Eq. 2 scores."),
    ] = field(default_factory=list)
    gated_out: Annotated[
        list[str], Field(description="Ids of the pairs the optional score gate dropped.")
    ] = field(default_factory=list)
    contexts: Annotated[
        list[ContextItem], Field(description="The unique chunks the answer call shows.")
    ] = field(default_factory=list)


@dataclass(kw_only=True)
class State(BaseState, InputState, OutputState):
    feedback_rounds: Annotated[
        int, Field(description="Expert pairs inserted for this question.")
    ] = 0
    passages: Annotated[
        list[Evidence],
        Field(description="Passages shown instead of pairs (standard mode, empty-store fallback)."),
    ] = field(default_factory=list)
    qa_block: Annotated[
        list[QAItem], Field(description="The Q&A lines the answer call shows, one per pair.")
    ] = field(default_factory=list)
    feedback: Annotated[
        Feedback | None,
        Field(description="The expert's triple from the pause, before it is stored."),
    ] = None


__all__ = ["ContextItem", "Feedback", "InputState", "OutputState", "QAItem", "State", "Verdict"]
