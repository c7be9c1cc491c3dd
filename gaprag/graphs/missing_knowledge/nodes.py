"""missing_knowledge's nodes: retrieve (KB A) -> generate_draft -> judge_missing -> (when
knowledge is missing: by P(nothing missing) < judge_threshold, or by the judge's own verdict with
``judge_route="verdict"``) retrieve_missing (KB B, new chunks only) -> update_evidence_pool ->
generate_answer."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

from langgraph.runtime import Runtime

from gaprag import nodes
from gaprag.deps import Deps
from gaprag.graphs.missing_knowledge.context import Context
from gaprag.graphs.missing_knowledge.judge import (
    NOTHING_MISSING,
    Judgement,
    mk_queries,
    search_queries,
)
from gaprag.graphs.missing_knowledge.knowledge_base import (
    KnowledgeBaseRetriever,
    budget,
    evidence_md5,
    merge_round_robin,
    open_pair_store,
    pair_retriever,
    to_evidence,
)
from gaprag.graphs.missing_knowledge.question import language, question_block, split_question
from gaprag.graphs.missing_knowledge.state import Chunk, KnowledgeBase, State
from gaprag.graphs.missing_knowledge.turns import load_turns, with_follow_up
from gaprag.llm.client import LLM
from gaprag.nodes.select import answer_call, scored_update
from gaprag.operator import chosen_by_run
from gaprag.progress import emit
from gaprag.prompts import Passages, RenderedPrompt, load_prompts
from gaprag.stores.retriever import Retriever

PROMPTS = load_prompts(__package__)
TURNS = load_turns(__package__)
FORMATS = nodes.load_formats(__package__)
NONE = {"en": "(none)", "zh": "（无）"}  # an empty context section; the thought's fallback
ENOUGH, MISSING = "Yes", "No"  # the forced choice after the judge's analysis: "Yes" = stop


def pair_text(chunk: Chunk) -> str:
    """A pair as ``Q: ...\\nA: ...`` (a retriever's plain text gets its title as the question)."""
    text = chunk["text"].strip()
    if not text.startswith("Q:"):
        text = f"Q: {chunk['title']}\nA: {text}" if chunk["title"] else text
    return text


def format_chunks(chunks: Sequence[Chunk], *, max_words: int = 150, lang: str = "en") -> Passages:
    """Documents first (``Document[i]: ...``), then question-answer pairs (``Q:`` / ``A:``);
    numbering starts at 1 in each call (each prompt section)."""
    docs = [c for c in chunks if c["kind"] == "doc"]
    pairs = [{**c, "text": pair_text(c)} for c in chunks if c["kind"] == "qa"]
    parts = [
        nodes.render_passages(docs, FORMATS["documents"], max_words=max_words),
        nodes.render_passages(pairs, FORMATS["qa_pairs"], max_words=max_words),
    ]
    return nodes.join_passages(parts) or Passages(NONE.get(lang, NONE["en"]))


def render(name: str, **values: Any) -> RenderedPrompt:
    """Prompt ``name`` (its worked example, if any, goes as a user/assistant turn pair)."""
    return PROMPTS[name].render(**values)


async def knowledge_base(ctx: Context, deps: Deps, which: KnowledgeBase) -> KnowledgeBaseRetriever:
    """KB ``which`` over the run's passage store and pair store (each as it is needed)."""
    return KnowledgeBaseRetriever(
        which,
        await deps.aretriever(ctx) if which in ("passages", "merged") else None,
        await pair_source(ctx, deps) if which in ("qa_pairs", "merged") else None,
        merged_order=ctx.merged_order,
    )


async def pair_source(ctx: Context, deps: Deps) -> Retriever | None:
    """The injected pair store (``kb_pairs``) or the one at ``qa_store``, ranked with
    ``qa_gamma``; None when there is neither."""
    if deps.kb_pairs is None and not ctx.qa_store:
        return None
    create = not chosen_by_run(ctx, "qa_store")  # a run's own path: an existing store
    make = functools.partial(open_pairs, deps.kb_pairs, ctx.qa_store, ctx.qa_gamma, create)
    key = ("missing_knowledge.pairs", ctx.qa_store, ctx.qa_gamma, create)
    return await deps.acached(key, make)


def open_pairs(given: Any, path: str, gamma: float, create: bool = True) -> Retriever:
    """The given pair store, else the one at ``path`` (``create=False``: only an existing
    one), as a retriever ranked with ``gamma``."""
    store = given if given is not None else open_pair_store(path, create=create)
    return pair_retriever(store, gamma=gamma)


def chunk_budget(ctx: Context) -> tuple[int, int, int]:
    """(first retrieval, per missing-knowledge query, missing-knowledge total)."""
    return budget(ctx.top_k, ctx.budget_mode, ctx.k_mk_per_query, ctx.first_k)


async def retrieve(state: State, runtime: Runtime[Context], deps: Deps) -> dict[str, Any]:
    """The first retrieval: the question's chunks from the primary knowledge base.

    Reads: `question`; writes: `initial_contexts`, `evidence`, `queries`, `iterations`.
    """
    ctx = runtime.context
    k_orig, _, _ = chunk_budget(ctx)
    query, _ = split_question(state.question)
    base = await knowledge_base(ctx, deps, ctx.kb_primary)
    found = await base.achunks(query, k_orig, mode=ctx.retrieval_mode, retrieved_by="orig", round=1)
    emit(round=1, query=query, kb=ctx.kb_primary, added=len(found))
    return {
        "initial_contexts": found,
        "evidence": [to_evidence(c, 1) for c in found],
        "queries": [query],
        "iterations": 1,
    }


async def generate_draft(state: State, runtime: Runtime[Context], deps: Deps) -> dict[str, Any]:
    """The draft answer over the first chunks, which the judge reviews.

    Reads: `question`, `initial_contexts`; writes: `draft_answer`, `answer_p`.
    """
    ctx = runtime.context
    lang = language(ctx.language, state.question)
    messages = render(
        f"draft_{lang}",
        context=format_chunks(state.initial_contexts, max_words=ctx.max_passage_words, lang=lang),
        question=question_block(state.question, ctx.options_text, lang),
    )
    llm = await deps.achat(ctx)
    reply, tokens = await answer_call(llm, messages, ctx, max_tokens=ctx.answer_max_tokens)
    draft = nodes.clean_answer(reply)
    return {"draft_answer": draft, **scored_update(draft, tokens)}


async def judge_missing(state: State, runtime: Runtime[Context], deps: Deps) -> dict[str, Any]:
    """The one judge call (thought, verdict, missing knowledge, queries), then the loop decision.

    The decision (:func:`decide`) is the judge's own verdict (``judge_route="verdict"``, the
    paper) or P(nothing missing): a forced Yes/No choice asked after the judge's analysis, read
    from first-token logprobs; stop iff p >= ``judge_threshold``; without a probability (no
    logprobs, no Yes/No among them) retrieve. A calibration run never stops.

    Reads: `question`, `initial_contexts`, `draft_answer`; writes: `missing`, `judge_verdict`,
    `thought`, `missing_knowledge`, `mk_queries`, `judge_parse_ok`, `decisions`.
    """
    ctx = runtime.context
    lang = language(ctx.language, state.question)
    messages = PROMPTS[judge_prompt_name(ctx, lang)].render(
        question=question_block(state.question, ctx.options_text, lang),
        context=format_chunks(state.initial_contexts, max_words=ctx.max_passage_words, lang=lang),
        draft=state.draft_answer or "(empty)",
    )
    llm = await deps.achat(ctx)
    judged = await llm.astructured(
        messages,
        Judgement,
        default=NOTHING_MISSING,
        max_tokens=ctx.judge_max_tokens,
        call="judge_missing",
    )
    verdict = judged.value
    stem, _ = split_question(state.question)
    stop, queries, (p, path, threshold) = await decide(llm, messages, verdict, stem, lang, ctx)
    answer: str | None = None  # the answer had it stopped here, when known (always in calibration)
    if ctx.calibration:
        stopped = dataclasses.replace(
            state, thought=verdict.thought, missing_knowledge=verdict.missing_knowledge
        )
        answer = await answer_without_new_chunks(stopped, ctx, deps, lang)
    elif ctx.final_when_not_missing == "reuse_draft":
        answer = state.draft_answer
    nodes.log_decision(
        "judge_missing",
        1,
        "stop" if stop else "continue",
        p=p,
        path=path,
        threshold=threshold,
        answer=answer,
    )
    emit(
        judge=verdict.judge,
        p_enough=p,
        stop=stop,
        queries=queries,
        parse_ok=judged.path != "default",
    )
    return {
        "missing": not stop,
        "judge_verdict": verdict.judge,
        "thought": verdict.thought,
        "missing_knowledge": verdict.missing_knowledge,
        "mk_queries": queries,
        "judge_parse_ok": judged.path != "default",
    }


async def decide(
    llm: LLM, messages: RenderedPrompt, verdict: Judgement, stem: str, lang: str, ctx: Context
) -> tuple[bool, list[str], tuple[float | None, str, float | None]]:
    """(stop, the missing-knowledge queries, (p, path, threshold) for the decision record).

    ``judge_route="verdict"`` (the paper): retrieve when the judge says knowledge is missing
    and named queries (or missing pieces) to send; p is None, path ``verdict``.
    ``probability``: stop iff P(nothing missing) >= ``judge_threshold``; when it retrieves
    without the judge's queries, the user question is sent again. A calibration run never
    stops."""
    if ctx.judge_route == "verdict":
        queries = mk_queries(verdict, ctx.max_mk_queries) if verdict.judge else []
        if ctx.calibration and not queries:
            queries = search_queries(verdict, stem, ctx.max_mk_queries)
        return not queries, queries, (None, "verdict", None)
    p, path, says = await enough_probability(llm, messages, verdict.thought, lang, ctx)
    stop = nodes.should_stop(
        p, ctx.judge_threshold, calibration=ctx.calibration, says_stop=says,
        no_logprobs=ctx.no_logprobs,
    )  # fmt: skip
    queries = [] if stop else search_queries(verdict, stem, ctx.max_mk_queries)
    return stop, queries, (p, path, ctx.judge_threshold)


def judge_prompt_name(ctx: Context, lang: str) -> str:
    """The judge prompt's name: ``judge_<lang>``, or ``judge_paper_en`` for the paper's own
    criteria (English; the Chinese prompt is the same in both settings)."""
    return "judge_paper_en" if ctx.judge_prompt == "paper" and lang == "en" else f"judge_{lang}"


async def enough_probability(
    llm: LLM, judge_messages: RenderedPrompt, thought: str, lang: str, ctx: Context
) -> nodes.Reading:
    """(P(nothing missing), how it was decided, the model's own answer without logprobs). The
    judge prompt, its analysis as the assistant's turn (not its verdict, which the model
    would copy), then "enough? Yes/No"; p is P("Yes") among Yes/No in the first token's
    logprobs. An endpoint known to give no logprobs is asked only with
    ``no_logprobs="trust_answer"`` (else its answer could not be used): path ``no-logprobs``."""
    if not llm.supports_logprobs and ctx.no_logprobs == "retrieve_more":
        return nodes.Reading(None, "no-logprobs", None)
    messages = with_follow_up(
        judge_messages, PROMPTS[f"enough_{lang}"], TURNS[f"enough_{lang}"], thought=thought
    )
    choice = await llm.achoose(messages, [ENOUGH, MISSING], default=MISSING, call="judge_enough")
    return nodes.read_choice(choice, ENOUGH)


async def answer_without_new_chunks(state: State, ctx: Context, deps: Deps, lang: str) -> str:
    """The answer the method gives when it stops after the first retrieval (what
    ``generate_answer`` returns then): the draft with ``reuse_draft``, else the final prompt
    with the judge's thought and no new chunks (one extra call; calibration runs only)."""
    if ctx.final_when_not_missing == "reuse_draft":
        return state.draft_answer
    messages = final_messages(dataclasses.replace(state, mk_contexts=[]), ctx, lang)
    llm = await deps.achat(ctx)
    reply = await llm.agenerate(messages, max_tokens=ctx.answer_max_tokens)
    return nodes.clean_answer(reply) or state.draft_answer


async def retrieve_missing(state: State, runtime: Runtime[Context], deps: Deps) -> dict[str, Any]:
    """Each query's top chunks from the second knowledge base.

    Among those not retrieved yet (``mk_dedup="exclude_seen"``: the first chunks and the earlier
    queries' chunks are excluded, so every query brings new ones), or over the whole knowledge
    base (``"md5"``, the paper's: repeats are dropped by the merge).

    Reads: `mk_queries`, `initial_contexts`; writes: `mk_candidates`, `queries`, `iterations`.
    """
    ctx = runtime.context
    _, per_query, _ = chunk_budget(ctx)
    base = await knowledge_base(ctx, deps, ctx.kb_secondary)
    seen = {c["id"] for c in state.initial_contexts}
    candidates = []
    for q in state.mk_queries:
        exclude = seen if ctx.mk_dedup == "exclude_seen" else set()
        found = await base.achunks(
            q, per_query, mode=ctx.retrieval_mode, retrieved_by="mk", round=2, exclude=exclude
        )
        seen.update(c["id"] for c in found)
        emit(round=2, query=q, kb=ctx.kb_secondary, found=len(found))
        candidates.append(found)
    return {"mk_candidates": candidates, "queries": list(state.mk_queries), "iterations": 2}


def update_evidence_pool(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Merge the queries' chunks rank by rank, within the budget.

    Chunks are deduplicated by md5 against the first chunks and each other; the evidence is the
    first chunks (round 1) plus these (round 2).

    Reads: `initial_contexts`, `mk_candidates`, `mk_round`; writes: `mk_contexts`, `evidence`,
    `mk_round`.
    """
    ctx = runtime.context
    _, _, total = chunk_budget(ctx)
    seen = [c["md5"] for c in state.initial_contexts]
    limit = total if ctx.mk_budget == "round_robin" else None
    added = merge_round_robin(state.mk_candidates, seen, limit)
    emit(round=2, added=len(added))
    pool, _ = nodes.update_evidence_pool(
        [to_evidence(c, 1) for c in state.initial_contexts],
        [to_evidence(c, 2) for c in added],
        key=evidence_md5,
    )
    return {"mk_contexts": added, "evidence": pool, "mk_round": state.mk_round + 1}


async def generate_answer(state: State, runtime: Runtime[Context], deps: Deps) -> dict[str, Any]:
    """The final answer over the first chunks, the judge's thought and the new chunks.

    The draft is the answer when nothing was missing and ``final_when_not_missing`` reuses it, or
    when the shared reader answers after this step.

    Reads: `question`, `initial_contexts`, `draft_answer`, `missing`, `thought`,
    `missing_knowledge`, `mk_contexts`, `mk_round`; writes: `answer`, `stop_reason`, `answer_p`.
    """
    ctx = runtime.context
    stop = stop_reason(state)
    if nodes.reader_answers(ctx) or (
        not state.missing and ctx.final_when_not_missing == "reuse_draft"
    ):  # the shared reader answers after this step, or the draft is the answer
        return {"answer": state.draft_answer, "stop_reason": stop}
    lang = language(ctx.language, state.question)
    messages = final_messages(state, ctx, lang)
    llm = await deps.achat(ctx)
    reply, tokens = await answer_call(llm, messages, ctx, max_tokens=ctx.answer_max_tokens)
    answer = nodes.clean_answer(reply)
    return {
        "answer": answer or state.draft_answer,
        "stop_reason": stop,
        **scored_update(answer, tokens),
    }


def stop_reason(state: State) -> str:
    """``enough_knowledge``: the decision stopped after the first retrieval;
    ``answered_after_missing_knowledge``: the one missing-knowledge round ran (the method's
    bound); ``no_missing_knowledge_queries``: it decided to retrieve but had no query."""
    if not state.missing:
        return "enough_knowledge"
    return "answered_after_missing_knowledge" if state.mk_round else "no_missing_knowledge_queries"


def final_messages(state: State, ctx: Context, lang: str) -> RenderedPrompt:
    """Context / Missing Knowledge Context (the thought, then the new chunks) / Question."""
    mk_context: str = ""
    if state.mk_contexts:
        mk_context = format_chunks(state.mk_contexts, max_words=ctx.max_passage_words, lang=lang)
    thought = state.thought
    if ctx.include_missing_list and state.missing_knowledge:
        thought = "\n".join([thought, *(f"- {m}" for m in state.missing_knowledge)]).strip()
    return render(
        f"answer_{lang}",
        context=format_chunks(state.initial_contexts, max_words=ctx.max_passage_words, lang=lang),
        thought=thought or NONE[lang],
        mk_context=mk_context,
        question=question_block(state.question, ctx.options_text, lang),
    )


def gathered(state: State) -> nodes.Gathered:
    """For the ranked reader: the evidence pool and plain RAG's passages; the judge's analysis,
    missing knowledge and queries as the method's own text."""
    passages = [*state.evidence, *state.gate_passages]
    notes = [state.thought, *state.missing_knowledge, *state.mk_queries]
    return nodes.Gathered(passages, [n for n in notes if n])
