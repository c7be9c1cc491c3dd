"""RAG-EF's scripted model (a judge, a copying generator) and topics to fill a pair store."""

from __future__ import annotations

import re
from typing import Any

from langchain_core.messages import BaseMessage

from gaprag.stores.bm25 import tokenize
from gaprag.stores.pairs import PairStore
from gaprag.testing import ScriptedChatModel

ANSWER_MARK = "using the question-answer pairs"
JUDGE_MARK = "Verdict (correct or incorrect)"


def copy_mode(messages: list[BaseMessage]) -> str:
    """A fake generator: copy the answer of the first Q&A line whose question holds
    >= 50% of the target's content words; else the first context's first words."""
    lines = str(messages[-1].content).splitlines()
    want = set(tokenize(lines[-1].removeprefix("Question: ")))
    for line in lines[:-1]:
        m = re.match(r"Question: (.*?) Answer: (.*)$", line)
        if m and want and len(want & set(tokenize(m.group(1)))) >= 0.5 * len(want):
            return m.group(2)
    for line in lines:
        if line.startswith("Context1: "):
            return "ctx " + " ".join(line.split()[1:3])
    return "I do not know"


def fake(
    *, judge: str = "correct", extra: list[tuple[str, Any]] | None = None
) -> ScriptedChatModel:
    rules: list[tuple[str, Any]] = [(JUDGE_MARK, judge), *(extra or []), (ANSWER_MARK, copy_mode)]
    return ScriptedChatModel(rules=rules, default="fallback")


def answer_prompts(llm: ScriptedChatModel) -> list[str]:
    return [p for p in llm.prompts() if ANSWER_MARK in p]


TOPICS = [
    (
        "Who wrote the tragedy Hamlet?",
        "William Shakespeare",
        "Hamlet is a tragedy written by William Shakespeare.",
    ),
    (
        "What is the capital city of France?",
        "Paris",
        "Paris is the capital and largest city of France.",
    ),
    (
        "Which river flows through Cairo?",
        "Nile",
        "The Nile flows north through Cairo into the Mediterranean.",
    ),
    (
        "Who painted the Mona Lisa portrait?",
        "Leonardo da Vinci",
        "The Mona Lisa was painted by Leonardo da Vinci.",
    ),
    (
        "What is the tallest mountain on Earth?",
        "Mount Everest",
        "Mount Everest is the highest mountain above sea level.",
    ),
    (
        "Which planet is known as the red planet?",
        "Mars",
        "Mars is called the red planet because of iron oxide.",
    ),
]


def fill(store: PairStore, source: str = "synthetic") -> list[str]:
    return [store.add(q, a, c, source=source) for q, a, c in TOPICS]
