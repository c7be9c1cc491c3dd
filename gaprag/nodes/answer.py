"""The shared answer step: ask for a short answer over rendered passages, clean the reply."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from gaprag.llm.client import LLM
from gaprag.nodes.render import DEFAULT_FORMAT, PassageFormat, render_passages
from gaprag.prompts import Prompt

_PREFIX = re.compile(r"^(final answer|short answer|answer)\s*[:：-]\s*", re.I)


def clean_answer(text: str) -> str:
    """The first line of a reply, without an 'Answer:' prefix, quotes or a final period."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return ""
    answer = lines[0]
    for ln in lines:  # prefer an explicit "Answer:" line if the model reasoned first
        if _PREFIX.match(ln):
            answer = ln
            break
    answer = _PREFIX.sub("", answer).strip()
    answer = answer.strip("*").strip().strip('"').strip("'").strip()
    if answer.endswith(".") and not re.search(r"\b[A-Z]\.$", answer):
        answer = answer[:-1].strip()
    return answer


async def generate_answer(
    llm: LLM,
    prompt: Prompt,
    *,
    question: str,
    evidence: Sequence[Mapping[str, Any]],
    fmt: PassageFormat = DEFAULT_FORMAT,
    max_words: int = 150,
    max_tokens: int = 48,
    passages_var: str = "passages",
    **extra: Any,
) -> tuple[str, str]:
    """(cleaned answer, raw reply) for ``question`` over ``evidence`` rendered with ``fmt``."""
    values = {passages_var: render_passages(evidence, fmt, max_words=max_words), **extra}
    raw = await llm.agenerate(prompt.render(question=question, **values), max_tokens=max_tokens)
    return clean_answer(raw), raw
