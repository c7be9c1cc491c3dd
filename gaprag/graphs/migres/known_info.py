"""MIGRES's known information: the seeded definition facts and the facts as prompt text."""

from __future__ import annotations

from gaprag import nodes
from gaprag.graphs.migres.context import Context
from gaprag.graphs.migres.prompting import FORMATS, WHOLE
from gaprag.graphs.migres.state import State
from gaprag.prompts import Passages

SEED_FACTS: dict[str, str] = {  # the released code's 2Wiki "inference" helpers (seed_facts)
    "maternal grandmother": "The maternal grandmother of a person is the mother of that person's mother.",
    "maternal grandfather": "The maternal grandfather of a person is the father of that person's mother.",
    "paternal grandmother": "The paternal grandmother of a person is the mother of that person's father.",
    "paternal grandfather": "The paternal grandfather of a person is the father of that person's father.",
}


def seeds_for(question: str, ctx: Context) -> list[str]:
    """The seeded definition facts for ``question`` (``seed_facts``; the released code's 2Wiki
    helpers): one per grandparent relation the question names."""
    if not ctx.seed_facts:
        return []
    low = question.lower()
    return [fact for phrase, fact in SEED_FACTS.items() if phrase in low]


def retrieved_facts(state: State, ctx: Context) -> bool:
    """Whether the pool holds a fact beyond the seeded definitions."""
    seeds = set(seeds_for(state.question, ctx))
    return any(fact not in seeds for fact in state.known_info)


def known_passages(state: State) -> Passages:
    """The known information as prompt text; each fact counts for the passages behind it."""
    sources = state.known_sources
    facts = [
        {"id": "", "text": fact, "source_ids": sources[i] if i < len(sources) else []}
        for i, fact in enumerate(state.known_info)
    ]
    return nodes.render_passages(facts, FORMATS["known"], max_words=WHOLE)
