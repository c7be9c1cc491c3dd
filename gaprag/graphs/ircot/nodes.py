"""IRCoT's nodes: retrieve (for the question, then for each new thought) -> reason (one CoT
sentence over every passage so far) -> ... -> generate_answer."""

from __future__ import annotations

import re
from typing import Any

from langgraph.runtime import Runtime

from gaprag import nodes
from gaprag.deps import Deps
from gaprag.graphs.ircot.context import Context
from gaprag.graphs.ircot.demonstrations import (
    demonstrations,
    fact_query,
    first_line,
    without_wh_words,
)
from gaprag.graphs.ircot.state import State
from gaprag.nodes.pool import by_id
from gaprag.nodes.select import answer_call, scored_update
from gaprag.progress import emit
from gaprag.prompts import Passages, RenderedPrompt, load_prompts
from gaprag.state.base import Evidence

PROMPTS = load_prompts(__package__)
FORMATS = nodes.load_formats(__package__)
ANSWER = re.compile(r"answer is\s*:?\s*(.+)", re.IGNORECASE)


def final_answer(thought: str) -> str | None:
    """The answer a thought states ("... the answer is: X."), else None."""
    match = ANSWER.search(thought)
    return nodes.clean_answer(match.group(1)) if match else None


def first_sentence(text: str, *, keep_answer_line: bool = True) -> str:
    """The reply's first sentence (the model may write more than one); with
    ``keep_answer_line`` the whole first line when it states the answer."""
    line = next((ln.strip() for ln in text.strip().splitlines() if ln.strip()), "")
    match = re.match(r"(.+?[.!?])(\s|$)", line)
    if not match or (keep_answer_line and ANSWER.search(line)):
        return line
    return match.group(1)


async def retrieve(state: State, runtime: Runtime[Context], deps: Deps) -> dict[str, Any]:
    """Passages for the question (first step) or for the last thought, not gathered before.

    ``step_passages="new"``: the K best not gathered yet; ``"top"``: those of the top K not
    gathered yet (same title and text: once), so possibly fewer than K. With
    ``drop_wh_words`` the query searched (and recorded) has no wh-words.

    Reads: `question`, `thoughts`, `evidence`, `iterations`; writes: `evidence`, `queries`,
    `iterations`.
    """
    ctx = runtime.context
    query = next_query(state, ctx)
    if ctx.drop_wh_words:
        query = without_wh_words(query)
    round_ = state.iterations + 1
    new = ctx.step_passages == "new"
    hits = await nodes.retrieve(
        await deps.aretriever(ctx),
        [query],
        k=ctx.top_k,
        mode=ctx.retrieval_mode,
        round=round_,
        exclude={e["id"] for e in state.evidence} if new else (),
    )
    pool, added = nodes.update_evidence_pool(
        state.evidence, hits, key=by_id if new else _same_passage
    )
    emit(round=round_, query=query, added=len(added))
    return {"evidence": pool, "queries": [query], "iterations": round_}


def _same_passage(item: Evidence) -> tuple[str, str]:
    """A passage's identity in the pool: its title and text (the released code skips a
    retrieved paragraph whose title and text are already gathered)."""
    return (item["title"], item["text"])


def ends_empty(empty: bool, ctx: Context) -> bool:
    """Whether a step that wrote no sentence (``empty``) ends the reasoning (``empty_step``)."""
    return empty and ctx.empty_step == "stop"


async def reason(state: State, runtime: Runtime[Context], deps: Deps) -> dict[str, Any]:
    """The next sentence of the chain of thought over the first ``max_passages`` passages.

    Reads: `question`, `evidence`, `thoughts`, `iterations`; writes: `thoughts`,
    `last_step_empty`, `decisions`, `answer_p`.
    """
    ctx = runtime.context
    llm = await deps.achat(ctx)
    reply, tokens = await answer_call(
        llm, reason_messages(state, ctx), ctx, max_tokens=ctx.step_max_tokens
    )
    thought = first_sentence(reply, keep_answer_line=ctx.step_sentence == "answer_line")
    stated = final_answer(thought)
    ends = stated is not None or ends_empty(not thought, ctx)
    last = state.iterations >= ctx.max_steps  # every step retrieves once: this bounds the loop
    nodes.log_decision(
        "reason", state.iterations, "answer" if ends or last else "retrieve", path="rule"
    )
    emit(round=state.iterations, thought=thought)
    return {
        "thoughts": [thought] if thought else [],
        "last_step_empty": not thought,
        **scored_update(stated or "", tokens),
    }


async def generate_answer(state: State, runtime: Runtime[Context], deps: Deps) -> dict[str, Any]:
    """The answer: the chain's, or one answer call (``final_reader``).

    With ``final_reader="fallback"`` the answer the chain of thought stated, else one answer
    call over it; with ``"always"`` a reader call over the gathered passages answers every
    question. The call is scored with answer selection on (``answer_p``).

    Reads: `question`, `thoughts`, `last_step_empty`, `evidence`; writes: `answer`,
    `stop_reason`, `answer_p`.
    """
    ctx = runtime.context
    stated = final_answer(state.thoughts[-1]) if state.thoughts else None
    if stated:
        stop_reason = "answered"
    elif ends_empty(state.last_step_empty, ctx):
        stop_reason = "empty_step"
    else:
        stop_reason = "max_iterations"
    if stated and ctx.final_reader == "fallback":
        return {"answer": stated, "stop_reason": stop_reason}
    if nodes.reader_answers(ctx):  # the shared reader answers after this step
        return {"stop_reason": stop_reason}
    reply, tokens = await answer_call(
        await deps.achat(ctx), answer_messages(state, ctx), ctx, max_tokens=ctx.answer_max_tokens
    )
    answer = nodes.clean_answer(first_line(reply) if ctx.demos else reply)
    return {"answer": answer, "stop_reason": stop_reason, **scored_update(answer, tokens)}


def next_query(state: State, ctx: Context) -> str:
    """The question (first step), then the last thought (``query_from="thought"``) or the last
    thought that states a fact (``"fact"``, the released code's rule)."""
    if not state.thoughts:
        return state.question
    if ctx.query_from == "fact":
        return fact_query(list(state.thoughts), state.question)
    return state.thoughts[-1]


def _passages(state: State, ctx: Context) -> Passages:
    """The first ``max_passages`` passages, as the chosen prompt shows them."""
    fmt = FORMATS["titled" if ctx.demos else "passages"]
    return nodes.render_passages(
        state.evidence[: ctx.max_passages], fmt, max_words=ctx.max_passage_words
    )


def reason_messages(state: State, ctx: Context) -> RenderedPrompt:
    """One reasoning step's prompt: with ``demos``, the released demonstrations and format
    (the reply continues the answer after "A:"); else our zero-shot instructions."""
    thoughts = " ".join(state.thoughts)
    if ctx.demos:
        return PROMPTS["reason_demos"].render(
            demos=demonstrations(ctx.demo_set, "cot", ctx.demos),
            passages=_passages(state, ctx),
            question=state.question,
            thoughts=thoughts,
        )
    return PROMPTS["reason"].render(
        passages=_passages(state, ctx), question=state.question, thoughts=thoughts
    )


def answer_messages(state: State, ctx: Context) -> RenderedPrompt:
    """The answer call's prompt: the reader over the passages alone (``final_reader="always"``;
    with ``demos``, the released direct-answer demonstrations, or with ``reader_style="cot"``
    the chain-of-thought ones and a chain written afresh), else the fallback over the passages
    and the reasoning."""
    passages = _passages(state, ctx)
    if ctx.final_reader == "always" and ctx.demos and ctx.reader_style == "cot":
        return PROMPTS["reason_demos"].render(
            demos=demonstrations(ctx.demo_set, "cot", ctx.demos),
            passages=passages,
            question=state.question,
            thoughts="",
        )
    if ctx.final_reader == "always" and ctx.demos:
        return PROMPTS["answer_demos"].render(
            demos=demonstrations(ctx.demo_set, "direct", ctx.demos),
            passages=passages,
            question=state.question,
        )
    if ctx.final_reader == "always":
        return PROMPTS["read"].render(passages=passages, question=state.question)
    return PROMPTS["answer"].render(
        question=state.question, passages=passages, thoughts=" ".join(state.thoughts)
    )


def gathered(state: State) -> nodes.Gathered:
    """For the ranked reader: the passage pool and plain RAG's passages; the reasoning
    sentences as the method's own text."""
    return nodes.Gathered([*state.evidence, *state.gate_passages], list(state.thoughts))
