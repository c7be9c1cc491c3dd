"""MIGRES's settings (Studio's form) and the per-task presets they resolve to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gaprag.context import (
    MAX_OUTPUT_TOKENS,
    MAX_PASSAGES,
    MAX_PROBABILITY_THRESHOLD,
    BaseContext,
    Calibration,
    describe,
)
from gaprag.errors import InputError
from gaprag.graphs.migres.filter import DEFAULT_EMBEDDING_DELTA, CrossEncoderScorer, Scorer
from gaprag.operator import policy_of
from gaprag.stores.store import RetrievalMode

TaskType = Literal["multihop", "odqa", "strategyqa"]
StopRule = Literal["probability", "answered"]
JudgeFormat = Literal["reasoning_first", "answer_first"]
# Paper, Table 11: T (most judge rounds) and delta (bge-reranker-base logits) per task type.
TASK_T: dict[str, int] = {"multihop": 5, "odqa": 3, "strategyqa": 5}
TASK_DELTA_LOGITS: dict[str, float] = {"multihop": 3.0, "odqa": 5.0, "strategyqa": 0.0}


@dataclass(kw_only=True)
class Context(BaseContext):
    task_type: TaskType = describe(
        "multihop",
        "multihop, odqa or strategyqa: picks the paper's T and cross-encoder delta for the task "
        "(Table 11), and yes/no prompts for strategyqa.",
    )
    max_iterations: int = describe(
        0,
        "T, the most judge rounds (skipped ones count); at most T+1 retrieval rounds. "
        "0 = the task's paper value: multihop 5, odqa 3, strategyqa 5.",
        minimum=0,
        maximum=25,
        repeats=True,
    )
    delta: float | str = describe(
        "auto",
        "Relevance threshold delta of the knowledge filter (passages and sentences scoring at "
        "least delta are kept). 'auto' = per scorer: the calibrated cosine threshold for the "
        f"default embedding scorer ({DEFAULT_EMBEDDING_DELTA}), or the paper's "
        "bge-reranker-base logits with a cross-encoder (multihop 3.0, odqa 5.0, strategyqa 0.0).",
        minimum=-100,
        maximum=100,
    )
    reranker: str = describe(
        "",
        "Path of a local sentence-transformers CrossEncoder for the knowledge filter (the paper "
        "uses BAAI/bge-reranker-base). Empty = cosine similarity with the store's embedder "
        "(the packaged MiniLM).",
        operator="path",
    )
    top_k: int = describe(
        5,
        "k: most snippets shown to the leaf (extraction) call per round.",
        minimum=1,
        maximum=MAX_PASSAGES,
    )
    n_retrieve: int = describe(
        50, "BM25 candidates per query before filtering.", minimum=1, maximum=500
    )
    max_queries: int = describe(
        3, "Most new queries kept per query-generation call.", minimum=1, maximum=10, repeats=True
    )
    retrieval_mode: RetrievalMode = describe(
        "bm25", "bm25 (the paper), dense or hybrid retrieval of candidates."
    )
    retry_prefix: bool = describe(
        True, "Retry a query prefixed 'Find information about ' when it returns fewer hits."
    )
    sentence_filter: bool = describe(
        True, "Filter inside kept passages at sentence level (MIGRES's default)."
    )
    llm_knowledge: bool = describe(
        True,
        "When no passage clears delta, ask the LLM for background from its own knowledge; its "
        "verified facts join the known information (paper: on; its Table 6 ablates it). Off: "
        "only facts cut from retrieved passages enter the pool, and a forced answer with no "
        "retrieved fact reads the question's first passages instead of the model's memory.",
    )
    stop_rule: StopRule = describe(
        "probability",
        "What ends the loop: probability (a forced Yes/No 'is the known information enough?' "
        "asked after the main call, P(Yes) against sufficiency_threshold; one more call a "
        "round) or answered (the paper: the main call gave an answer instead of "
        "'unanswerable'; no extra call).",
    )
    judge_format: JudgeFormat = describe(
        "reasoning_first",
        "The main call's JSON order: reasoning_first (what is missing and why, then the "
        "answer) or answer_first (the paper's: the answer, its explanation, then what is "
        "missing).",
    )
    sufficiency_threshold: float = describe(
        0.5,
        "stop_rule=probability: the loop stops when P(Yes) of the forced choice 'is the known "
        "information enough to answer?' (first-token logprobs, asked after the judge's reply) "
        "is at least this; higher = keep retrieving unless the model is sure. No logprobs or "
        "no retrieved fact: never stops before T.",
        minimum=0,
        maximum=MAX_PROBABILITY_THRESHOLD,
    )
    few_shot: bool = describe(
        False,
        "MIGRES*: two demonstrations per prompt (extraction, judge, queries, LLM knowledge, "
        "final answer) as user/assistant turns before the live one (our own demos, "
        "prompts.toml [demos]).",
    )
    verifier: Literal["llm", "off"] = describe(
        "llm",
        "Check each extracted fact against a cited passage: 'llm' (a yes/no entailment call, "
        "standing in for the paper's T5-XXL NLI model) or 'off' (accept every cited fact).",
    )
    skip_judge_if_no_new_info: bool = describe(
        True, "Skip the judge call (and reuse the missing information) when a round adds no fact."
    )
    seed_facts: bool = describe(
        False,
        "Start the known information with the definition of each maternal/paternal "
        "grandmother/grandfather the question names (the released code's 2WikiMultiHopQA "
        "helper): on for 2Wiki, off elsewhere.",
    )
    max_shown: int = describe(
        2,
        "A passage is shown at most this many times (a passage that supported a fact: once).",
        minimum=1,
        maximum=10,
    )
    min_snippet_tokens: int = describe(
        5, "Snippets with fewer words are never shown.", minimum=0, maximum=100
    )
    leaf_max_tokens: int = describe(
        400, "Output cap for the extraction call.", minimum=1, maximum=MAX_OUTPUT_TOKENS
    )
    judge_max_tokens: int = describe(
        200,
        "Output cap for the judge and final-answer calls.",
        minimum=1,
        maximum=MAX_OUTPUT_TOKENS,
    )
    query_max_tokens: int = describe(
        96, "Output cap for the query-generation call.", minimum=1, maximum=MAX_OUTPUT_TOKENS
    )
    knowledge_max_tokens: int = describe(
        160, "Output cap for the LLM-knowledge call.", minimum=1, maximum=MAX_OUTPUT_TOKENS
    )

    def __post_init__(self) -> None:
        text = self.delta
        if isinstance(text, str) and text.strip().lower() not in ("", "auto"):
            try:  # a number given as text (--set delta=3) is that number, bounds and all
                self.delta = float(text)
            except ValueError:
                raise InputError(
                    f"migres: delta={text[:60]!r} is not valid",
                    hint="use a number or 'auto'",
                ) from None
        super().__post_init__()


def budget(ctx: Context) -> int:
    """T: the most judge rounds (the task's value, at most the operator's cap, for 0)."""
    if ctx.max_iterations > 0:
        return ctx.max_iterations
    cap = policy_of(type(ctx)).max_bounds.get("max_iterations")
    return int(min(TASK_T[ctx.task_type], cap)) if cap is not None else TASK_T[ctx.task_type]


def threshold(ctx: Context, scorer: Scorer) -> float:
    """delta: an explicit value, or the scorer's default for the task."""
    if not (isinstance(ctx.delta, str) and ctx.delta.strip().lower() in ("", "auto")):
        return float(ctx.delta)
    if isinstance(scorer, CrossEncoderScorer):
        return TASK_DELTA_LOGITS[ctx.task_type]
    default = getattr(scorer, "default_delta", None)
    return float(default) if default is not None else DEFAULT_EMBEDDING_DELTA


#: the sufficiency judgement's threshold
CALIBRATION = Calibration(setting="sufficiency_threshold", nodes=("sufficiency",))
