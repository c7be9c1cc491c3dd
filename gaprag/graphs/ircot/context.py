"""IRCoT's settings (Studio's form); docs/methods/ircot.md explains each default."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gaprag.context import (
    MAX_OUTPUT_TOKENS,
    MAX_PASSAGE_WORDS,
    MAX_PASSAGES,
    BaseContext,
    describe,
)
from gaprag.stores.store import RetrievalMode

DemoSet = Literal["hotpotqa", "2wikimultihopqa", "musique"]
QueryFrom = Literal["thought", "fact"]
FinalReader = Literal["fallback", "always"]
EmptyStep = Literal["continue", "stop"]
StepPassages = Literal["new", "top"]
ReaderStyle = Literal["direct", "cot"]
StepSentence = Literal["answer_line", "first"]

#: demonstrations in the smallest released set (2WikiMultiHopQA and MuSiQue: 20)
MAX_DEMOS = 20


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
    drop_wh_words: bool = describe(
        False,
        "Drop 'who', 'what', 'when', 'where', 'why', 'which', 'how', 'does' and 'is' from each "
        "query before it is searched (the released code's BM25 queries).",
    )
    step_passages: StepPassages = describe(
        "new",
        "What a step adds: new (the K best passages not gathered yet, always K) or top (the "
        "released code: the top K for the query, of which those not gathered yet are added, "
        "so possibly fewer).",
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
    step_sentence: StepSentence = describe(
        "answer_line",
        "What of a step's reply joins the chain: its first sentence; answer_line: the whole "
        "first line when it states the answer (a chain written at once ends the reasoning), "
        "first: always the first sentence (the released code).",
    )
    step_max_tokens: int = describe(
        64,
        "Output cap for one reasoning step (one sentence).",
        minimum=1,
        maximum=MAX_OUTPUT_TOKENS,
    )
    demos: int = describe(
        0,
        "N: IRCoT's released chain-of-thought demonstrations (training questions with their "
        "paragraphs) shown before the question, in file order; 0 = zero-shot instructions.",
        minimum=0,
        maximum=MAX_DEMOS,
    )
    demo_set: DemoSet = describe(
        "hotpotqa",
        "Whose released demonstrations (and direct-answer demonstrations for the reader) "
        "are shown when demos > 0: hotpotqa, 2wikimultihopqa or musique.",
    )
    query_from: QueryFrom = describe(
        "thought",
        "The query after the first step: thought (the last sentence as written) or fact (the "
        "released code's rule: the last sentence that is not a reasoning step such as "
        "'So ...', 'Thus ...' or arithmetic; the question when there is none).",
    )
    empty_step: EmptyStep = describe(
        "continue",
        "A reasoning step whose reply holds no sentence: continue (retrieve again, up to "
        "max_steps) or stop (the released code's rule: the reasoning ends there).",
    )
    final_reader: FinalReader = describe(
        "fallback",
        "fallback: the answer the chain states, else one answer call over the passages and "
        "the reasoning; always (the released code): a reader call over the gathered "
        "passages answers every question (with the direct-answer demonstrations when demos "
        "> 0).",
    )
    reader_style: ReaderStyle = describe(
        "direct",
        "The reader with final_reader=always and demos > 0: direct (the released direct-answer "
        "demonstrations, the answer only) or cot (the released configuration for GPT3: the "
        "chain-of-thought demonstrations, a whole chain written afresh, the answer read after "
        "'answer is', else the whole first line).",
    )
