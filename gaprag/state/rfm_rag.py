"""State of the rfm_rag graph (RFM-RAG: retrieval feedback + a persistent evidence pool).

The evidence pool is the method's memory: it only grows within a question (except when a
longer sentence replaces one it contains), and, with a checkpointer, it is kept across the
turns of a thread. Every other list field is written whole by the node that owns it (plain
replace semantics), so nothing accumulates by surprise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from pydantic import Field
from typing_extensions import TypedDict  # pydantic needs it for JSON schemas on 3.11

from gaprag.state.base import BaseState, Evidence, OutputState


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
class RFMOutput(OutputState):
    """The common output plus what RFM-RAG adds."""

    evidence_pool: Annotated[
        list[EvidenceItem], Field(description="The curated fact pool the answer was built from.")
    ] = field(default_factory=list)
    entities: list[str] = field(default_factory=list)
    triples: list[Triple] = field(default_factory=list)
    retrieved_passages: Annotated[
        list[Evidence], Field(description="Every passage retrieved for this question, in order.")
    ] = field(default_factory=list)
    feedback_prob: float | None = None
    sufficient: bool = False
    raw_answer: str = ""


@dataclass(kw_only=True)
class RFMState(BaseState, RFMOutput):
    """Internal state of the rfm_rag graph."""

    task_type: str = "short_answer"  # "short_answer" | "yes_no"
    current_query: str = ""
    query_history: list[str] = field(default_factory=list)
    retrieval_count: int = 0
    retrieved: list[Evidence] = field(default_factory=list)  # K_i of the latest round
    seen_passage_ids: list[str] = field(default_factory=list)
    round_evidence: str = ""  # E_i as parsed sentences joined by newlines ("" if none)
    entity_coverage: dict[str, float] = field(default_factory=dict)
    syntactic_coverage: float = 0.0  # S_f
    semantic_relevance: float | None = None  # G_f
    feedback_logit: float | None = None
    feedback_calls: int = 0
    gap_entities: list[str] = field(default_factory=list)  # G
    placeholder_fills: list[str] = field(default_factory=list)  # z
    gap_list: list[str] = field(default_factory=list)  # G' = G + z
