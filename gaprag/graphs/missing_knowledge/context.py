"""missing_knowledge's settings (Studio's form)."""

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
from gaprag.graphs.missing_knowledge.state import KnowledgeBase
from gaprag.stores.store import RetrievalMode

Language = Literal["auto", "en", "zh"]
BudgetMode = Literal["matched", "additive"]
MkBudget = Literal["round_robin", "per_query"]
MkDedup = Literal["exclude_seen", "md5"]
MergedOrder = Literal["score", "interleave"]
FinalWhenNotMissing = Literal["regenerate", "reuse_draft"]
JudgeRoute = Literal["probability", "verdict"]
JudgePrompt = Literal["tuned", "paper"]


@dataclass(kw_only=True)
class Context(BaseContext):
    top_k: int = describe(
        4,
        "TopK: the paper's chunk budget, split between KB A and KB B (budget_mode); "
        "first_k can raise the KB A share. Paper: 4.",
        minimum=1,
        maximum=MAX_PASSAGES,
    )
    first_k: int = describe(
        5,
        "The first retrieval (KB A, user question) shows at least this many chunks: the "
        "standard_rag baseline's top_k, so the draft sees what the baseline sees. 0 = the "
        "paper's budget only (top_k//2 in matched mode).",
        minimum=0,
        maximum=MAX_PASSAGES,
    )
    judge_threshold: float = describe(
        0.5,
        "Stop after the first retrieval when P(nothing missing), the first-token probability "
        "of 'Yes' in a forced Yes/No choice asked after the judge's analysis, is at least this; "
        "else retrieve the missing knowledge. Without logprobs it always retrieves. "
        "0.5 = the paper's yes/no verdict; above 1 = always retrieve.",
        minimum=0,
        maximum=MAX_PROBABILITY_THRESHOLD,
    )
    judge_route: JudgeRoute = describe(
        "probability",
        "What decides whether to retrieve the missing knowledge: probability (P(nothing "
        "missing) of a forced Yes/No asked after the judge's analysis, against judge_threshold; "
        "one more call) or verdict (the judge's own `judge` field, as the paper routes; no "
        "extra call).",
    )
    judge_prompt: JudgePrompt = describe(
        "tuned",
        "The judge's instructions: tuned (the paper's criteria plus two clauses for small "
        "models: an unsupported answer counts as missing knowledge, queries read like an "
        "encyclopedia title) or paper (the paper's three criteria and steps only).",
    )
    budget_mode: BudgetMode = describe(
        "matched",
        "matched: top_k//2 user-question chunks + at most top_k - top_k//2 missing-knowledge "
        "chunks (paper, inferred); additive: top_k user-question chunks + top_k//2 on top.",
    )
    k_mk_per_query: int = describe(
        0,
        "Chunks retrieved per missing-knowledge query; 0 = the missing-knowledge budget.",
        minimum=0,
        maximum=MAX_PASSAGES,
    )
    mk_budget: MkBudget = describe(
        "round_robin",
        "round_robin: merge the queries' results rank by rank and stop at the budget; "
        "per_query: keep every query's top k_mk_per_query (after md5 dedup).",
    )
    mk_dedup: MkDedup = describe(
        "exclude_seen",
        "How the missing-knowledge queries avoid chunks already retrieved: exclude_seen (each "
        "query searches only chunks not retrieved yet, so the budget is filled with new ones) "
        "or md5 (each query takes its top chunks; copies are then dropped by md5, the paper's "
        "deduplication, so fewer may be added).",
    )
    max_mk_queries: int = describe(
        5,
        "Cap on the judge's queries (the paper sets none; its examples use 2).",
        minimum=0,
        maximum=20,
        repeats=True,
    )
    kb_primary: KnowledgeBase = describe(
        "passages",
        "KB A, searched with the user question: passages, qa_pairs or merged. "
        "Paper's best: merged (EM) or qa_pairs with kb_secondary=passages (F1).",
    )
    kb_secondary: KnowledgeBase = describe(
        "passages", "KB B, searched with the missing-knowledge queries: passages, qa_pairs, merged."
    )
    qa_store: str = describe(
        "",
        "Path of a question-answer pair store (`gaprag kb qa-pairs`); needed when a KB is "
        "qa_pairs or merged, unless a pair store was passed to the graph (kb_pairs).",
        operator="path",
    )
    qa_gamma: float = describe(
        1.0,
        "Pair ranking sim(q, question)^gamma * sim(q, chunk)^(1-gamma): 1 = match the pairs' "
        "questions (the paper indexes the pair text); 0.5 = RAG-EF's mix with the source chunk.",
        minimum=0,
        maximum=1,
    )
    merged_order: MergedOrder = describe(
        "score",
        "How a merged KB ranks passages and pairs: score (one ranking, as one index; dense "
        "scores are cosine on both sides) or interleave (alternate the two stores' ranks).",
    )
    retrieval_mode: RetrievalMode = describe(
        "dense", "Passage retrieval: dense (paper), bm25 or hybrid (library extensions)."
    )
    language: Language = describe(
        "auto",
        "Prompt set: en, zh (the paper's Chinese medical setting), auto = from the question.",
    )
    options_text: str = describe(
        "",
        "Answer options of a multiple-choice question, one per line (e.g. 'A. ...'); shown "
        "under the question in every prompt but never used as a retrieval query. An "
        "'Options:' block appended to the question is recognised the same way.",
    )
    judge_max_tokens: int = describe(
        512,
        "Output cap for the judge call (thought + verdict + lists + queries).",
        minimum=1,
        maximum=MAX_OUTPUT_TOKENS,
    )
    final_when_not_missing: FinalWhenNotMissing = describe(
        "regenerate",
        "When nothing is missing: regenerate (final call with the judge's thought) or "
        "reuse_draft (return the draft, one call fewer).",
    )
    include_missing_list: bool = describe(
        False, "Also list the judge's missing knowledge in the final prompt (not in the paper)."
    )


#: the judge's threshold
CALIBRATION = Calibration(setting="judge_threshold", nodes=("judge_missing",))
