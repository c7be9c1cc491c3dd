"""State of the MIGRES graph (missing-information guided retrieve-extract-solve).

Item types are TypedDicts (plain dicts at run time); the containers are dataclasses. Lists
that a node rebuilds as a whole (``known_info``, ``query_history``, ``seen_counts``) replace the
previous value; per-round logs (``passages_per_round``) and call counters accumulate. Every
field is per question: the first node resets it (see :mod:`gaprag.nodes.wiring`).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import Field
from typing_extensions import TypedDict  # pydantic needs it for JSON schemas on 3.11

from gaprag.state import base
from gaprag.state.base import BaseState, Evidence, InputState

SnippetSource = Literal["corpus", "llm"]
Status = Literal["running", "answered", "forced", "failed"]


class Snippet(TypedDict):
    """What survived the knowledge filter: a whole passage, its kept sentences, or LLM text."""

    id: str  # id of the origin passage ("llm:<hash>" for LLM knowledge)
    title: str
    text: str  # whole passage text, space-joined kept sentences, or the generated text
    origin_text: str  # the full passage text: the key of the seen-counter
    score: float | None  # passage-level relevance score (the snippet inherits it)
    query: str  # the query that scored best against the passage
    source: SnippetSource


class InfoItem(TypedDict):
    """One extracted fact and the display indices of the leaf passages that support it."""

    info: str
    support_passages: list[int]


class Judgement(TypedDict):
    """The main module's parsed verdict."""

    answer_text: str
    confidence: int  # 1..5; -1 if it would not convert; 1 if absent
    explanation: str
    missing_information: str
    parsed_ok: bool
    answered: bool


def add_counts(left: dict[str, int] | None, right: dict[str, int] | None) -> dict[str, int]:
    """Reducer: per-kind call counters returned by nodes are summed."""
    out = dict(left or {})
    for key, value in (right or {}).items():
        out[key] = out.get(key, 0) + value
    return out


@dataclass(kw_only=True)
class OutputState(base.OutputState):
    """The common output fields plus what MIGRES reports (Tables 4 and 5 of the paper)."""

    known_info: list[str] = field(default_factory=list)
    query_history: list[str] = field(default_factory=list)
    missing_info: str = ""
    judge_rounds: int = 0
    status: Annotated[str, Field(description="running | answered | forced | failed")] = "running"
    confidence: int = 0
    explanation: str = ""
    llm_calls_by_kind: Annotated[dict[str, int], add_counts] = field(default_factory=dict)
    passages_per_round: Annotated[list[int], operator.add] = field(default_factory=list)
    knowledge_tokens: Annotated[int, operator.add] = 0


@dataclass(kw_only=True)
class State(BaseState, OutputState):
    """Internal state. ``evidence`` (from the base) holds the passages that supported facts."""

    # queries and memory
    pending_queries: list[str] = field(default_factory=list)
    seen_counts: dict[str, int] = field(default_factory=dict)
    # per-round artefacts (overwritten each round)
    raw_candidates: list[Evidence] = field(default_factory=list)
    filtered_snippets: list[Snippet] = field(default_factory=list)
    llm_knowledge_used: bool = False
    leaf_passages: list[Snippet] = field(default_factory=list)
    extracted_info: list[InfoItem] = field(default_factory=list)
    verified_info: list[InfoItem] = field(default_factory=list)
    # the evidence pool (the paper's information set I) is ``known_info``; ``known_sources[i]``
    # holds the passage ids behind ``known_info[i]`` (empty for seeds and LLM knowledge), so a
    # prompt that shows a fact counts its passages as shown
    known_sources: list[list[str]] = field(default_factory=list)
    # the first corpus snippets the leaf was shown (round 1: ranked against the question
    # itself): what the forced answer reads when the pool holds no retrieved fact and
    # ``llm_knowledge`` is off
    question_snippets: list[Snippet] = field(default_factory=list)
    known_info_len_at_round_start: int = 0
    new_info_this_round: int = 0
    # the answer the method would give if it stopped now (the last judged round's answer)
    candidate_answer: str = ""


__all__ = [
    "InfoItem",
    "InputState",
    "Judgement",
    "OutputState",
    "Snippet",
    "State",
    "Status",
    "add_counts",
]
