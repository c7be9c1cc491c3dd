"""IterKey state: the current keyword set, this round's passages/answer/verdict, and the audit trail.

One round (``iterations`` counts them, 1-based) is keywords K_i -> BM25 passages D_i -> answer
a_i -> verdict v_i. K_(i+1) *replaces* K_i and D_(i+1) replaces D_i (no evidence pool): the
common ``evidence`` field always holds only the current round's passages. Everything kept
across rounds (``history``, ``keyword_history``, ``verdicts``, ``seen_*``) is bookkeeping for
the trace and the paper's statistics and never reaches a prompt.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field
from typing_extensions import TypedDict  # pydantic needs it for JSON schemas on 3.11

from gaprag.state import base
from gaprag.state.base import BaseState, Evidence, InputState


class VerdictScores(TypedDict):
    """How a verdict was decided: the option probabilities (logprobs path) and the path."""

    prob_true: float | None  # first-token probability of each option, as the endpoint gave it
    prob_false: float | None
    p: float | None  # P(True) renormalised over the two options: what the threshold is against
    choice: str  # the option the validator picked (on logprobs: the more probable one)
    method: str  # logprobs | constrained-no-logprobs | parsed-no-logprobs | default | parsed (CoT)
    raw: str


class IterationRecord(TypedDict):
    """Everything one round produced, appended by ``validate_answer``."""

    iteration: int
    keywords: list[str]
    retrieval_query: str
    doc_ids: list[str]
    doc_scores: list[float]
    logged_doc_ids: list[str]  # top ``recall_k`` ids, for recall statistics only
    documents: list[Evidence]  # D_i, so ``finalize`` can return the evidence of the chosen round
    answer: str
    verdict: bool
    verdict_scores: VerdictScores
    new_keywords: list[str]
    new_doc_ids: list[str]
    raw_keyword_output: str
    raw_answer_output: str
    raw_validation_output: str


class ParseFailure(TypedDict):
    node: str
    iteration: int
    raw: str
    fallback_used: str


@dataclass(kw_only=True)
class OutputState(base.OutputState):
    """The common output plus IterKey's per-round record."""

    keywords: Annotated[list[str], Field(description="The last keyword set K_i.")] = field(
        default_factory=list
    )
    verdicts: Annotated[
        list[bool], Field(description="Each round's validation verdict, in order."), operator.add
    ] = field(default_factory=list)
    first_true_iteration: Annotated[
        int | None, Field(description="The first round whose answer was validated True.")
    ] = None
    history: Annotated[
        list[IterationRecord],
        Field(
            description="Each round's record: keywords, query, documents, answer, verdict and "
            "the raw replies."
        ),
        operator.add,
    ] = field(default_factory=list)
    parse_failures: Annotated[
        list[ParseFailure],
        Field(description="Replies that could not be parsed, and the fallback each one used."),
        operator.add,
    ] = field(default_factory=list)


@dataclass(kw_only=True)
class State(BaseState, OutputState):
    """Internal state of one IterKey run."""

    retrieval_query: Annotated[
        str, Field(description="The round's retrieval query: the question and its keywords.")
    ] = ""
    verdict: Annotated[
        bool | None, Field(description="The round's validation verdict (None before one).")
    ] = None
    stop_validated: Annotated[
        bool, Field(description="The round's accepted answer ends the loop.")
    ] = False
    verdict_scores: Annotated[
        dict[str, Any],
        Field(description="The round's validation: P(valid), how it was decided, the raw reply."),
    ] = field(default_factory=dict)
    keyword_history: Annotated[
        list[list[str]], Field(description="Every round's keyword list, in order."), operator.add
    ] = field(default_factory=list)
    logged_doc_ids: Annotated[
        list[str],
        Field(description="The round's retrieved ids down to recall_k (more than shown)."),
    ] = field(default_factory=list)
    current_raw: Annotated[
        dict[str, str],
        Field(description="The round's raw keyword and answer replies, for its record."),
    ] = field(default_factory=dict)
    seen_doc_ids: Annotated[
        list[str], Field(description="Document ids shown in earlier rounds of this question.")
    ] = field(default_factory=list)
    seen_keywords: Annotated[
        list[str], Field(description="Keywords (case-folded) of earlier rounds of this question.")
    ] = field(default_factory=list)


__all__ = [
    "InputState",
    "IterationRecord",
    "OutputState",
    "ParseFailure",
    "State",
    "VerdictScores",
]
