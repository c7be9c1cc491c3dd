"""IterKey's nodes: generate_keywords -> retrieve -> generate_answer -> validate_answer ->
(regenerate_keywords -> retrieve ...) -> finalize. Each round sees only its own passages and
K_(i+1) replaces K_i; docs/methods/iterkey.md explains every choice the paper leaves open."""

from __future__ import annotations

import json
from typing import Any

from langgraph.runtime import Runtime

from gaprag import nodes
from gaprag.accounting import record_decision
from gaprag.deps import Deps
from gaprag.graphs.iterkey.analysis import final_round
from gaprag.graphs.iterkey.context import Context
from gaprag.graphs.iterkey.parsing import (
    VALIDATION_OPTIONS,
    cot_verdict,
    merge_keyword_lists,
    parse_keywords,
    retrieval_query,
)
from gaprag.graphs.iterkey.state import IterationRecord, ParseFailure, State, VerdictScores
from gaprag.llm.client import LLM
from gaprag.nodes.select import answer_call, scored_update
from gaprag.progress import emit
from gaprag.prompts import Passages, load_prompts

PROMPTS = load_prompts(__package__)
FORMATS = nodes.load_formats(__package__)
# LLM.choose gives its constrained/text call ``max_tokens + 16`` (room for a JSON wrapper);
# asking for ``cap - 16`` keeps every validation request within the paper's cap of 30.
CHOOSE_EXTRA_TOKENS = 16


async def keywords_llm(ctx: Context, deps: Deps) -> LLM:
    return await deps.achat(
        ctx, role=deps.keywords_llm, base_url=ctx.keywords_base_url, model=ctx.keywords_model
    )


async def validator_llm(ctx: Context, deps: Deps) -> LLM:
    return await deps.achat(
        ctx, role=deps.validator_llm, base_url=ctx.validator_base_url, model=ctx.validator_model
    )


def documents(state: State, ctx: Context) -> Passages:
    return nodes.render_passages(
        state.evidence, FORMATS["documents"], max_words=ctx.max_passage_words
    )


async def generate_keywords(state: State, runtime: Runtime[Context], deps: Deps) -> dict[str, Any]:
    """Step 1: the first keyword list for the question.

    No list parsed: the round retrieves with the question alone.

    Reads: `question`; writes: `keywords`, `keyword_history`, `iterations`, `current_raw`,
    `parse_failures`.
    """
    ctx = runtime.context
    llm = await keywords_llm(ctx, deps)
    raw = await llm.agenerate(
        PROMPTS[styled("keywords", ctx)].render(question=state.question),
        max_tokens=ctx.keywords_max_tokens,
    )
    keywords = parse_keywords(raw)
    update: dict[str, Any] = {
        "keywords": keywords,
        "keyword_history": [keywords],
        "iterations": 1,
        "current_raw": {"keywords": raw},
    }
    if not keywords:  # no parsable list: retrieve with the question alone (plain BM25 RAG)
        record_decision(call="generate_keywords", path="default", fallback="question_only")
        update["parse_failures"] = [
            ParseFailure(node="generate_keywords", iteration=1, raw=raw[:300], fallback_used="[]")
        ]
    emit(round=1, keywords=keywords)
    return update


async def retrieve(state: State, runtime: Runtime[Context], deps: Deps) -> dict[str, Any]:
    """The round's documents for the question and its keywords.

    The top ``top_k`` replace the previous round's documents (no pool); up to ``recall_k`` ids are
    logged.

    Reads: `question`, `keywords`, `iterations`, `seen_doc_ids`; writes: `retrieval_query`,
    `queries`, `evidence`, `logged_doc_ids`.
    """
    ctx = runtime.context
    query = retrieval_query(state.question, state.keywords, ctx.query_joiner)
    hits = await nodes.retrieve(
        await deps.aretriever(ctx),
        [query],
        k=max(ctx.top_k, ctx.recall_k),
        mode=ctx.retrieval_mode,
        round=state.iterations,
    )
    docs = hits[: ctx.top_k]
    seen = set(state.seen_doc_ids)
    emit(round=state.iterations, query=query, added=sum(d["id"] not in seen for d in docs))
    return {
        "retrieval_query": query,
        "queries": [query],
        "evidence": docs,  # D_i replaces D_(i-1): no evidence pool
        "logged_doc_ids": [h["id"] for h in hits],
    }


async def generate_answer(state: State, runtime: Runtime[Context], deps: Deps) -> dict[str, Any]:
    """Step 2: an answer over the round's documents.

    Reads: `question`, `evidence`, `current_raw`; writes: `answer`, `current_raw`, `answer_p`.
    """
    ctx = runtime.context
    llm = await deps.achat(ctx)
    raw, tokens = await answer_call(
        llm,
        PROMPTS["answer"].render(documents=documents(state, ctx), question=state.question),
        ctx,
        max_tokens=ctx.answer_max_tokens,
    )
    answer = nodes.clean_answer(raw)
    return {
        "answer": answer,
        "current_raw": {**state.current_raw, "answer": raw},
        **scored_update(answer, tokens),
    }


async def _verdict(state: State, ctx: Context, deps: Deps) -> VerdictScores:
    """How the validator judged this round's answer: the option it picked, P(True) where the
    choice was decided on first-token logprobs, and the path that decided it."""
    if not state.answer:  # nothing to validate: no probability, so the loop goes on
        record_decision(call="validate_answer", path="default", reason="empty_answer")
        return VerdictScores(
            prob_true=None, prob_false=None, p=None, choice="False", method="default", raw=""
        )
    shown = documents(state, ctx)
    validator = await validator_llm(ctx, deps)
    if ctx.cot:  # the paper's CoT variant (App. D) is decided on its written conclusion
        raw = await validator.agenerate(
            PROMPTS["validate_cot"].render(
                documents=shown, question=state.question, answer=state.answer
            ),
            max_tokens=ctx.cot_max_tokens,
        )
        decided = cot_verdict(raw)
        method = "parsed" if decided is not None else "default"
        record_decision(call="validate_answer", path=method, mode="cot", value=bool(decided))
        return VerdictScores(
            prob_true=None,
            prob_false=None,
            p=None,
            choice=str(bool(decided)),
            method=method,
            raw=raw,
        )
    choice = await validator.achoose(
        PROMPTS["validate"].render(documents=shown, question=state.question, answer=state.answer),
        VALIDATION_OPTIONS,
        default="False",
        max_tokens=max(1, ctx.validate_max_tokens - CHOOSE_EXTRA_TOKENS),
        call="validate_answer",
    )
    reading = nodes.read_choice(choice, "True")
    return VerdictScores(
        prob_true=choice.probs.get("True"),
        prob_false=choice.probs.get("False"),
        p=reading.p,
        choice=choice.value,
        method=reading.path,
        raw=choice.raw,
    )


def styled(name: str, ctx: Context) -> str:
    """The prompt ``name`` in the run's ``prompt_style`` (``name_paper`` for the paper's order)."""
    return f"{name}_paper" if ctx.prompt_style == "paper" else name


def _says_true(scores: VerdictScores) -> bool | None:
    """The validator's own "True", where it answered without a probability."""
    return scores["choice"] == "True" if scores["method"].endswith("-no-logprobs") else None


def accepted(scores: VerdictScores, ctx: Context) -> bool:
    """Whether the validator accepts the answer: P(True) >= ``validation_threshold``. A choice
    not decided on logprobs has no probability: not accepted, unless
    ``no_logprobs="trust_answer"`` takes its answer; the CoT variant is decided on its written
    ``Conclusion:`` (paper App. D)."""
    if ctx.cot:
        return scores["method"] == "parsed" and scores["choice"] == "True"
    return _accepts(scores, ctx, calibration=False)


def _accepts(scores: VerdictScores, ctx: Context, *, calibration: bool) -> bool:
    """The decision on P(True): ``validation_rule="threshold"`` (P(True) >=
    ``validation_threshold``, :func:`gaprag.nodes.should_stop`) or ``"more_probable"``
    (P(True) > 0.5, the paper's forced decoding); without a probability as ``no_logprobs``
    says; never in a calibration run."""
    p = scores["p"]
    if ctx.validation_rule == "more_probable" and p is not None:
        return not calibration and p > 0.5
    return nodes.should_stop(
        p,
        ctx.validation_threshold,
        calibration=calibration,
        says_stop=_says_true(scores),
        no_logprobs=ctx.no_logprobs,
    )


def stops_here(scores: VerdictScores, verdict: bool, ctx: Context) -> bool:
    """Whether the loop ends on this round's verdict: an accepted answer (``nodes.should_stop``:
    without a probability only with ``no_logprobs="trust_answer"``, never in a calibration
    run), unless ``continue_after_true``."""
    if ctx.continue_after_true:
        return False
    if ctx.cot:
        return verdict and not ctx.calibration
    return _accepts(scores, ctx, calibration=ctx.calibration)


async def validate_answer(state: State, runtime: Runtime[Context], deps: Deps) -> dict[str, Any]:
    """Step 3: the validator's verdict on the round's answer, P(valid), stop or not.

    Also the round's record for the history.

    Reads: `question`, `answer`, `evidence`, `keywords`, `retrieval_query`, `logged_doc_ids`,
    `iterations`, `first_true_iteration`, `seen_keywords`, `seen_doc_ids`, `current_raw`; writes:
    `verdict`, `stop_validated`, `verdict_scores`, `verdicts`, `history`, `first_true_iteration`,
    `seen_keywords`, `seen_doc_ids`, `current_raw`, `parse_failures`, `decisions`.
    """
    ctx = runtime.context
    i = state.iterations
    scores = await _verdict(state, ctx, deps)
    verdict = accepted(scores, ctx)
    stop = stops_here(scores, verdict, ctx)
    nodes.log_decision(
        "validate_answer",
        i,
        "accept" if verdict else "reject",
        p=scores["p"],
        path=scores["method"],
        threshold=None if ctx.cot else ctx.validation_threshold,
        answer=state.answer,
    )
    failures: list[ParseFailure] = []
    if scores["method"] == "default" and state.answer:
        failures.append(
            ParseFailure(
                node="validate_answer", iteration=i, raw=scores["raw"][:300], fallback_used="False"
            )
        )
    seen_keywords = set(state.seen_keywords)
    new_keywords = [k for k in state.keywords if k.casefold() not in seen_keywords]
    seen_docs = set(state.seen_doc_ids)
    doc_ids = [d["id"] for d in state.evidence]
    new_doc_ids = [d for d in doc_ids if d not in seen_docs]
    record = IterationRecord(
        iteration=i,
        keywords=list(state.keywords),
        retrieval_query=state.retrieval_query,
        doc_ids=doc_ids,
        doc_scores=[d["score"] for d in state.evidence],
        logged_doc_ids=list(state.logged_doc_ids),
        documents=list(state.evidence),
        answer=state.answer,
        verdict=verdict,
        verdict_scores=scores,
        new_keywords=new_keywords,
        new_doc_ids=new_doc_ids,
        raw_keyword_output=state.current_raw.get("keywords", ""),
        raw_answer_output=state.current_raw.get("answer", ""),
        raw_validation_output=scores["raw"],
    )
    first_true = state.first_true_iteration
    if first_true is None and verdict:
        first_true = i
    emit(round=i, answer=state.answer, verdict=verdict, p=scores["p"], decided_by=scores["method"])
    return {
        "verdict": verdict,
        "stop_validated": stop,
        "verdict_scores": dict(scores),
        "verdicts": [verdict],
        "history": [record],
        "first_true_iteration": first_true,
        "seen_keywords": [*state.seen_keywords, *(k.casefold() for k in new_keywords)],
        "seen_doc_ids": [*state.seen_doc_ids, *new_doc_ids],
        "current_raw": {},
        "parse_failures": failures,
    }


async def regenerate_keywords(
    state: State, runtime: Runtime[Context], deps: Deps
) -> dict[str, Any]:
    """Step 4: a new keyword list from the question and the previous keywords.

    Doc by doc or with a chain of thought when set; no list parsed: the previous one is kept.

    Reads: `question`, `keywords`, `evidence`, `iterations`; writes: `keywords`, `keyword_history`,
    `iterations`, `current_raw`, `parse_failures`.
    """
    ctx = runtime.context
    llm = await keywords_llm(ctx, deps)
    i = state.iterations + 1
    previous = json.dumps(state.keywords, ensure_ascii=False)
    if ctx.regeneration_mode == "doc_by_doc" and state.evidence:
        raws = [
            await llm.agenerate(
                PROMPTS["regenerate_doc"].render(
                    document=nodes.render_passages(
                        [doc], FORMATS["documents"], max_words=ctx.max_passage_words
                    ),
                    question=state.question,
                    keywords=previous,
                ),
                max_tokens=ctx.regenerate_max_tokens,
            )
            for doc in state.evidence
        ]
        keywords = merge_keyword_lists([parse_keywords(r) for r in raws])
        raw = "\n---\n".join(raws)
    elif ctx.cot:
        raw = await llm.agenerate(
            PROMPTS["regenerate_cot"].render(question=state.question, keywords=previous),
            max_tokens=ctx.cot_max_tokens,
        )
        keywords = parse_keywords(raw, last=True)
    else:
        raw = await llm.agenerate(
            PROMPTS[styled("regenerate", ctx)].render(question=state.question, keywords=previous),
            max_tokens=ctx.regenerate_max_tokens,
        )
        keywords = parse_keywords(raw)
    update: dict[str, Any] = {}
    if not keywords:  # no parsable list: keep the previous keywords
        keywords = list(state.keywords)
        record_decision(call="regenerate_keywords", path="default", fallback="previous_keywords")
        update["parse_failures"] = [
            ParseFailure(
                node="regenerate_keywords",
                iteration=i,
                raw=raw[:300],
                fallback_used="previous_keywords",
            )
        ]
    emit(round=i, keywords=keywords)
    return {
        **update,
        "keywords": keywords,  # K_(i+1) replaces K_i
        "keyword_history": [keywords],
        "iterations": i,
        "current_raw": {"keywords": raw},
    }


def finalize(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """The final answer with its documents, and why the loop ended.

    The answer is the first accepted round's, else the one ``fallback_policy`` picks.

    Reads: `history`, `first_true_iteration`, `stop_validated`; writes: `answer`, `evidence`,
    `stop_reason`, `trace`.
    """
    ctx = runtime.context
    # the answer: the first accepted round's (also when the loop went on past it, in
    # continue_after_true or calibration runs), else the fallback policy's
    validated = state.first_true_iteration is not None
    chosen = final_round(state.history, state.first_true_iteration, ctx.fallback_policy)
    # why the loop ended: an accepted answer stopped it, or it ran max_iterations rounds
    update: dict[str, Any] = {
        "stop_reason": "validated" if state.stop_validated else "max_iterations"
    }
    if chosen is not None:
        update["answer"] = chosen["answer"]
        update["evidence"] = chosen["documents"]
        update["trace"] = [
            {
                "node": "finalize",
                "stop_reason": update["stop_reason"],
                "answer_from_iteration": chosen["iteration"],
                "policy": "first_true" if validated else ctx.fallback_policy,
            }
        ]
    return update


def gathered(state: State) -> nodes.Gathered:
    """For the ranked reader: every round's documents and plain RAG's passages; every round's
    keywords as the method's own text."""
    passages = [d for record in state.history for d in record["documents"]]
    keywords = [" ".join(k) for k in state.keyword_history if k]
    return nodes.Gathered([*passages, *state.evidence, *state.gate_passages], keywords)
