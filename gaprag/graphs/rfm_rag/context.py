"""rfm_rag's settings (Studio's form). The paper leaves most values unspecified; the choices
are explained in docs/methods/rfm_rag.md."""

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
from gaprag.graphs.rfm_rag.feedback_model.features import LengthUnit
from gaprag.stores.store import RetrievalMode

FeedbackMode = Literal[
    "mlp", "relevance", "llm_judge", "heuristic", "never_sufficient", "always_sufficient"
]
QuestionMode = Literal["both", "query", "original"]
TaskType = Literal["auto", "short_answer", "yes_no"]
PoolScope = Literal["thread", "question"]
RELEVANCE_THRESHOLD = 0.6
"""feedback_mode=relevance's stop threshold on G_f: the offline replay on the calibration
questions' recorded pools (scripts/rfm_relevance_threshold.py; docs/methods/rfm_rag.md)."""


@dataclass(kw_only=True)
class Context(BaseContext):
    max_iterations: int = describe(
        3,
        "Maximum retrievals per question (paper: 3). The loop also stops when the pool is sufficient.",
        minimum=1,
        maximum=15,
        repeats=True,
    )
    top_k: int = describe(
        5,
        "Passages per retrieval (not given in the paper; 5 here, the standard_rag baseline's "
        "budget).",
        minimum=1,
        maximum=MAX_PASSAGES,
    )
    retrieval_mode: RetrievalMode = describe(
        "bm25", "bm25 (paper), dense or hybrid. Passages already seen for the question are skipped."
    )
    feedback_mode: FeedbackMode = describe(
        "mlp",
        "Sufficiency judge: mlp (the trained R-Feedback Model, paper), relevance (G_f >= "
        "relevance_threshold: the relevance-only baseline), llm_judge, heuristic "
        "(S_f >= 0.5), never_sufficient (the wo-RFM ablation: always max_iterations rounds), "
        "always_sufficient (one round).",
    )
    rf_weights: str = describe(
        "",
        "R-Feedback weights JSON (`python -m lab rfm train` in a gaprag checkout); empty uses the weights shipped with gaprag.",
        operator="path",
    )
    rf_threshold: float = describe(
        0.5,
        "Stop when the R-Feedback model's (calibrated) probability that the pool is sufficient "
        "is >= this (not given in the paper; 0.5 here).",
        minimum=0,
        maximum=MAX_PROBABILITY_THRESHOLD,
    )
    relevance_threshold: float = describe(
        RELEVANCE_THRESHOLD,
        "feedback_mode=relevance: stop when G_f, the cosine of the question with the pool's "
        "mean sentence vector (the R-Feedback model's embedder), is >= this (fitted on "
        "calibration questions 60+; docs/methods/rfm_rag.md).",
        minimum=0,
        maximum=MAX_PROBABILITY_THRESHOLD,
    )
    llm_judge_threshold: float = describe(
        0.5,
        "feedback_mode=llm_judge: stop when P(Yes) of the judge's Yes/No choice is >= this "
        "(without token probabilities the loop goes on).",
        minimum=0,
        maximum=MAX_PROBABILITY_THRESHOLD,
    )
    coverage_threshold: float = describe(
        0.2,
        "θ: an entity whose pool coverage is below this is a knowledge gap (not given; 0.2 here).",
        minimum=0,
        maximum=10,
    )
    coverage_length_unit: LengthUnit = describe(
        "sentences", "L_E in coverage = occurrences / L_E: pool sentences (default) or tokens."
    )
    prompt1_question_mode: QuestionMode = describe(
        "both",
        "What the evidence prompt is asked about: both (question + current search focus), "
        "query (the round's query only, literal Eq. 1) or original (the question only).",
    )
    task_type: TaskType = describe(
        "auto",
        "short_answer, yes_no, or auto (yes/no when the question starts with is/are/did...).",
    )
    pool_scope: PoolScope = describe(
        "question",
        "question: every question starts from an empty pool (paper); thread: with a "
        "checkpointer the pool persists across the turns of a thread and earlier turns' facts "
        "are shown to the judge and the answer too.",
    )
    answer_max_tokens: int = describe(
        128,
        "Output cap for the final (chain-of-thought) answer.",
        minimum=1,
        maximum=MAX_OUTPUT_TOKENS,
    )
    structure_max_tokens: int = describe(
        256, "Output cap for the entities/triples call.", minimum=1, maximum=MAX_OUTPUT_TOKENS
    )
    extract_max_tokens: int = describe(
        320, "Output cap for the evidence-condensing call.", minimum=1, maximum=MAX_OUTPUT_TOKENS
    )
    fills_max_tokens: int = describe(
        128, "Output cap for the placeholder-filling call.", minimum=1, maximum=MAX_OUTPUT_TOKENS
    )
    judge_max_tokens: int = describe(
        8, "Output cap for the llm_judge's Yes/No choice.", minimum=1, maximum=MAX_OUTPUT_TOKENS
    )


#: R-Feedback's stop threshold
CALIBRATION = Calibration(setting="rf_threshold", nodes=("feedback_classifier",))
