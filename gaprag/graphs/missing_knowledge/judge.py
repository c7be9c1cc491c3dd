"""The judge's reply: one JSON object with the analysis, the verdict, what is missing and a
search query for each piece; tolerant of the spellings small models use."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, field_validator

_TRUE = {"true", "yes", "y", "1", "missing", "是", "缺失", "有", "对"}
_FALSE = {"false", "no", "n", "0", "none", "not missing", "否", "不缺失", "无", "没有", "不"}


class Judgement(BaseModel):
    """One reply holds the analysis, the verdict, what is missing and a query for each."""

    thought: str = Field(default="", description="Short analysis of the context and answer.")
    judge: bool = Field(description="True when knowledge is missing.")
    missing_knowledge: list[str] = Field(default_factory=list, description="Missing pieces.")
    query: list[str] = Field(default_factory=list, description="One search query per piece.")

    @field_validator("thought", mode="before")
    @classmethod
    def _thought(cls, value: Any) -> str:
        return "" if value is None else str(value).strip()

    @field_validator("judge", mode="before")
    @classmethod
    def _judge(cls, value: Any) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, int | float) and value in (0, 1):
            return bool(value)
        text = str(value).strip().strip(".。").lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ValueError(f"not a yes/no verdict: {value!r}")

    @field_validator("missing_knowledge", "query", mode="before")
    @classmethod
    def _strings(cls, value: Any) -> list[str]:
        if value is None:
            return []
        items = [value] if isinstance(value, str | int | float) else list(value)
        return [str(v).strip() for v in items if v is not None and str(v).strip()]


NOTHING_MISSING = Judgement(thought="", judge=False, missing_knowledge=[], query=[])
"""The safe default when the judge's reply cannot be parsed: nothing missing."""


def mk_queries(judged: Judgement, max_queries: int) -> list[str]:
    """The judge's retrieval queries: deduplicated (case-insensitive), capped; the
    missing-knowledge items stand in when it wrote no query. Whatever its verdict says: the
    decision to retrieve is taken on a probability (see ``nodes.judge_missing``), and when it
    says retrieve, the judge's own queries are the best ones there are."""
    source = judged.query or judged.missing_knowledge
    seen: set[str] = set()
    out: list[str] = []
    for q in source:
        key = " ".join(q.split()).lower()
        if key and key not in seen:
            seen.add(key)
            out.append(" ".join(q.split()))
    return out[: max(0, max_queries)]


def search_queries(judged: Judgement, question: str, max_queries: int) -> list[str]:
    """The queries of a missing-knowledge retrieval: the judge's (:func:`mk_queries`), else
    the user question itself (its next-ranked chunks, as what was seen is excluded)."""
    queries = mk_queries(judged, max_queries)
    if not queries and max_queries > 0 and question.strip():
        queries = [" ".join(question.split())]
    return queries
