"""rag_ef's nodes: rank (question, answer, chunk) pairs, answer from them in one call, and the
optional expert loop (judge, pause for the expert's triple, insert it, answer once more).

``retrieve`` starts every question (the shared wiring resets the per-question state there);
the re-answer after expert feedback enters through ``retrieve_again``, which runs the same
retrieval over the updated store without starting a new question.
"""

from __future__ import annotations

from typing import Any

from langgraph.config import get_config
from langgraph.runtime import Runtime
from langgraph.types import interrupt

from gaprag import nodes
from gaprag.accounting import record_decision, record_retrieval
from gaprag.aio import to_thread
from gaprag.deps import Deps
from gaprag.graphs.rag_ef import blocks
from gaprag.graphs.rag_ef.context import Context
from gaprag.graphs.rag_ef.feedback import (
    documents,
    pair_store,
    parse_feedback,
    require_checkpointer,
    review_request,
)
from gaprag.graphs.rag_ef.state import State
from gaprag.operator import policy_of
from gaprag.progress import emit
from gaprag.prompts import load_prompts
from gaprag.state.base import Evidence
from gaprag.stores.pairs import ScoredPair

PROMPTS = load_prompts(__package__)
FORMATS = nodes.load_formats(__package__)


def _configurable() -> dict[str, Any] | None:
    try:
        return dict(get_config().get("configurable") or {})
    except RuntimeError:  # called outside a graph run (a node tested on its own)
        return None


async def _retrieval_pass(
    question: str, rnd: int, ctx: Context, deps: Deps, node: str
) -> dict[str, Any]:
    """Rank pairs by Eq. 2 (or the store's chunks in standard mode); with nothing to rank,
    fall back to the document retriever when allowed."""
    store = await to_thread(pair_store, ctx, deps)
    sources = ctx.source_filter()
    update: dict[str, Any] = {"iterations": rnd, "queries": [question]}
    pairs: list[ScoredPair] = []
    passages: list[Evidence] = []
    if ctx.retrieval_mode == "standard":
        chunks = await to_thread(
            store.search_chunks, question, ctx.top_k, sources=sources, mode=ctx.similarity
        )
        passages = [
            Evidence(
                id=c["chunk_id"],
                title="",
                text=c["text"],
                source="feedback",
                score=round(c["score"], 6),
                round=rnd,
            )
            for c in chunks
        ]
        record_retrieval(question, [p["id"] for p in passages], mode=ctx.similarity)
    else:
        pairs = await to_thread(
            store.rank,
            question,
            ctx.top_k,
            gamma=ctx.gamma,
            sources=sources,
            mode=ctx.similarity,
            scoring=ctx.scoring,
        )
        ids = [*(p["id"] for p in pairs), *(p["chunk_id"] for p in pairs)]
        record_retrieval(question, ids, mode=ctx.similarity)
    if not pairs and not passages and ctx.empty_store_fallback:
        docs = await documents(ctx, deps)
        if docs is not None:
            passages = await nodes.retrieve(docs, [question], k=ctx.top_k, round=rnd)
            update["trace"] = [
                {"node": node, "event": "empty_store_fallback", "passages": len(passages)}
            ]
    emit(round=rnd, query=question, pairs=len(pairs), passages=len(passages))
    update.update(retrieved_pairs=pairs, passages=passages, gated_out=[])
    return update


async def retrieve(state: State, runtime: Runtime[Context], deps: Deps) -> dict[str, Any]:
    """Start a question: check a pause could be resumed, then rank the pairs.

    Pairs by Eq. 2 (the store's chunks in standard mode); with nothing to rank, the document
    retriever's passages when ``empty_store_fallback`` allows.

    Reads: `question`; writes: `retrieved_pairs`, `passages`, `gated_out`, `queries`, `iterations`,
    `trace`.
    """
    ctx = runtime.context
    require_checkpointer(ctx, _configurable())
    # a question's first pass is round 1, whatever an earlier question left on the thread
    return await _retrieval_pass(state.question, 1, ctx, deps, "retrieve")


async def retrieve_again(state: State, runtime: Runtime[Context], deps: Deps) -> dict[str, Any]:
    """After the expert's triple was inserted: rank the pairs again, from the updated store.

    Reads: `question`, `iterations`; writes: `retrieved_pairs`, `passages`, `gated_out`, `queries`,
    `iterations`, `trace`.
    """
    rnd = state.iterations + 1
    return await _retrieval_pass(state.question, rnd, runtime.context, deps, "retrieve_again")


def rerank_filter(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """The optional score gate τ (not in the paper): drop pairs scoring below it.

    Reads: `retrieved_pairs`; writes: `retrieved_pairs`, `gated_out`, `trace`.
    """
    tau = runtime.context.min_pair_score
    assert tau is not None
    kept = [p for p in state.retrieved_pairs if p["score"] >= tau]
    dropped = [p["id"] for p in state.retrieved_pairs if p["score"] < tau]
    kept = [ScoredPair(**{**p, "rank": i}) for i, p in enumerate(kept, 1)]
    return {
        "retrieved_pairs": kept,
        "gated_out": dropped,
        "trace": [{"node": "rerank_filter", "tau": tau, "dropped": len(dropped)}],
    }


async def assemble_evidence(state: State, runtime: Runtime[Context], deps: Deps) -> dict[str, Any]:
    """The K Q&A lines and the unique chunks the answer call shows.

    The answers are swapped in the wrong_answer ablation; standard mode (or the empty-store
    fallback) shows passages only.

    Reads: `question`, `retrieved_pairs`, `passages`, `iterations`; writes: `qa_block`, `contexts`,
    `evidence`.
    """
    ctx = runtime.context
    pairs = state.retrieved_pairs
    if pairs:
        answers = [p["answer"] for p in pairs]
        if ctx.qa_render_mode == "wrong_answer":
            store = await to_thread(pair_store, ctx, deps)
            answers = await to_thread(
                blocks.wrong_answers, store, pairs, ctx.wrong_answer_seed, state.question
            )
        qa_block = blocks.qa_items(pairs, answers, ctx.qa_render_mode)
        contexts = blocks.unique_contexts(pairs, ctx.max_contexts)
        evidence = blocks.pair_evidence(pairs, state.iterations) + blocks.context_evidence(
            contexts, state.iterations
        )
    else:  # standard mode or the empty-store fallback: passages only
        qa_block = []
        contexts = blocks.passage_contexts(state.passages, ctx.max_contexts)
        cap = ctx.max_contexts
        evidence = list(state.passages if cap is None else state.passages[: max(cap, 0)])
    return {"qa_block": qa_block, "contexts": contexts, "evidence": evidence}


async def generate_answer(state: State, runtime: Runtime[Context], deps: Deps) -> dict[str, Any]:
    """One call: the Q&A block, the contexts, the instruction and the question.

    The paper's layout, one user message; the standard-mode baseline shows the contexts only.

    Reads: `question`, `qa_block`, `contexts`, `retrieved_pairs`, `feedback_rounds`; writes:
    `answer`, `first_answer`, `stop_reason`.
    """
    ctx = runtime.context
    contexts = blocks.render_contexts(state.contexts, FORMATS, ctx.max_passage_words)
    if state.retrieved_pairs or ctx.retrieval_mode == "rag_ef":
        qa_block = blocks.render_qa_block(state.qa_block, ctx.qa_render_mode, FORMATS)
        messages = PROMPTS["answer"].render(
            qa_block=qa_block, contexts=contexts, question=state.question
        )
    else:
        messages = PROMPTS["answer_standard"].render(contexts=contexts, question=state.question)
    llm = await deps.achat(ctx)
    raw = await llm.agenerate(messages, max_tokens=ctx.answer_max_tokens)
    answer = nodes.clean_answer(raw)
    if state.feedback_rounds == 0:
        return {"answer": answer, "first_answer": answer, "stop_reason": "answered"}
    return {"answer": answer, "stop_reason": "reanswered"}


async def feedback_classifier(
    state: State, runtime: Runtime[Context], deps: Deps
) -> dict[str, Any]:
    """Judge the answer, then decide whether to ask the expert.

    ``judge="llm"``: the model; ``"gold"``: exact match. The expert is asked always with
    ``review=True``, else when the answer was judged incorrect.

    Reads: `question`, `answer`, `gold_answers`, `qa_block`, `contexts`, `iterations`; writes:
    `verdict`, `stop_reason` (when it asks), `decisions`.
    """
    ctx = runtime.context
    p: float | None = None
    path = "rule"
    info: dict[str, Any] = {}
    if ctx.judge == "gold":
        verdict = "unknown"
        if state.gold_answers:
            from gaprag.metrics import exact_match

            ok = exact_match(state.answer, state.gold_answers) > 0
            verdict = "correct" if ok else "incorrect"
    elif ctx.judge == "llm":
        messages = PROMPTS["judge"].render(
            evidence=blocks.render_judge_evidence(
                state.qa_block, state.contexts, FORMATS, ctx.max_passage_words
            ),
            references="; ".join(state.gold_answers or []) or "(none)",
            question=state.question,
            answer=state.answer or "(no answer)",
        )
        llm = await deps.achat(ctx)
        choice = await llm.achoose(
            messages,
            ["correct", "incorrect"],
            default="correct",
            max_tokens=ctx.judge_max_tokens,
            call="feedback_classifier",
        )
        verdict = "unknown" if choice.path == "default" else choice.value
        info = {"path": choice.path, "probs": choice.probs}
        p, path, _ = nodes.read_choice(choice, choice.value)  # the verdict decides
    else:
        verdict = "unknown"
    review = ctx.review or verdict == "incorrect"
    record_decision(
        call="feedback_classifier", judge=ctx.judge, verdict=verdict, review=review, **info
    )
    if ctx.review:  # review=True asks the expert whatever the verdict
        p, path = None, "rule"
    nodes.log_decision(
        "feedback_classifier", state.iterations, "continue" if review else "stop", p=p, path=path
    )
    update: dict[str, Any] = {"verdict": verdict}
    if review:
        update["stop_reason"] = "awaiting_feedback"
    return update


def collect_feedback(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Pause for the expert: resume with {'answer', 'chunk'} (or {'skip': True}).

    Reads: `question`, `answer`, `verdict`, `qa_block`, `contexts`; writes: `feedback`,
    `stop_reason`, `trace`.
    """
    parsed = parse_feedback(interrupt(review_request(state)), state.question)
    if parsed is None:
        return {"feedback": None, "stop_reason": "feedback_skipped"}
    if isinstance(parsed, str):
        return {
            "feedback": None,
            "stop_reason": "feedback_invalid",
            "trace": [{"node": "collect_feedback", "error": parsed}],
        }
    return {"feedback": parsed}


async def update_evidence_pool(
    state: State, runtime: Runtime[Context], deps: Deps
) -> dict[str, Any]:
    """Upsert the expert's triple (source "expert") into the pair store.

    Only when the operator allows feedback writes, and only a triple that passes the resume
    value's checks (whatever put it in the state).

    Reads: `feedback`, `question`, `feedback_rounds`, `iterations`; writes: `inserted_pair_id`,
    `feedback`, `feedback_rounds`, `stop_reason`, `trace`.
    """
    fb = parse_feedback(state.feedback, state.question)
    if not policy_of(type(runtime.context)).feedback_writes:
        why = "the operator has not enabled feedback writes (GAPRAG_FEEDBACK_WRITES=1)"
        return {
            "feedback": None,
            "stop_reason": "feedback_not_stored",
            "trace": [{"node": "update_evidence_pool", "error": why}],
        }
    if not isinstance(fb, dict):
        return {
            "feedback": None,
            "stop_reason": "feedback_invalid",
            "trace": [{"node": "update_evidence_pool", "error": fb or "no feedback"}],
        }
    store = await to_thread(pair_store, runtime.context, deps)
    pid = await to_thread(
        store.add,
        fb["question"],
        fb["answer"],
        fb["chunk"],
        source=fb["source"],
        chunk_id=fb["chunk_id"],
    )
    emit(round=state.iterations, added=1, pair_id=pid)
    return {
        "inserted_pair_id": pid,
        "feedback_rounds": state.feedback_rounds + 1,
        "stop_reason": "feedback_added",
    }
