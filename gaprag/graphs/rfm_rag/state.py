"""rfm_rag's state: the shared fields, the evidence pool with provenance, and the loop's
working fields.

The evidence pool is the method's memory. Within a question it only grows (a longer sentence
may replace one it contains). It is the one field marked :data:`~gaprag.state.base.PERSISTENT`,
so with ``pool_scope="thread"`` and a checkpointer it is kept across a thread's questions; with
the default ``pool_scope="question"`` (the paper's per-question pool) the first node empties it.
Every other field is reset when a question starts, and every list is written whole by the node
that owns it (plain replace semantics), so nothing accumulates by surprise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from pydantic import Field
from typing_extensions import TypedDict  # pydantic needs it for JSON schemas on 3.11

from gaprag.state import base
from gaprag.state.base import PERSISTENT, BaseState, Evidence, InputState


class Triple(TypedDict):
    """A relational triple from the question; unknowns are placeholders like ``<X1>``."""

    head: str
    relation: str
    tail: str


class EvidenceItem(TypedDict):
    """One curated fact sentence in the evidence pool, with its provenance."""

    id: str  # sha1 of the normalised text
    text: str
    round: int  # retrieval round (1-based) that produced it
    query: str  # the query of that round
    question: str  # the question (turn) it was gathered for
    source_passage_ids: list[str]  # the passages shown to the extraction prompt that round


@dataclass(kw_only=True)
class OutputState(base.OutputState):
    """The common output plus what RFM-RAG adds. ``evidence`` holds the pool's facts this
    question's rounds produced or found again; ``evidence_pool`` is the whole pool the answer
    was built from (on a thread it also holds earlier questions' facts, each with the
    ``question`` it was gathered for)."""

    evidence_pool: Annotated[
        list[EvidenceItem],
        Field(description="The curated fact pool the answer was built from."),
        PERSISTENT,
    ] = field(default_factory=list)
    """Per question by default (``pool_scope="question"``, the paper's setting: the first node
    empties it); with ``pool_scope="thread"`` it is kept across a checkpointed thread's
    questions, so a follow-up can be answered from facts gathered earlier."""
    entities: Annotated[list[str], Field(description="The question's entities (Prompt 2).")] = (
        field(default_factory=list)
    )
    triples: Annotated[
        list[Triple],
        Field(description="The question's (subject, relation, object) triples, with placeholders."),
    ] = field(default_factory=list)
    retrieved_passages: Annotated[
        list[Evidence], Field(description="Every passage retrieved for this question, in order.")
    ] = field(default_factory=list)
    feedback_prob: Annotated[
        float | None,
        Field(description="The last decision's P(the pool is sufficient); None without one."),
    ] = None
    sufficient: Annotated[
        bool, Field(description="The last decision found the pool sufficient.")
    ] = False
    raw_answer: Annotated[
        str, Field(description="The answer call's reply before its span was taken.")
    ] = ""


@dataclass(kw_only=True)
class State(BaseState, OutputState):
    """Internal state of the rfm_rag graph."""

    task_type: Annotated[
        str, Field(description="short_answer or yes_no: how the answer is asked for.")
    ] = "short_answer"
    current_query: Annotated[str, Field(description="The next retrieval's query (q_i).")] = ""
    retrieved: Annotated[
        list[Evidence], Field(description="The latest round's passages (K_i).")
    ] = field(default_factory=list)
    round_evidence: Annotated[
        list[str], Field(description="The latest round's fact sentences (E_i).")
    ] = field(default_factory=list)
    entity_coverage: Annotated[
        dict[str, float], Field(description="Each question entity's coverage by the pool.")
    ] = field(default_factory=dict)
    syntactic_coverage: Annotated[
        float, Field(description="The pool's syntactic coverage of the question (S_f).")
    ] = 0.0
    gap_entities: Annotated[
        list[str], Field(description="The entities whose coverage is below θ (G).")
    ] = field(default_factory=list)
    found_fact_ids: Annotated[
        list[str],
        Field(
            description="Pool facts this question's rounds produced or found again: its evidence."
        ),
    ] = field(default_factory=list)


__all__ = ["EvidenceItem", "InputState", "OutputState", "State", "Triple"]
