"""The one tolerant parser for structured LLM replies.

Small local models wrap JSON in code fences, add prose before or after it, think aloud in
``<think>`` blocks, use single quotes or Python literals, and leave trailing commas. This module
recovers a JSON object from all of those, validates it against a pydantic schema, and never
raises on malformed input: callers get ``None`` and decide on a documented default.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)

_THINK = re.compile(r"<think>.*?(</think>|$)", re.S | re.I)
_FENCE = re.compile(r"```(?:json|JSON|python)?\s*(.*?)```", re.S)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")


def strip_thinking(text: str) -> str:
    return _THINK.sub("", text).strip()


def _balanced_objects(text: str) -> list[str]:
    """Every top-level ``{...}`` span, respecting quoted strings."""
    spans: list[str] = []
    depth, start, quote, escaped = 0, -1, "", False
    for i, ch in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
            continue
        if ch in "\"'" and depth > 0:
            quote = ch
        elif ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append(text[start : i + 1])
    if depth > 0 and start >= 0:  # cut off mid-object (max tokens): try closing it
        spans.append(text[start:] + "}" * depth)
    return spans


# what decoding hostile text may raise: deep nesting (RecursionError, MemoryError), sets of
# dicts from ``{{...}}`` (TypeError), odd literals (ValueError, SyntaxError)
_DECODE_ERRORS = (ValueError, SyntaxError, TypeError, MemoryError, RecursionError)
#: Longest candidate handed to the Python-literal fallback (it is slow on huge inputs).
_LITERAL_MAX_CHARS = 20_000


def _loads(candidate: str) -> Any:
    candidate = candidate.strip()
    for attempt in (candidate, _TRAILING_COMMA.sub(r"\1", candidate)):
        try:
            return json.loads(attempt)
        except _DECODE_ERRORS:  # JSONDecodeError is a ValueError
            pass
        if len(attempt) > _LITERAL_MAX_CHARS:
            continue
        try:  # single quotes, True/False/None
            return ast.literal_eval(attempt)
        except _DECODE_ERRORS:
            pass
        fixed = re.sub(r"\btrue\b", "True", attempt)
        fixed = re.sub(r"\bfalse\b", "False", fixed)
        fixed = re.sub(r"\bnull\b", "None", fixed)
        try:
            return ast.literal_eval(fixed)
        except _DECODE_ERRORS:
            pass
    return None


def extract_json(text: str) -> dict[str, Any] | None:
    """The first JSON object found in ``text``, or None."""
    text = strip_thinking(text)
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    for chunk in candidates:
        for span in [chunk, *_balanced_objects(chunk)]:
            value = _loads(span)
            if isinstance(value, dict):
                return value
    return None


def parse_model(text: str, schema: type[M]) -> M | None:
    """Validate the JSON in ``text`` against ``schema`` (lax coercion), or None."""
    data = extract_json(text)
    if data is None:
        return None
    # tolerate key case and spacing differences ("Missing Knowledge" -> "missing_knowledge")
    fields = schema.model_fields
    normalised: dict[str, Any] = {}
    for key, value in data.items():
        k = re.sub(r"[^a-z0-9]+", "_", str(key).strip().lower()).strip("_")
        normalised[k if k in fields else str(key)] = value
    try:
        return schema.model_validate(normalised)
    except (ValidationError, *_DECODE_ERRORS):
        return None


def parse_choice(text: str, options: Sequence[str]) -> str | None:
    """Which of ``options`` the reply states (first mention wins), or None.

    Looks first at a JSON value, then at the first word, then at the first whole-word mention.
    """
    text = strip_thinking(text)
    lowered = {o.lower(): o for o in options}
    data = extract_json(text)
    if data:
        for value in data.values():
            if str(value).strip().lower() in lowered:
                return lowered[str(value).strip().lower()]
    words = re.findall(r"[A-Za-z0-9_]+", text)
    if words and words[0].lower() in lowered:
        return lowered[words[0].lower()]
    best: tuple[int, str] | None = None
    for low, original in lowered.items():
        m = re.search(rf"\b{re.escape(low)}\b", text.lower())
        if m and (best is None or m.start() < best[0]):
            best = (m.start(), original)
    return best[1] if best else None
