"""missing_knowledge's state: what one pass keeps between its nodes, and its output schema.

One pass: retrieve with the user question from knowledge base A, draft an answer, one judge
call (thought / knowledge missing? / missing knowledge / KB-aligned queries) and the decision
on P(nothing missing), retrieve with those queries from knowledge base B (new chunks only),
merge by md5 within the budget, answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import Field
from typing_extensions import TypedDict  # pydantic needs it for JSON schemas on 3.11

from gaprag.state import base
from gaprag.state.base import BaseState, InputState

KnowledgeBase = Literal["passages", "qa_pairs", "merged"]
ChunkKind = Literal["doc", "qa"]


class Chunk(TypedDict):
    """A retrieved knowledge-base entry, tagged with where and why it was retrieved."""

    id: str
    title: str
    text: str  # passage text, or "Q: ...\nA: ..." for a question-answer pair
    kind: ChunkKind  # "doc" (passage store) or "qa" (question-answer pair store)
    kb: KnowledgeBase  # the knowledge base that was searched
    source: str  # the retriever's label: bm25 / dense / hybrid / qa_pairs
    score: float
    rank: int  # 1-based rank within the query that retrieved it
    retrieved_by: Literal["orig", "mk"]  # the user question, or a missing-knowledge query
    query: str
    md5: str  # md5 of the stripped text: the paper's duplicate test


@dataclass(kw_only=True)
class OutputState(base.OutputState):
    """Common outputs plus the judge's verdict (``missing`` gives the evaluation's miss rate)."""

    missing: Annotated[
        bool,
        Field(
            description="The loop decision: knowledge missing, so retrieve for it (P(nothing "
            "missing) below judge_threshold, or no probability, or a calibration run)."
        ),
    ] = False
    judge_verdict: Annotated[
        bool,
        Field(
            description="The judge's JSON verdict (true = knowledge missing), which the paper "
            "routes on; here the route is taken on the probability (see decisions)."
        ),
    ] = False
    thought: Annotated[str, Field(description="The judge's analysis, shown to the final call.")] = (
        ""
    )
    missing_knowledge: Annotated[
        list[str], Field(description="The knowledge the judge says the first chunks lack.")
    ] = field(default_factory=list)
    mk_queries: Annotated[
        list[str], Field(description="The judge's queries for the missing knowledge.")
    ] = field(default_factory=list)
    draft_answer: Annotated[str, Field(description="The first-round (standard RAG) answer.")] = ""
    judge_parse_ok: Annotated[
        bool, Field(description="False when the judge reply could not be parsed (default used).")
    ] = True


@dataclass(kw_only=True)
class State(BaseState, OutputState):
    initial_contexts: Annotated[
        list[Chunk], Field(description="KB A's chunks for the user question.")
    ] = field(default_factory=list)
    mk_candidates: Annotated[
        list[list[Chunk]],
        Field(
            description="KB B's ranked chunks, one list per missing-knowledge query (before "
            "the merge)."
        ),
    ] = field(default_factory=list)
    mk_contexts: Annotated[
        list[Chunk],
        Field(
            description="The missing-knowledge chunks kept by the merge (md5-deduplicated, "
            "within the budget)."
        ),
    ] = field(default_factory=list)
    mk_round: Annotated[
        int, Field(description="1 once the missing-knowledge chunks were merged into the evidence.")
    ] = 0


__all__ = ["Chunk", "ChunkKind", "InputState", "KnowledgeBase", "OutputState", "State"]
