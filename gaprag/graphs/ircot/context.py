"""IRCoT's settings (Studio's form); docs/methods/ircot.md explains each default."""

from __future__ import annotations

from dataclasses import dataclass

from gaprag.context import (
    MAX_OUTPUT_TOKENS,
    MAX_PASSAGE_WORDS,
    MAX_PASSAGES,
    BaseContext,
    describe,
)
from gaprag.stores.store import RetrievalMode


@dataclass(kw_only=True)
class Context(BaseContext):
    top_k: int = describe(
        4,
        "K: passages retrieved per step, for the question and for each thought (paper: 2-8).",
        minimum=1,
        maximum=MAX_PASSAGES,
    )
    retrieval_mode: RetrievalMode = describe(
        "bm25", "bm25 (the paper's retriever), dense or hybrid (RRF of both)."
    )
    max_steps: int = describe(
        5,
        "Most reasoning steps (one sentence each); each step but the last retrieves once more.",
        minimum=1,
        maximum=25,
        repeats=True,
    )
    max_passages: int = describe(
        15,
        "Most passages in a reasoning prompt; the earliest retrieved are kept (paper: 15).",
        minimum=1,
        maximum=MAX_PASSAGES,
    )
    max_passage_words: int = describe(
        100,
        "Passages are cut to this many words in prompts.",
        minimum=1,
        maximum=MAX_PASSAGE_WORDS,
    )
    step_max_tokens: int = describe(
        64,
        "Output cap for one reasoning step (one sentence).",
        minimum=1,
        maximum=MAX_OUTPUT_TOKENS,
    )
