"""Shared answer step: format passages for a prompt, ask for a short answer, clean it."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gaprag.llm.client import LLM
from gaprag.prompts import Prompt
from gaprag.state.base import Evidence


def truncate_words(text: str, max_words: int) -> str:
    words = text.split()
    return text if len(words) <= max_words else " ".join(words[:max_words]) + " ..."


def format_passages(
    evidence: Sequence[Evidence], *, max_words: int = 150, numbered: bool = True
) -> str:
    """Passages as ``[1] Title: text`` lines (titles help multi-hop questions)."""
    if not evidence:
        return "(no passages)"
    lines = []
    for i, ev in enumerate(evidence, 1):
        head = f"[{i}] " if numbered else ""
        title = f"{ev['title']}: " if ev.get("title") else ""
        lines.append(f"{head}{title}{truncate_words(ev['text'], max_words)}")
    return "\n".join(lines)


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


def generate_answer(
    llm: LLM,
    prompt: Prompt,
    *,
    question: str,
    evidence: Sequence[Evidence],
    max_words: int = 150,
    max_tokens: int = 48,
    **extra: str,
) -> str:
    messages = prompt.render(
        question=question, passages=format_passages(evidence, max_words=max_words), **extra
    )
    return clean_answer(llm.generate(messages, max_tokens=max_tokens))
