"""rag_ef's settings (Studio's form). Fixed value sets are ``Literal`` types and numeric
bounds are declared with ``minimum`` and ``maximum``; :class:`gaprag.context.BaseContext`
checks them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from gaprag.context import MAX_OUTPUT_TOKENS, MAX_PASSAGES, BaseContext, describe

QARender = Literal["qa", "q_only", "wrong_answer", "none"]
Judge = Literal["off", "llm", "gold"]
Similarity = Literal["dense", "bm25"]
Scoring = Literal["geometric", "arithmetic"]
AnswerMode = Literal["rag_ef", "standard"]


@dataclass(kw_only=True)
class Context(BaseContext):
    feedback_store: str = describe(
        "",
        "Path of the pair store (SQLite); empty uses an injected pair store, else "
        "GAPRAG_FEEDBACK_STORE, else GAPRAG_HOME/feedback.sqlite.",
        operator="path",
    )
    top_k: int = describe(
        5, "K: pairs retrieved by Eq. 2 (paper: 5).", minimum=1, maximum=MAX_PASSAGES
    )
    gamma: float = describe(
        0.5,
        "γ in Eq. 2: weight of question similarity (1 = question only, 0 = chunk only).",
        minimum=0,
        maximum=1,
    )
    scoring: Scoring = describe(
        "geometric", "geometric = Eq. 2 (paper); arithmetic = γ·sim_q + (1-γ)·sim_c (Table 10)."
    )
    similarity: Similarity = describe(
        "dense", "Similarity behind both factors: dense embeddings or BM25 (paper: bge-m3 dense)."
    )
    retrieval_mode: AnswerMode = describe(
        "rag_ef",
        "rag_ef = rank pairs (Eq. 2); standard = rank the store's chunks (Eq. 1 baseline).",
    )
    qa_render_mode: QARender = describe(
        "qa", "Q&A block: qa (paper), q_only, wrong_answer (Table 9 ablations) or none (Table 3)."
    )
    wrong_answer_seed: int = describe(
        0, "Seed for the wrong_answer ablation's answer swap.", minimum=0, maximum=2**31 - 1
    )
    sources: str = describe(
        "",
        "Pair sources to search, separated by commas or + (synthetic,expert or synthetic+expert, "
        "the form a --variant needs); empty = all.",
    )
    min_pair_score: float | None = describe(
        None,
        "Optional gate τ: drop pairs scoring below it (not in the paper; off = None).",
        minimum=0,
        maximum=1000,
    )
    max_contexts: int | None = describe(
        None,
        "Optional cap on the unique contexts N shown (None = paper behaviour, N ≤ K).",
        minimum=0,
        maximum=MAX_PASSAGES,
    )
    empty_store_fallback: bool = describe(
        True, "With no pairs to search, answer from the document retriever's top-K (not in paper)."
    )
    judge: Judge = describe(
        "off",
        "feedback_classifier: off (paper), llm (the model judges its answer), "
        "gold (exact match against the input's gold_answers).",
    )
    review: bool = describe(
        False, "Always pause for expert review after answering (needs a checkpointer)."
    )
    reanswer_after_feedback: bool = describe(
        True, "After inserting expert feedback, answer once more from the updated store."
    )
    max_feedback_rounds: int = describe(
        1, "Bound on expert feedback rounds per question.", minimum=0, maximum=5, repeats=True
    )
    answer_max_tokens: int = describe(
        32, "Output cap for the answer call (short answers).", minimum=1, maximum=MAX_OUTPUT_TOKENS
    )
    judge_max_tokens: int = describe(
        8, "Output cap for the judge call.", minimum=1, maximum=MAX_OUTPUT_TOKENS
    )

    @property
    def pauses(self) -> bool:
        """Whether a run with these settings can pause for expert feedback."""
        return self.max_feedback_rounds > 0 and (self.review or self.judge != "off")

    def source_filter(self) -> set[str] | None:
        """The ``sources`` setting as a set of labels; None searches every source."""
        names = {s.strip() for s in re.split(r"[,+]", str(self.sources or "")) if s.strip()}
        return names or None


__all__ = ["AnswerMode", "Context", "Judge", "QARender", "Scoring", "Similarity"]
