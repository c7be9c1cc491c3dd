"""escalating_rag's settings (Studio's form). The defaults are the measured choice for the
default model (its profile); docs/methods/escalating_rag.md explains them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gaprag.context import MAX_PROBABILITY_THRESHOLD, BaseContext, describe

#: the methods a rung may run (RAG-EF waits for a person's review: not composed)
Loop = Literal["ircot", "migres", "rfm_rag", "iterkey", "missing_knowledge"]
LOOPS: tuple[Loop, ...] = ("ircot", "migres", "rfm_rag", "iterkey", "missing_knowledge")
#: the most LLM calls a question may take, whatever the run sets
MAX_CALL_BUDGET = 64


@dataclass(kw_only=True)
class Context(BaseContext):
    gate: Literal["off", "logprob_mean", "logprob_margin", "logprob_min", "agreement"] = describe(
        "logprob_mean",
        "Plain RAG's confidence signal: stop with plain RAG's answer when it reaches "
        "gate_threshold; off always runs the first loop.",
    )
    gate_threshold: float = describe(
        -0.1054,
        "Plain RAG's answer is kept, and nothing else runs, when its signal reaches this "
        "(the signal's own unit: a mean token logprob for logprob_mean).",
        minimum=-100.0,
        maximum=100.0,
    )
    first_loop: Loop = describe(
        "ircot", "The method run when plain RAG's answer is unsure (its own gate off)."
    )
    second_loop: Loop | Literal["none"] = describe(
        "rfm_rag",
        "The method run when the answer is still unsure after the first loop; none stops there.",
    )
    escalate_threshold: float = describe(
        0.6,
        "After the first loop, stop when the chosen answer's probability reaches this (or two "
        "candidates agree); above 1 always runs the second loop.",
        minimum=0.0,
        maximum=MAX_PROBABILITY_THRESHOLD,
    )
    call_budget: int = describe(
        8,
        "The most LLM calls a question may take over every step; a loop is not started with "
        "fewer than two calls left, and a call past the budget is not sent.",
        minimum=1,
        maximum=MAX_CALL_BUDGET,
    )
    answer_scoring: Literal["off", "logprob"] = describe(
        "logprob",
        "Score each loop's final answer (its token logprobs, the same request): the "
        "probability answer_choice=logprob and escalate_threshold read; off scores none.",
    )
    answer_choice: Literal["off", "logprob", "agreement"] = describe(
        "logprob",
        "How the answer is chosen among the candidates: logprob (agreement first, then the "
        "loop answer unless plain RAG's probability exceeds it by choice_margin), agreement "
        "(an answer two candidates share, else the latest loop's), off (the latest loop's).",
    )
