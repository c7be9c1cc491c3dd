"""rfm_rag's reply parsers and query construction: Prompt 2's entities and triples, Prompt 1's
fact sentences, Prompt 3's placeholder fills, the next query, and the final answer span.

Every parser is tolerant: JSON first (through the LLM layer's structured output), then the
text fallbacks below, so a malformed reply never stops the loop.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field, field_validator

from gaprag.graphs.rfm_rag.feedback_model.features import normalise
from gaprag.graphs.rfm_rag.state import Triple
from gaprag.nodes.short_answer import yes_no_question

_PLACEHOLDER = re.compile(r"^<\s*[A-Za-z]\w*\s*>$")
_TUPLE = re.compile(r"\(([^,()]+),\s*([^,()]+),\s*([^()]+?)\)")
_EMPTY_EVIDENCE = {"", "none", "empty", "n/a", "no relevant information", "nothing"}
_BULLET = re.compile(r"^\s*(?:[-*•]+|\d+[.)]|\(\d+\))\s*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# answer markers, strongest first: the exemplars' "So the answer is", a bare "The answer is",
# then an "Answer:" / "Final answer:" line
_MARKERS = (
    re.compile(r"(?i)\bso,?\s+the\s+(?:final\s+)?answer\s+is\b\s*[:：]?\s*"),
    re.compile(r"(?i)\bthe\s+(?:final\s+|short\s+)?answer\s+is\b\s*[:：]?\s*"),
    re.compile(r"(?im)^\W*(?:final\s+answer|answer)\s*[:：]\s*"),
)
# a period that ends the answer sentence: followed by a space or the end, and not the period
# of an initial ("J. R. R."), an initialism ("U.S.") or a common abbreviation ("St.")
_PERIOD = re.compile(r"\.(?=\s|$)")
_ABBREVIATIONS = {
    "st", "mt", "ft", "dr", "mr", "mrs", "ms", "jr", "sr", "inc", "co", "corp", "ltd", "no",
    "vs", "gen", "col", "lt", "sgt", "capt", "rev", "prof", "bros", "ave", "fr", "sts", "etc",
    "e.g", "i.e", "approx", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept",
    "oct", "nov", "dec",
}  # fmt: skip
_EXEMPLAR_LINE = re.compile(r"(?i)^\s*(?:question|context)\s*:")
_WRAPPERS = "*_`\"'“”‘’<> "
_NONE_FILLS = {"none", "unknown", "n/a", "null", "end", ""}


def is_placeholder(text: str) -> bool:
    return bool(_PLACEHOLDER.match(text.strip()))


def is_end(text: str) -> bool:
    return text.strip().strip("\"'").lower() == "end"


def _dedupe(items: Sequence[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for item in items:
        key = normalise(item).strip()
        if key and key not in seen:
            seen.add(key)
            out.append(item)
    return out


class QuestionStructure(BaseModel):
    """Prompt 2's reply: key entities and triples [head, relation, tail]."""

    entities: list[str] = Field(default_factory=list)
    triples: list[list[str]] = Field(default_factory=list)

    @field_validator("entities", mode="before")
    @classmethod
    def _entities(cls, value: Any) -> list[str]:
        if isinstance(value, str):
            value = [value]
        return [str(v).strip() for v in value or [] if str(v).strip()]

    @field_validator("triples", mode="before")
    @classmethod
    def _triples(cls, value: Any) -> list[list[str]]:
        out: list[list[str]] = []
        for item in value or []:
            if isinstance(item, dict):
                vals = [str(item.get(k, "")) for k in ("head", "relation", "tail")]
                if not all(vals):
                    vals = [str(v) for v in item.values()][:3]
            elif isinstance(item, str):
                m = _TUPLE.search(item)
                vals = list(m.groups()) if m else []
            else:
                vals = [str(v) for v in item]
            if len(vals) >= 3:
                out.append([vals[0].strip(), vals[1].strip(), ", ".join(vals[2:]).strip()])
        return out


def parse_structure_text(raw: str) -> QuestionStructure:
    """Fallback for non-JSON replies: ``(head, relation, tail)`` tuples and an Entities: line."""
    triples = [list(m.groups()) for m in _TUPLE.finditer(raw)]
    entities: list[str] = []
    m = re.search(r"(?im)^\s*entities\s*[:：]\s*(.+)$", raw)
    if m:
        entities = [e.strip(" \"'[]") for e in m.group(1).split(",")]
    return QuestionStructure(entities=entities, triples=triples)


def finalize_structure(parsed: QuestionStructure) -> tuple[list[str], list[Triple]]:
    """De-duplicated entities (from the triples' concrete heads/tails if none) and triples."""
    triples = [
        Triple(
            head=h.strip().strip("\"'"),
            relation=r.strip().strip("\"'"),
            tail=t.strip().strip("\"'"),
        )
        for h, r, t in (tr[:3] for tr in parsed.triples)
    ]
    entities = [e for e in parsed.entities if not is_placeholder(e) and not is_end(e)]
    if not entities:
        for t in triples:
            entities += [
                x for x in (t["head"], t["tail"]) if x and not is_placeholder(x) and not is_end(x)
            ]
    return _dedupe(entities), triples


def parse_evidence(raw: str) -> list[str]:
    """Prompt 1's reply: the fact sentences after the last ``EVIDENCE:`` (none for NONE)."""
    idx = raw.upper().rfind("EVIDENCE:")
    body = raw[idx + len("EVIDENCE:") :] if idx >= 0 else raw
    body = body.strip()
    if body.lower().rstrip(".!").strip() in _EMPTY_EVIDENCE:
        return []
    out: list[str] = []
    for line in body.splitlines():
        line = _BULLET.sub("", line).strip()
        for part in _SENTENCE_END.split(line):
            part = part.strip().strip('"').strip()
            if len(part) >= 3 and part.lower().rstrip(".") not in _EMPTY_EVIDENCE:
                out.append(part)
    return out


class FillsReply(BaseModel):
    """Prompt 3's reply: one entity per triple."""

    fills: list[str] = Field(default_factory=list)

    @field_validator("fills", mode="before")
    @classmethod
    def _fills(cls, value: Any) -> list[str]:
        if isinstance(value, str):
            value = [value]
        return ["" if v is None else str(v) for v in value or []]


def parse_fills_text(raw: str) -> list[str]:
    """Fallback for non-JSON replies: one item per non-empty line, numbering removed."""
    out = []
    for line in raw.splitlines():
        line = re.sub(r"^\s*\d+[.)]\s*", "", line).strip().strip("\"'").strip()
        if line:
            out.append(line)
    return out


def clean_fills(items: Sequence[str]) -> list[str]:
    """z: the fills without placeholders, ``end``, empties or "none", de-duplicated."""
    out = []
    for item in items:
        item = item.strip().strip("\"'").strip().rstrip(".,;:!").strip().strip("\"'").strip()
        if item.lower() in _NONE_FILLS or is_placeholder(item) or is_end(item):
            continue
        out.append(item)
    return _dedupe(out)


def build_query(gaps: Sequence[str], fills: Sequence[str], question: str) -> tuple[list[str], str]:
    """G' = G then z (de-duplicated); the next query is G' space-joined, or the question."""
    gap_list = _dedupe([*gaps, *fills])
    return gap_list, (" ".join(gap_list) if gap_list else question)


def detect_task_type(question: str, setting: str = "auto") -> str:
    """``yes_no`` for a question opening with an auxiliary verb (is/are/did/can...) that does
    not offer alternatives ("Is A or B older?" is answered with A or B); else short_answer."""
    if setting in ("short_answer", "yes_no"):
        return setting
    return "yes_no" if yes_no_question(question) else "short_answer"


def _ends_answer(span: str, period: int, *, last: bool = False) -> bool:
    """Whether the period at index ``period`` ends the sentence (see :data:`_PERIOD`). An
    initialism ("U.S.") keeps its period; a one-letter word's period is an initial's within
    the span, and the span's end when ``last`` unless another initial precedes it ("Malcolm
    X." ends, "J. R." does not)."""
    words = re.split(r"[\s(\[]", span[:period])
    word = words[-1].strip("\"'")
    if re.fullmatch(r"(?:[A-Za-z]\.)+[A-Za-z]", word):  # "U.S", "D.C"
        return False
    if re.fullmatch(r"[A-Za-z]", word):
        return last and not (len(words) > 1 and re.fullmatch(r"[A-Za-z]\.", words[-2]))
    return word.casefold() not in _ABBREVIATIONS


def _cut_sentence(span: str) -> str:
    for m in _PERIOD.finditer(span):
        if _ends_answer(span, m.start()):
            return span[: m.start()]
    return span


def _strip_span(span: str) -> str:
    span = span.strip().strip(_WRAPPERS).rstrip(",;:!?").strip().strip(_WRAPPERS)
    if span.endswith(".") and _ends_answer(span, len(span) - 1, last=True):
        span = span[:-1].strip().strip(_WRAPPERS)
    return span.strip()


def answer_span(text: str) -> str:
    """The answer in a chain-of-thought reply: the rest of the sentence after the first
    "So the answer is" (else "The answer is", else an "Answer:" line), up to the line's end
    or the sentence's final period (not an initial's or an abbreviation's); with no marker,
    the last line that does not start a new "Question:"/"Context:" block. Markdown, quotes
    and final punctuation are stripped."""
    for marker in _MARKERS:
        m = marker.search(text)
        if m:
            rest = text[m.end() :].lstrip()
            span = _strip_span(_cut_sentence(rest.splitlines()[0] if rest else ""))
            if span:
                return span
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    kept = [ln for ln in lines if not _EXEMPLAR_LINE.match(ln)] or lines
    return _strip_span(kept[-1]) if kept else ""


def extract_answer(text: str, task_type: str = "short_answer") -> str:
    """The answer span (:func:`answer_span`); for ``yes_no`` questions ``yes``/``no`` when
    the span says so (the span only: a "no" in the reasoning is not the answer)."""
    span = answer_span(text)
    if task_type == "yes_no":
        yn = re.match(r"\W*(yes|no)\b", span, re.I) or re.search(r"\b(yes|no)\b", span, re.I)
        return yn.group(1).lower() if yn else span
    return span
