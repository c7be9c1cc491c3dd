"""The shared answer choice: score the final answer (``answer_scoring``) and choose the
question's answer between plain RAG's (the gate's) and the method's loop's (``answer_choice``;
both off by default).

Where the gate let the loop run, a run holds two candidates: plain RAG's answer, recorded in
the ``gate`` decision (its ``p`` here is ``exp`` of its mean token logprob, from the gate's trace
record: :func:`gaprag.nodes.gate.read_gate`), and the loop's final answer. The call whose text
became the loop's answer is scored on that same call when ``answer_scoring="logprob"`` (only logprobs are
requested, the messages are the same: :func:`answer_call`, :func:`answer_structured` for a
JSON reply): the answer span's tokens (after "the answer is" inside a chain-of-thought
sentence, the value of a JSON ``text`` field such as MIGRES's ``answer.text``) give
``p = exp(mean logprob)``, as the gate's ``logprob_mean`` does (:func:`answer_probability`).
The method records it in ``answer_p`` (:func:`scored_update`). The rules themselves are
plain functions in :mod:`gaprag.nodes.choice`, which escalating_rag and the offline replays
call too.

The ``select`` step (a graph tail declares it: ``add_short_answer(..., choice=True)``) runs
after the method's answer (and the shared reader), before the short-answer step, only when the
loop ran:

The rule is :func:`gaprag.nodes.choice.choose_answer` over the two, as escalating_rag's
``choose`` applies it to any number:

- the two agree after normalisation: the loop's answer, ``p`` the higher of their
  probabilities (1 when neither has one); path ``agreement``;
- ``logprob`` with both probabilities: plain RAG's answer when its ``p`` exceeds the loop
  answer's by at least ``choice_margin`` (:func:`gaprag.nodes.choice.takes_gate`), else the
  loop's; path ``logprobs``;
- ``agreement``, or ``logprob`` without both probabilities (no logprobs, an answer the
  method does not score): the loop's answer, ``p`` 0; path ``agreement``
  (``agreement_fallback`` when the rule was ``logprob``).

The step records decision ``select`` with
the chosen candidate, its ``p`` and path, and a trace record ``{call: "select", gate_p,
loop_p, agree}``. With ``answer_choice="off"`` it does nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langgraph.runtime import Runtime

from gaprag.accounting import record_decision
from gaprag.llm.client import LLM, M, Messages, Structured, TokenLogprob
from gaprag.nodes.choice import Candidate, answer_probability, choose_answer
from gaprag.nodes.decisions import log_decision
from gaprag.nodes.gate import read_gate


def scoring(ctx: Any) -> bool:
    """Whether the run scores its final answer (``answer_scoring="logprob"``)."""
    return getattr(ctx, "answer_scoring", "off") != "off"


async def answer_call(
    llm: LLM, messages: Messages, ctx: Any, *, max_tokens: int
) -> tuple[str, list[TokenLogprob] | None]:
    """The reply of a call whose text may become the final answer, and its tokens' logprobs
    when ``answer_scoring="logprob"`` (the same messages, logprobs requested); None tokens
    when it is off or the endpoint gives none."""
    if not scoring(ctx):
        return await llm.agenerate(messages, max_tokens=max_tokens), None
    scored = await llm.agenerate_scored(messages, max_tokens=max_tokens)
    return scored.text, scored.tokens


async def answer_structured(
    llm: LLM,
    messages: Messages,
    schema: type[M],
    ctx: Any,
    *,
    default: M,
    max_tokens: int,
    call: str,
) -> Structured[M]:
    """The structured reply of a call whose answer field may become the final answer (a JSON
    ``text`` field), with its tokens' logprobs in ``tokens`` when scoring is on (the same
    request, logprobs asked for); as :func:`answer_call` for free text."""
    return await llm.astructured(
        messages,
        schema,
        default=default,
        max_tokens=max_tokens,
        call=call,
        logprobs=scoring(ctx),
    )


def scored_update(answer: str, tokens: Sequence[TokenLogprob] | None) -> dict[str, Any]:
    """The state update recording ``answer``'s probability in ``answer_p`` (nothing when it
    has none)."""
    p = answer_probability(tokens, answer) if answer else None
    return {} if p is None else {"answer_p": {answer: round(p, 6)}}


def select(state: Any, runtime: Runtime[Any]) -> dict[str, Any]:
    """The graph node: the question's answer between plain RAG's and the loop's.

    With ``answer_choice="off"``, or without the gate's answer, it does nothing.

    Reads: `answer`, `answer_p`, `decisions`, `trace`, `iterations`; writes: `answer` (when plain RAG's
    is chosen), `decisions`, `trace`.
    """
    ctx = runtime.context
    said = read_gate(state.decisions or [], state.trace or [])
    if ctx.answer_choice == "off" or said.answer is None:
        return {}
    loop_answer = str(state.answer or "")
    gate = Candidate(said.answer, said.p)
    loop = Candidate(loop_answer, (state.answer_p or {}).get(loop_answer))
    choice = choose_answer([gate, loop], ctx.answer_choice, ctx.choice_margin)
    answer = gate.answer if choice.index == 0 else loop_answer
    log_decision(
        "select",
        state.iterations,
        "gate" if choice.index == 0 else "loop",
        p=choice.p,
        path=choice.path,
        threshold=ctx.choice_margin if choice.path == "logprobs" else None,
        answer=answer,
    )
    record_decision(call="select", gate_p=gate.p, loop_p=loop.p, agree=choice.agree)
    return {"answer": answer} if answer != loop_answer else {}
