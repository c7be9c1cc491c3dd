"""IterKey's settings (Studio's form). Defaults follow the paper (Hayashi et al., arXiv
2505.08450); docs/methods/iterkey.md explains each choice the paper leaves open."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gaprag.context import (
    MAX_OUTPUT_TOKENS,
    MAX_PASSAGE_WORDS,
    MAX_PROBABILITY_THRESHOLD,
    BaseContext,
    Calibration,
    describe,
)
from gaprag.graphs.iterkey.analysis import FallbackPolicy, fallback_index
from gaprag.stores.store import RetrievalMode

RegenerationMode = Literal["keywords_only", "doc_by_doc"]
ValidationRule = Literal["threshold", "more_probable"]
PromptStyle = Literal["tuned", "paper"]


@dataclass(kw_only=True)
class Context(BaseContext):
    max_iterations: int = describe(
        5,
        "N: most keywords-retrieve-answer-validate rounds (paper: up to five).",
        minimum=1,
        maximum=25,
        repeats=True,
    )
    top_k: int = describe(
        3,
        "Passages shown per round to the answer and validation prompts (paper: 3). This alone "
        "sets what the model sees; top_k=5 with retrieval_mode=hybrid matches standard_rag. "
        "With regeneration_mode=doc_by_doc, one keyword call per passage each round.",
        minimum=1,
        maximum=15,
        repeats=True,
    )
    retrieval_mode: RetrievalMode = describe(
        "bm25",
        "bm25 (the paper's IterKey), dense (the IterKey (E5) ablation) or hybrid (RRF of both); "
        "every mode gets the same question + keywords query string.",
    )
    recall_k: int = describe(
        5,
        "Retrieval depth per round for recall statistics only: max(top_k, recall_k) passages "
        "are retrieved and their ids logged (history, retrieved_ids); only the first top_k ever "
        "reach a prompt. 0 retrieves just top_k (the paper reports Top-1..5 recall).",
        minimum=0,
        maximum=100,
    )
    validation_threshold: float = describe(
        0.5,
        "The validator accepts a round's answer (and the loop stops) when P(True) of its "
        "forced True/False choice, from first-token logprobs, is at least this (paper: the "
        "more probable option, i.e. 0.5). Without logprobs no answer is accepted and the loop "
        "runs to max_iterations.",
        minimum=0,
        maximum=MAX_PROBABILITY_THRESHOLD,
    )
    validation_rule: ValidationRule = describe(
        "threshold",
        "threshold: accept when P(True) >= validation_threshold (a tie at 0.5 accepts); "
        "more_probable: accept when True is the more probable option, P(True) > P(False), "
        "as the paper's forced decoding does (a tie does not accept).",
    )
    prompt_style: PromptStyle = describe(
        "tuned",
        "The keyword prompts (P1, P4): tuned (fixed instructions first, the query and the "
        "previous keywords last, so a server's prompt cache reuses the instructions) or paper "
        "(the paper's order: P1 names the query inside its request and ends on the output "
        "format; P4 gives the request, the query, the previous keywords, then the format).",
    )
    keywords_max_tokens: int = describe(
        50,
        "Output cap for the initial keyword list (paper Table 14: 50).",
        minimum=1,
        maximum=MAX_OUTPUT_TOKENS,
    )
    regenerate_max_tokens: int = describe(
        50,
        "Output cap for a regenerated keyword list (paper silent; same as keyword generation).",
        minimum=1,
        maximum=MAX_OUTPUT_TOKENS,
    )
    answer_max_tokens: int = describe(
        50,
        "Output cap for the answer call (paper Table 14: 50).",
        minimum=1,
        maximum=MAX_OUTPUT_TOKENS,
    )
    validate_max_tokens: int = describe(
        30,
        "Output cap for the True/False validation call without logprobs (paper Table 14: 30); "
        "the logprobs path reads the first non-blank token of a 3-token reply.",
        minimum=1,
        maximum=MAX_OUTPUT_TOKENS,
    )
    cot_max_tokens: int = describe(
        256,
        "Output cap for the chain-of-thought validation and regeneration prompts (cot).",
        minimum=1,
        maximum=MAX_OUTPUT_TOKENS,
    )
    max_passage_words: int = describe(
        256,
        "Passages are cut to this many words in prompts (paper: 256-token chunks).",
        minimum=1,
        maximum=MAX_PASSAGE_WORDS,
    )
    fallback_policy: FallbackPolicy = describe(
        "last",
        "Answer returned when no round validates (paper silent): last (a_N), first (a_1), "
        "majority (most frequent normalised answer, ties to the latest) or confident (the "
        "round the validator gave the highest P(True), ties to the latest).",
    )
    continue_after_true: bool = describe(
        False,
        "Keep iterating after a True verdict, for the paper's Table 9 analysis; the answer is "
        "still the first validated one.",
    )
    regeneration_mode: RegenerationMode = describe(
        "keywords_only",
        "keywords_only: new keywords from the question and previous keywords (the paper's "
        "method); doc_by_doc: one call per retrieved passage, lists concatenated (Table 10).",
    )
    cot: bool = describe(
        False,
        "Chain-of-thought validation and regeneration prompts (paper App. D: no consistent gain).",
    )
    query_joiner: str = describe(
        " ", "Separator between the question and the keywords in the retrieval query."
    )
    keywords_base_url: str = describe(
        "",
        "Endpoint of a separate keyword LLM (generation and regeneration, paper Table 7); "
        "empty uses GAPRAG_KEYWORDS_BASE_URL, else the main LLM.",
        operator="endpoint",
    )
    keywords_model: str = describe("", "Model name for the keyword LLM endpoint.", operator="model")
    validator_base_url: str = describe(
        "",
        "Endpoint of a separate validator LLM (paper Table 8); empty uses "
        "GAPRAG_VALIDATOR_BASE_URL, else the main LLM.",
        operator="endpoint",
    )
    validator_model: str = describe(
        "", "Model name for the validator LLM endpoint.", operator="model"
    )


#: the validator's threshold; its last validation is at the loop's bound (the answer is then
#: chosen among the rounds by ``fallback_policy``)
CALIBRATION = Calibration(
    setting="validation_threshold",
    nodes=("validate_answer",),
    after_last=0,
    switch="fallback_policy",
    choices=("last", "first", "majority", "confident"),
    pick=fallback_index,
)
