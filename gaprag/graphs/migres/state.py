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

    known_info: Annotated[
        list[str], Field(description="The known information: seed and verified facts (set I).")
    ] = field(default_factory=list)
    query_history: Annotated[
        list[str], Field(description="Every query asked for this question, the question first.")
    ] = field(default_factory=list)
    missing_info: Annotated[
        str, Field(description="What the main module last said is missing.")
    ] = ""
    judge_rounds: Annotated[int, Field(description="Sufficiency judgements made.")] = 0
    status: Annotated[str, Field(description="running | answered | forced | failed")] = "running"
    confidence: Annotated[
        int, Field(description="The answer's confidence as the model gave it (-1: none).")
    ] = 0
    explanation: Annotated[str, Field(description="The model's explanation of its answer.")] = ""
    llm_calls_by_kind: Annotated[
        dict[str, int],
        Field(description="LLM calls per module: main, leaf, query, knowledge, verify, final."),
        add_counts,
    ] = field(default_factory=dict)
    passages_per_round: Annotated[
        list[int], Field(description="Snippets the leaf module was shown, per round."), operator.add
    ] = field(default_factory=list)
    knowledge_tokens: Annotated[
        int,
        Field(description="Estimated tokens of the snippets shown to the leaf module."),
        operator.add,
    ] = 0


@dataclass(kw_only=True)
class State(BaseState, OutputState):
    """Internal state. ``evidence`` (from the base) holds the passages that supported facts."""

    # queries and memory
    pending_queries: Annotated[
        list[str], Field(description="The queries the next round retrieves for.")
    ] = field(default_factory=list)
    seen_counts: Annotated[
        dict[str, int], Field(description="How often each snippet was shown to the leaf module.")
    ] = field(default_factory=dict)
    # per-round artefacts (overwritten each round)
    raw_candidates: Annotated[
        list[Evidence], Field(description="The round's retrieved passages, before the filter.")
    ] = field(default_factory=list)
    filtered_snippets: Annotated[
        list[Snippet],
        Field(description="The round's snippets the knowledge filter kept (or LLM knowledge)."),
    ] = field(default_factory=list)
    llm_knowledge_used: Annotated[
        bool, Field(description="The round's snippet is the model's own knowledge.")
    ] = False
    leaf_passages: Annotated[
        list[Snippet], Field(description="The snippets the leaf module was shown this round.")
    ] = field(default_factory=list)
    extracted_info: Annotated[
        list[InfoItem],
        Field(description="The facts the leaf module extracted, with the snippets they cite."),
    ] = field(default_factory=list)
    verified_info: Annotated[
        list[InfoItem], Field(description="The extracted facts the verifier accepted.")
    ] = field(default_factory=list)
    # ``known_sources[i]`` holds the passage ids behind ``known_info[i]``, so a prompt that
    # shows a fact counts its passages as shown
    known_sources: Annotated[
        list[list[str]],
        Field(
            description="The passage ids behind each known fact (none for seeds and LLM knowledge)."
        ),
    ] = field(default_factory=list)
    question_snippets: Annotated[
        list[Snippet],
        Field(
            description="The first corpus snippets the leaf was shown: the forced answer reads "
            "them when the pool holds no retrieved fact and llm_knowledge is off."
        ),
    ] = field(default_factory=list)
    known_info_len_at_round_start: Annotated[
        int, Field(description="Known facts when the round started.")
    ] = 0
    new_info_this_round: Annotated[int, Field(description="Facts the round added.")] = 0
    candidate_answer: Annotated[
        str,
        Field(description="The answer the method would give if it stopped now (last judged)."),
    ] = ""


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
