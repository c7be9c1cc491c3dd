"""IterKey's lenient keyword-list parser and its small text helpers.

The keyword prompts ask for a bare list, ``["kw1", "kw2", ...]``, capped at 50 output tokens,
so replies are often wrapped in prose, written with Python quotes, or cut off mid-item. The
parser tries, in order, and the first step that yields a keyword wins:

1. the first (``last=True``: the last) balanced ``[...]`` span as JSON;
2. the same span with single quotes turned into double quotes;
3. every *closed* double-quoted string (single-quoted if none), so a truncated tail is dropped;
4. brackets, bullets and numbering stripped, then a split on commas and newlines.

Every result is cleaned: items stripped of spaces, quotes and punctuation, empty items and
items over 100 characters dropped, case-insensitive duplicates removed (first one kept).
It never raises; an empty list means "nothing usable" and the node applies its fallback.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Callable, Iterable, Sequence

from gaprag.llm.parse import parse_choice, strip_thinking

MAX_KEYWORD_CHARS = 100

_DOUBLE = re.compile(r'"([^"\n]+)"')
_SINGLE = re.compile(r"'([^'\n]+)'")
_BULLET = re.compile(r"^\s*(?:[-*•]+|\(?\d+[.)]|\d+\s*-)\s*")
_LABEL = re.compile(
    r"^\s*(?:here (?:are|is)[^:\n]*|(?:refined |improved |new |the )?keywords?[^:\n]{0,20})\s*:\s*",
    re.I,
)
_EDGE = string.whitespace + "\"'`“”‘’.,;:!?*[]"


def bracket_spans(text: str) -> list[str]:
    """Every top-level balanced ``[...]`` span, ignoring brackets inside double quotes."""
    spans: list[str] = []
    depth, start, in_quote, escaped = 0, -1, False, False
    for i, ch in enumerate(text):
        if in_quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_quote = False
            continue
        if ch == '"' and depth > 0:
            in_quote = True
        elif ch == "[":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "]" and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append(text[start : i + 1])
    return spans


def _string_list(candidate: str) -> list[str]:
    try:
        value = json.loads(candidate)
    except (json.JSONDecodeError, ValueError):
        return []
    if not isinstance(value, list):
        return []
    if not all(isinstance(v, str | int | float) and not isinstance(v, bool) for v in value):
        return []
    return [str(v) for v in value]


def _step_json(text: str, last: bool) -> list[str]:
    spans = bracket_spans(text)
    return _string_list(spans[-1] if last else spans[0]) if spans else []


def _step_single_quotes(text: str, last: bool) -> list[str]:
    spans = bracket_spans(text)
    return _string_list((spans[-1] if last else spans[0]).replace("'", '"')) if spans else []


def _step_closed_quotes(text: str, last: bool) -> list[str]:
    start = text.rfind("[") if last else text.find("[")
    tail = text[start:] if start >= 0 else text
    found = _DOUBLE.findall(tail)
    return found if found else _SINGLE.findall(tail)


def _step_split(text: str, last: bool) -> list[str]:
    if last and "[" in text:
        text = text[text.rfind("[") :]
    text = _LABEL.sub("", text.strip(), count=1)
    items: list[str] = []
    for line in text.replace("[", "\n").replace("]", "\n").splitlines():
        line = _BULLET.sub("", line)
        items.extend(line.split(","))
    return items


_STEPS: tuple[Callable[[str, bool], list[str]], ...] = (
    _step_json,
    _step_single_quotes,
    _step_closed_quotes,
    _step_split,
)


def clean_keywords(items: Iterable[str]) -> list[str]:
    """Strip, drop empty/overlong items, remove case-insensitive duplicates (first kept)."""
    out: list[str] = []
    seen: set[str] = set()
    for item in items:
        kw = " ".join(str(item).split()).strip(_EDGE).strip()
        if not kw or len(kw) > MAX_KEYWORD_CHARS:
            continue
        key = kw.casefold()
        if key not in seen:
            seen.add(key)
            out.append(kw)
    return out


def parse_keywords(text: str, *, last: bool = False) -> list[str]:
    """The keyword list in a reply; ``last`` reads the last bracketed list (CoT replies)."""
    text = strip_thinking(text or "")
    if not text.strip():
        return []
    for step in _STEPS:
        keywords = clean_keywords(step(text, last))
        if keywords:
            return keywords
    return []


def merge_keyword_lists(lists: Sequence[Sequence[str]]) -> list[str]:
    """Concatenate in order and remove case-insensitive duplicates (doc-by-doc regeneration)."""
    return clean_keywords(kw for kws in lists for kw in kws)


def retrieval_query(question: str, keywords: Sequence[str], joiner: str = " ") -> str:
    """``q + " " + " ".join(K)``; the question alone when K is empty (no trailing separator)."""
    return joiner.join([question, *keywords]) if keywords else question


VALIDATION_OPTIONS = ("True", "False")


def cot_verdict(raw: str) -> bool | None:
    """The True/False after the last ``Conclusion:`` of a CoT reply (None if there is none)."""
    idx = raw.lower().rfind("conclusion")
    if idx < 0:
        return None
    picked = parse_choice(raw[idx + len("conclusion") :].lstrip(" :*"), VALIDATION_OPTIONS)
    return None if picked is None else picked == "True"
