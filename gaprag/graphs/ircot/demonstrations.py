"""IRCoT's released demonstrations (``demos/``, Apache-2.0; see ``demos/SOURCES.md``) and the
released code's rules for queries and answers."""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import Literal

Kind = Literal["cot", "direct"]

#: a reasoning step, not a fact: the released code does not query with it
_REASONING_STARTS = ("thus ", "thus,", "so ", "so,", "that is,", "therefore", "hence")
_ARITHMETIC = re.compile(
    r"(.*)(\d[\d,]*\.?\d+|\d+) ([+-]) (\d[\d,]*\.?\d+|\d+) = (\d[\d,]*\.?\d+|\d+)(.*)"
)


@functools.cache
def _blocks(demo_set: str, kind: Kind) -> tuple[str, ...]:
    text = (resources.files(__package__) / "demos" / f"{demo_set}_{kind}.txt").read_text(
        encoding="utf-8"
    )
    blocks: list[str] = []
    for block in re.split(r"\n\s*\n\s*\n", text):
        lines = [ln for ln in block.strip().splitlines() if not ln.startswith("# METADATA")]
        if lines:
            blocks.append("\n".join(lines).strip())
    return tuple(blocks)


def demonstrations(demo_set: str, kind: Kind, n: int) -> str:
    """The first ``n`` demonstrations of ``demo_set`` (file order), each its paragraphs,
    ``Q:`` and ``A:``, separated by two blank lines as the released prompts are."""
    return "\n\n\n".join(_blocks(demo_set, kind)[: max(0, n)])


def count(demo_set: str, kind: Kind = "cot") -> int:
    """How many demonstrations ``demo_set`` has."""
    return len(_blocks(demo_set, kind))


def is_reasoning(sentence: str) -> bool:
    """A sentence the released code does not query with: it starts with "So", "Thus",
    "Therefore", "Hence" or "That is", or it is arithmetic (``a + b = c``)."""
    text = sentence.lower()
    return text.startswith(_REASONING_STARTS) or bool(_ARITHMETIC.match(sentence))


def fact_query(thoughts: list[str], question: str) -> str:
    """The released code's query: the last sentence that is not a reasoning step, else the
    question."""
    facts = [t.strip() for t in thoughts if t.strip() and not is_reasoning(t.strip())]
    return facts[-1] if facts else question


#: words the released retriever drops from a BM25 query
_WH_WORDS = frozenset({"who", "what", "when", "where", "why", "which", "how", "does", "is"})


def without_wh_words(query: str) -> str:
    """The released code's BM25 query: the words (split on spaces) that are not "who",
    "what", "when", "where", "why", "which", "how", "does" or "is" (any case)."""
    return " ".join(w for w in query.split(" ") if w.strip().lower() not in _WH_WORDS)


_ANSWER_IS = re.compile(r".* answer is:? (.*)", re.IGNORECASE)


def first_line(reply: str) -> str:
    """A reader's answer as the released code extracts it: the first line; what follows
    "answer is" when the line says it (else the whole line); its last full stop dropped."""
    line = next((ln.strip() for ln in reply.strip().splitlines() if ln.strip()), "")
    found = _ANSWER_IS.match(line)
    line = found.group(1).strip() if found else line
    return line[:-1] if line.endswith(".") else line
