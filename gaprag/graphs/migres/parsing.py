"""MIGRES's reply schemas, salvage parsers for replies the tolerant parser cannot read, and
the pure decision rules (judge verdict, query cleaning, refusal filter)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field, field_validator

from gaprag.graphs.migres.state import InfoItem, Judgement

# -- schemas (validated by llm.structured) ---------------------------------------------------


class Fact(BaseModel):
    info: str = ""
    support_passages: list[int] = Field(default_factory=list)

    @field_validator("support_passages", mode="before")
    @classmethod
    def _indices(cls, value: Any) -> list[int]:
        if value is None:
            return []
        if isinstance(value, int | str):
            value = [value]
        out = []
        for v in value if isinstance(value, list | tuple) else []:
            try:
                out.append(int(str(v).strip().strip("[]").split()[-1]))
            except (ValueError, IndexError):
                continue
        return out


class LeafReply(BaseModel):
    """P1: ``{"useful_information": [{"info": ..., "support_passages": [0, ...]}, ...]}``."""

    useful_information: list[Fact] = Field(default_factory=list)


class AnswerField(BaseModel):
    text: str = ""
    confidence: int = 1

    @field_validator("confidence", mode="before")
    @classmethod
    def _confidence(cls, value: Any) -> int:
        if value is None or value == "":
            return 1
        try:
            return int(float(str(value).strip()))
        except ValueError:
            return -1

    @field_validator("text", mode="before")
    @classmethod
    def _text(cls, value: Any) -> str:
        return "" if value is None else str(value)


def _answer_field(value: Any) -> Any:
    if isinstance(value, dict):
        return value
    return {"text": "" if value is None else str(value)}  # a plain string is the text


def _text_field(value: Any) -> str:
    return "" if value is None else str(value)


def _missing_field(value: Any) -> str:
    return "None" if value is None else str(value)


class MainReply(BaseModel):
    """P2: missing_information, explanation, then answer (text, confidence).

    The fields are in the order the model writes them (a JSON-schema constraint follows this
    order): what is missing and why come before the answer, so the model reasons before it
    commits to an answer (the paper's released format puts the answer first)."""

    missing_information: str = "None"
    explanation: str = ""
    answer: AnswerField = Field(default_factory=AnswerField)

    _missing = field_validator("missing_information", mode="before")(_missing_field)
    _explanation = field_validator("explanation", mode="before")(_text_field)
    _answer = field_validator("answer", mode="before")(_answer_field)


class AnswerFirstReply(BaseModel):
    """P2 in the paper's order: answer (text, confidence), explanation, missing_information
    (the model commits to its answer before it says what is missing)."""

    answer: AnswerField = Field(default_factory=AnswerField)
    explanation: str = ""
    missing_information: str = "None"

    _missing = field_validator("missing_information", mode="before")(_missing_field)
    _explanation = field_validator("explanation", mode="before")(_text_field)
    _answer = field_validator("answer", mode="before")(_answer_field)


class FinalReply(BaseModel):
    """P5: answer (text, confidence), explanation."""

    answer: AnswerField = Field(default_factory=AnswerField)
    explanation: str = ""

    _explanation = field_validator("explanation", mode="before")(_text_field)
    _answer = field_validator("answer", mode="before")(_answer_field)


# -- salvage: what the code's regex / key-scan fallbacks recover -------------------------------
_INFO = re.compile(
    r"""["']info["']\s*:\s*["'](?P<info>.*?)["']\s*,\s*"""
    r"""["']support_passages["']\s*:\s*\[(?P<idx>[\d,\s]*)\]""",
    re.S,
)


def salvage_leaf(text: str) -> list[InfoItem]:
    """Every ``"info": "...", "support_passages": [..]`` pair in a reply that is not valid JSON
    (e.g. ``{"useful_information": [{...}], {...}]}`` with a misplaced bracket)."""
    out: list[InfoItem] = []
    for m in _INFO.finditer(text):
        idx = [int(x) for x in re.findall(r"\d+", m.group("idx"))]
        out.append(InfoItem(info=m.group("info").strip(), support_passages=idx))
    return out


_KEYS = ("answer", "text", "confidence", "explanation", "missing_information")
_KEY_RE = re.compile(r"""["']?(answer|text|confidence|explanation|missing_information)["']?\s*:""")


def salvage_main(text: str) -> MainReply | None:
    """Key-scan fallback: cut each known key's value at the next key."""
    hits = list(_KEY_RE.finditer(text))
    if not hits:
        return None
    values: dict[str, str] = {}
    for n, m in enumerate(hits):
        end = hits[n + 1].start() if n + 1 < len(hits) else len(text)
        raw = text[m.end() : end].strip().rstrip("}").strip().rstrip(",").strip()
        raw = raw.lstrip("{").strip().strip("\"'").strip()
        values.setdefault(m.group(1), raw)
    if "text" not in values and "answer" not in values:
        return None
    answer_text = values.get("text", values.get("answer", ""))
    return MainReply.model_validate(
        {
            "answer": {"text": answer_text, "confidence": values.get("confidence")},
            "explanation": values.get("explanation", ""),
            "missing_information": values.get("missing_information", "None"),
        }
    )


# -- decisions -------------------------------------------------------------------------------
def valid_facts(items: Sequence[Fact | InfoItem], n_passages: int) -> list[InfoItem]:
    """Facts with non-empty text and at least one in-range citation (indices kept in order)."""
    out: list[InfoItem] = []
    for item in items:
        info = (item.info if isinstance(item, Fact) else item["info"]).strip()
        idx = item.support_passages if isinstance(item, Fact) else item["support_passages"]
        support = list(dict.fromkeys(i for i in idx if 0 <= i < n_passages))
        if info and support:
            out.append(InfoItem(info=info, support_passages=support))
    return out


def clean_answer_text(text: str) -> str:
    text = " ".join(text.split()).strip().strip('"').strip("'").strip()
    if text.endswith(".") and not re.search(r"\b[A-Z]\.$", text):
        text = text[:-1].rstrip()
    return text


def judgement(reply: MainReply, *, parsed_ok: bool = True) -> Judgement:
    """The verdict: answered iff the answer text is non-empty and does not say unanswerable."""
    text = clean_answer_text(reply.answer.text)
    answered = parsed_ok and bool(text) and "unanswerable" not in text.lower()
    missing = reply.missing_information.strip()
    if not answered and len(missing) < 10 and reply.explanation.strip():
        missing = reply.explanation.strip()  # a too-short summary: use the explanation
    return Judgement(
        answer_text=text,
        confidence=reply.answer.confidence,
        explanation=reply.explanation.strip(),
        missing_information=missing,
        parsed_ok=parsed_ok,
        answered=answered,
    )


_ENUM = re.compile(r"^\s*(?:(?:query|q)\s*\d*\s*[:.)-]|\d+\s*[.):-]|[-*•])\s*", re.I)


def clean_queries(
    text: str, *, history: Sequence[str], max_queries: int = 3, min_chars: int = 11
) -> list[str]:
    """New queries from the generator's lines: enumerators, bullets and quotes stripped;
    lines of 10 characters or fewer, lines equal to a historical query (case-insensitive)
    and repeats dropped; at most ``max_queries`` kept. May be empty."""
    past = {h.strip().lower() for h in history}
    out: list[str] = []
    for line in text.splitlines():
        q = _ENUM.sub("", line.strip()).strip().strip('"').strip("'").strip("`").strip()
        if len(q) < min_chars or q.lower() in past:
            continue
        past.add(q.lower())
        out.append(q)
        if len(out) >= max_queries:
            break
    return out


REFUSALS = (
    "sorry",
    "2022",
    "have no specific iinformation",  # sic: the released code's marker
    "have no specific information",
    "no publicly available information",
    "i don't know",
    "i do not know",
    "as an ai",
)


def usable_knowledge(text: str) -> bool:
    """False for empty text or text containing a refusal marker."""
    low = text.strip().lower()
    return bool(low) and not any(marker in low for marker in REFUSALS)


def norm_fact(text: str) -> str:
    """Key for fact de-duplication: whitespace, case and trailing punctuation ignored."""
    return " ".join(text.lower().split()).rstrip(" .;,!")
