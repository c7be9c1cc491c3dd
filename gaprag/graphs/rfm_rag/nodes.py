"""rfm_rag's nodes, one per graph node, in the order a question runs through them.

Once per question the LLM writes the question's entities and relational triples with
placeholders. Each round retrieves unseen passages, condenses them into fact sentences that
join the evidence pool, and the sufficiency judge (the R-Feedback MLP over entity coverage S_f
and question-pool relevance G_f) decides whether the pool is enough. If not, the next query is
the low-coverage entities plus the entities that fill the triples' placeholders. The answer is
generated once, from the whole pool.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from langgraph.runtime import Runtime

from gaprag import nodes
from gaprag.accounting import record_decision
from gaprag.aio import to_thread
from gaprag.deps import Deps
from gaprag.graphs.rfm_rag.context import Context
from gaprag.graphs.rfm_rag.deps import RfmRagDeps
from gaprag.graphs.rfm_rag.evidence_pool import (
    add_to_pool,
    facts_for_prompt,
    facts_of,
    matching_ids,
    pool_as_evidence,
)
from gaprag.graphs.rfm_rag.feedback_model.features import coverage_map, syntactic_coverage
from gaprag.graphs.rfm_rag.feedback_model.model import SufficiencyJudge, sigmoid
from gaprag.graphs.rfm_rag.judges import choose_judge, decision_path
from gaprag.graphs.rfm_rag.parsing import (
    FillsReply,
    QuestionStructure,
    build_query,
    clean_fills,
    detect_task_type,
    extract_answer,
    finalize_structure,
    parse_evidence,
    parse_fills_text,
    parse_structure_text,
)
from gaprag.graphs.rfm_rag.state import State
from gaprag.nodes.select import answer_call, scored_update
from gaprag.progress import emit
from gaprag.prompts import load_prompts

PROMPTS = load_prompts(__package__)
FORMATS = nodes.load_formats(__package__)
FACT_WORDS = 1_000_000  # pool facts are short sentences, shown whole


async def extract_question_structure(
    state: State, runtime: Runtime[Context], deps: Deps
) -> dict[str, Any]:
    """Prompt 2, once per question: the question's entities and triples.

    Starts the question: the pool is emptied unless ``pool_scope="thread"`` keeps the thread's
    earlier questions' facts.

    Reads: `question`, `evidence_pool`; writes: `entities`, `triples`, `task_type`, `current_query`,
    `evidence_pool`.
    """
    ctx = runtime.context
    llm = await deps.achat(ctx)
    reply = await llm.astructured(
        PROMPTS["structure"].render(question=state.question),
        QuestionStructure,
        default=QuestionStructure(),
        max_tokens=ctx.structure_max_tokens,
        call="structure",
    )
    parsed = parse_structure_text(reply.raw) if reply.path == "default" else reply.value
    entities, triples = finalize_structure(parsed)
    keep = ctx.pool_scope == "thread"
    # a trace record after the structured call's own (the run trace keeps the call order)
    record_decision(
        entities=entities, triples=len(triples), pool_kept=len(state.evidence_pool) if keep else 0
    )
    update: dict[str, Any] = {
        "entities": entities,
        "triples": triples,
        "task_type": detect_task_type(state.question, ctx.task_type),
        "current_query": state.question,
    }
    if not keep:
        update["evidence_pool"] = []
    return update


async def retrieve(state: State, runtime: Runtime[Context], deps: Deps) -> dict[str, Any]:
    """Top-k passages for the current query, skipping those already retrieved this question.

    Reads: `question`, `current_query`, `retrieved_passages`, `iterations`; writes: `retrieved`,
    `retrieved_passages`, `iterations`, `queries`.
    """
    ctx = runtime.context
    round_no = state.iterations + 1
    query = state.current_query or state.question
    hits = await nodes.retrieve(
        await deps.aretriever(ctx),
        [query],
        k=ctx.top_k,
        mode=ctx.retrieval_mode,
        round=round_no,
        exclude=[p["id"] for p in state.retrieved_passages],
    )
    emit(method="rfm_rag", round=round_no, query=query, retrieved=len(hits))
    return {
        "retrieved": hits,
        "retrieved_passages": [*state.retrieved_passages, *hits],
        "iterations": round_no,
        "queries": [query],
    }


async def extract_evidence(state: State, runtime: Runtime[Context], deps: Deps) -> dict[str, Any]:
    """Prompt 1: condense the round's passages into short fact sentences.

    Reads: `question`, `current_query`, `retrieved`; writes: `round_evidence`.
    """
    ctx = runtime.context
    if not state.retrieved:
        return {"round_evidence": []}
    query = state.current_query or state.question
    mode = ctx.prompt1_question_mode
    focus = "" if mode != "both" or query == state.question else f"\nCurrent search focus: {query}"
    messages = PROMPTS["extract"].render(
        question=query if mode == "query" else state.question,
        focus=focus,
        focus_note=" (and the search focus)" if focus else "",
        passages=nodes.render_passages(
            state.retrieved, FORMATS["passages"], max_words=ctx.max_passage_words
        ),
    )
    llm = await deps.achat(ctx)
    raw = await llm.agenerate(messages, max_tokens=ctx.extract_max_tokens)
    return {"round_evidence": parse_evidence(raw)}


def update_evidence_pool(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Add the round's facts to the pool (with provenance), recompute entity coverage.

    Reads: `question`, `evidence_pool`, `round_evidence`, `retrieved`, `current_query`, `entities`,
    `found_fact_ids`, `iterations`; writes: `evidence_pool`, `found_fact_ids`, `evidence`,
    `entity_coverage`, `syntactic_coverage`.
    """
    ctx = runtime.context
    pool, added = add_to_pool(
        state.evidence_pool,
        state.round_evidence,
        round=state.iterations,
        query=state.current_query or state.question,
        question=state.question,
        source_passage_ids=[p["id"] for p in state.retrieved],
        sources=[p["metadata"] for p in state.retrieved if p.get("metadata")],
    )
    coverage = coverage_map(state.entities, [e["text"] for e in pool], ctx.coverage_length_unit)
    s_f = syntactic_coverage(coverage)
    found = [*state.found_fact_ids, *matching_ids(pool, state.round_evidence)]
    emit(
        method="rfm_rag",
        round=state.iterations,
        added=added,
        pool=len(pool),
        coverage=round(s_f, 3),
    )
    return {
        "evidence_pool": pool,
        "found_fact_ids": found,
        "evidence": pool_as_evidence(facts_of(pool, found)),
        "entity_coverage": {k: round(v, 4) for k, v in coverage.items()},
        "syntactic_coverage": round(s_f, 4),
    }


class _Verdict(NamedTuple):
    """A sufficiency decision: stop or not, P(sufficient), how it was reached, its threshold."""

    stop: bool
    p: float | None
    path: str
    threshold: float | None
    g_f: float | None = None


async def _llm_verdict(state: State, ctx: Context, deps: RfmRagDeps) -> _Verdict:
    """The optional LLM judge: a Yes/No choice, P(Yes) from logprobs."""
    llm = await deps.achat(ctx)
    choice = await llm.achoose(
        PROMPTS["judge"].render(
            question=state.question,
            pool=nodes.render_passages(
                facts_for_prompt(state.evidence_pool),
                FORMATS["pool_judge"],
                max_words=FACT_WORDS,
            ),
        ),
        ["Yes", "No"],
        default="No",
        max_tokens=ctx.judge_max_tokens,
        call="judge",
    )
    p, path, says = nodes.read_choice(choice, "Yes")
    threshold = ctx.llm_judge_threshold
    stop = nodes.should_stop(
        p, threshold, calibration=ctx.calibration, says_stop=says, no_logprobs=ctx.no_logprobs
    )
    return _Verdict(stop, p, path, threshold)


async def _judge_verdict(
    judge: SufficiencyJudge, state: State, ctx: Context, sentences: list[str]
) -> _Verdict:
    """The verdict of the R-Feedback model, a rule judge or an injected model."""
    result = await to_thread(
        judge.judge, state.question, list(state.entities), sentences, state.syntactic_coverage
    )
    path, p = decision_path(judge, result)
    threshold: float | None
    if path == "rule":  # a fixed rule decides; it has no probability to put a threshold on
        threshold = getattr(judge, "tau_s", None)
        stop = result.sufficient and not ctx.calibration
    elif path == "relevance":  # G_f >= relevance_threshold, recorded as sigmoids of both
        threshold = round(sigmoid(ctx.relevance_threshold), 6)
        stop = result.sufficient and not ctx.calibration
    else:
        threshold = ctx.rf_threshold
        stop = nodes.should_stop(p, threshold, calibration=ctx.calibration)
    return _Verdict(stop, p, path, threshold, result.g_f)


async def feedback_classifier(
    state: State, runtime: Runtime[Context], deps: RfmRagDeps
) -> dict[str, Any]:
    """Is the pool sufficient? The R-Feedback Model's (or judge's) P(sufficient).

    Stop iff ``nodes.should_stop(p, threshold, calibration=...)``: without a probability the loop
    goes on, and a calibration run never stops here (it records the answer it would have given).

    Reads: `question`, `evidence_pool`, `entities`, `syntactic_coverage`, `iterations`; writes:
    `sufficient`, `feedback_prob`, `trace`, `decisions`.
    """
    ctx = runtime.context
    judge = await to_thread(choose_judge, ctx, deps)  # may load the weights and embedder
    sentences = [e["text"] for e in state.evidence_pool]
    if judge is None:
        verdict = await _llm_verdict(state, ctx, deps)
    else:
        verdict = await _judge_verdict(judge, state, ctx, sentences)
    stop, p = verdict.stop, verdict.p
    answer: str | None = None
    if ctx.calibration:  # what the method would answer had it stopped here (an extra call)
        answer = (await answer_from_pool(state, ctx, deps))[1]
    nodes.log_decision(
        "feedback_classifier",
        state.iterations,
        "stop" if stop else "continue",
        p=p,
        path=verdict.path,
        threshold=verdict.threshold,
        answer=answer,
    )
    emit(method="rfm_rag", round=state.iterations, sufficient=stop, prob=p)
    mode = ctx.feedback_mode if deps.sufficiency_model is None else type(judge).__name__
    return {
        "sufficient": stop,
        "feedback_prob": p,
        "trace": [
            {
                "node": "feedback_classifier",
                "mode": mode,
                "round": state.iterations,
                "s_f": state.syntactic_coverage,
                "g_f": verdict.g_f,
                "prob": p,
                "sufficient": stop,
                # the pool judged, for retraining on graph pools (`python -m lab rfm train
                # --source graph_pools`)
                "pool": sentences,
                "pool_passages": sorted(
                    {i for e in state.evidence_pool for i in e["source_passage_ids"]}
                ),
            }
        ],
    }


def judge_missing(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """G: the question's entities whose pool coverage is below θ (recomputed every round).

    Reads: `entities`, `entity_coverage`; writes: `gap_entities`.
    """
    threshold = runtime.context.coverage_threshold
    return {
        "gap_entities": [e for e in state.entities if state.entity_coverage.get(e, 0.0) < threshold]
    }


async def regenerate_keywords(
    state: State, runtime: Runtime[Context], deps: Deps
) -> dict[str, Any]:
    """Prompt 3: fill the triples' placeholders from the pool (z); the next query is G + z.

    Reads: `question`, `triples`, `gap_entities`, `evidence_pool`, `iterations`; writes:
    `current_query`.
    """
    ctx = runtime.context
    fills: list[str] = []
    if state.triples:
        listing = "\n".join(
            f"{i}. ({t['head']}, {t['relation']}, {t['tail']})"
            for i, t in enumerate(state.triples, 1)
        )
        pool = nodes.render_passages(
            facts_for_prompt(state.evidence_pool), FORMATS["pool"], max_words=FACT_WORDS
        )
        llm = await deps.achat(ctx)
        reply = await llm.astructured(
            PROMPTS["fills"].render(pool=pool, triples=listing),
            FillsReply,
            default=FillsReply(),
            max_tokens=ctx.fills_max_tokens,
            call="fills",
        )
        fills = clean_fills(
            reply.value.fills if reply.path != "default" else parse_fills_text(reply.raw)
        )
    _, query = build_query(state.gap_entities, fills, state.question)
    emit(method="rfm_rag", round=state.iterations + 1, fills=fills, next_query=query)
    return {"current_query": query}


async def answer_from_pool(
    state: State, ctx: Context, deps: Deps
) -> tuple[str, str, dict[str, Any]]:
    """(raw reply, answer span, its ``answer_p`` update) of the QA call over the current pool:
    the final answer, and in calibration runs the answer each decision would have led to."""
    pool = nodes.render_passages(
        facts_for_prompt(state.evidence_pool), FORMATS["pool_answer"], max_words=FACT_WORDS
    )
    messages = PROMPTS["answer"].render(pool=pool, question=state.question)
    llm = await deps.achat(ctx)
    raw, tokens = await answer_call(llm, messages, ctx, max_tokens=ctx.answer_max_tokens)
    answer = extract_answer(raw, state.task_type)
    return raw, answer, scored_update(answer, tokens)


async def generate_answer(state: State, runtime: Runtime[Context], deps: Deps) -> dict[str, Any]:
    """The answer, once, from the pool: a short chain of thought ending in the span.

    No call when the shared reader answers after this step.

    Reads: `question`, `evidence_pool`, `task_type`, `found_fact_ids`, `sufficient`, `iterations`;
    writes: `raw_answer`, `answer`, `stop_reason`, `evidence`, `trace`, `answer_p`.
    """
    raw, answer = "", ""
    scored: dict[str, Any] = {}
    if not nodes.reader_answers(runtime.context):
        raw, answer, scored = await answer_from_pool(state, runtime.context, deps)
    stop = "sufficient" if state.sufficient else "max_iterations"
    return {
        "raw_answer": raw,
        "answer": answer,
        "stop_reason": stop,
        "evidence": pool_as_evidence(facts_of(state.evidence_pool, state.found_fact_ids)),
        "trace": [
            {
                "node": "generate_answer",
                "stop_reason": stop,
                "retrievals": state.iterations,
                "pool": len(state.evidence_pool),
            }
        ],
        **scored,
    }


def gathered(state: State) -> nodes.Gathered:
    """For the ranked reader: every passage retrieved and plain RAG's passages; the pool's
    facts and the queries as the method's own text."""
    facts = [str(item["text"]) for item in state.evidence_pool]
    return nodes.Gathered(
        [*state.retrieved_passages, *state.gate_passages], [*facts, *state.queries]
    )
