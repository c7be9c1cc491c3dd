"""rag_ef: RAG with an expert-feedback store (RAG-EF, train-free enhancement from feedback).

Answering is one pass over a store of (question, answer, chunk) pairs:

    retrieve            rank pairs by Eq. 2, s = sim(q,q_i)^γ · sim(q,c_i)^(1-γ); keep top-K
    rerank_filter       optional score gate τ (not in the paper; runs only if min_pair_score set)
    assemble_evidence   K "Question: … Answer: …" lines + the unique chunks as Context1..N
    generate_answer     one LLM call

then the expert loop of the paper's Fig. 1(b), which is off unless asked for:

    feedback_classifier judge the answer (judge="llm" via llm.choose, or "gold")
    collect_feedback    interrupt(): show question, answer and evidence to an expert; resume
                        with Command(resume={"answer": ..., "chunk": ...})
    update_evidence_pool upsert the expert's triple (source "expert") into the pair store,
                        then re-answer once (bounded by max_feedback_rounds)

The pair store is a :class:`gaprag.stores.pairs.PairStore`: the Context field
``feedback_store`` (a path; default ``GAPRAG_HOME/feedback.sqlite``), or a store object given
to :func:`build_with_store` / ``build_graph("rag_ef", retriever=pair_store)``.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from langgraph.types import interrupt

from gaprag.config import gaprag_home
from gaprag.errors import InputError
from gaprag.graphs.common import BaseContext, Resources, describe, merge_context
from gaprag.llm.accounting import node, record_decision
from gaprag.llm.client import LLM
from gaprag.nodes import clean_answer, truncate_words
from gaprag.progress import emit
from gaprag.prompts import load_prompts
from gaprag.state.base import Evidence
from gaprag.state.rag_ef import (
    ContextItem,
    Feedback,
    QAItem,
    RagEfInput,
    RagEfOutput,
    RagEfState,
)
from gaprag.stores.pairs import PairStore, ScoredPair, chunk_hash, normalize_text
from gaprag.stores.retriever import Retriever

PROMPTS = load_prompts(__package__)

QARender = Literal["qa", "q_only", "wrong_answer", "none"]
Judge = Literal["off", "llm", "gold"]
Similarity = Literal["dense", "bm25"]
Scoring = Literal["geometric", "arithmetic"]
AnswerMode = Literal["rag_ef", "standard"]


@dataclass(kw_only=True)
class Context(BaseContext):
    feedback_store: str = describe(
        "", "Path of the pair store (SQLite); empty uses GAPRAG_HOME/feedback.sqlite."
    )
    top_k: int = describe(5, "K: pairs retrieved by Eq. 2 (paper: 5).")
    gamma: float = describe(
        0.5, "γ in Eq. 2: weight of question similarity (1 = question only, 0 = chunk only)."
    )
    scoring: Scoring = describe(
        "geometric", "geometric = Eq. 2 (paper); arithmetic = γ·sim_q + (1-γ)·sim_c (Table 10)."
    )
    similarity: Similarity = describe(
        "dense", "Similarity behind both factors: dense embeddings or BM25 (paper: bge-m3 dense)."
    )
    retrieval_mode: AnswerMode = describe(
        "rag_ef",
        "rag_ef = rank pairs (Eq. 2); standard = rank the store's chunks (Eq. 1 baseline).",
    )
    qa_render_mode: QARender = describe(
        "qa", "Q&A block: qa (paper), q_only, wrong_answer (Table 9 ablations) or none (Table 3)."
    )
    wrong_answer_seed: int = describe(0, "Seed for the wrong_answer ablation's answer swap.")
    sources: str = describe(
        "", "Comma-separated pair sources to search (e.g. synthetic,expert); empty = all."
    )
    min_pair_score: float | None = describe(
        None, "Optional gate τ: drop pairs scoring below it (not in the paper; off = None)."
    )
    max_contexts: int | None = describe(
        None, "Optional cap on the unique contexts N shown (None = paper behaviour, N ≤ K)."
    )
    empty_store_fallback: bool = describe(
        True, "With no pairs to search, answer from the document retriever's top-K (not in paper)."
    )
    judge: Judge = describe(
        "off",
        "feedback_classifier: off (paper), llm (the model judges its answer), "
        "gold (exact match against the input's gold_answers).",
    )
    review: bool = describe(
        False, "Always pause for expert review after answering (needs a checkpointer)."
    )
    reanswer_after_feedback: bool = describe(
        True, "After inserting expert feedback, answer once more from the updated store."
    )
    max_feedback_rounds: int = describe(1, "Bound on expert feedback rounds per run.")
    answer_max_tokens: int = describe(32, "Output cap for the answer call (short answers).")
    judge_max_tokens: int = describe(8, "Output cap for the judge call.")


# -- the pair store ------------------------------------------------------------------------
_stores: dict[str, PairStore] = {}
_stores_lock = threading.Lock()


def default_store_path() -> Path:
    return gaprag_home() / "feedback.sqlite"


def open_pair_store(path: str | Path | None = None) -> PairStore:
    """The pair store at ``path`` (default ``GAPRAG_HOME/feedback.sqlite``), opened once."""
    resolved = str(Path(path).expanduser().resolve() if path else default_store_path())
    with _stores_lock:
        if resolved not in _stores:
            _stores[resolved] = PairStore.open(resolved)
        return _stores[resolved]


def _sources(ctx: Context) -> set[str] | None:
    names = {s.strip() for s in str(ctx.sources or "").split(",") if s.strip()}
    return names or None


def _opt_float(value: Any) -> float | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InputError(f"min_pair_score={value!r} is not a number", hint="e.g. 0.55") from None


def _opt_int(value: Any) -> int | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InputError(f"max_contexts={value!r} is not an integer", hint="e.g. 3") from None


# -- prompt assembly (pure functions, tested directly) --------------------------------------
def render_qa_lines(items: list[QAItem], mode: QARender) -> str:
    if mode == "none" or not items:
        return ""
    if mode == "q_only":
        lines = [f"Question: {it['question']}" for it in items]
    else:
        lines = [f"Question: {it['question']} Answer: {it['answer']}" for it in items]
    return "\n".join(lines) + "\n\n"


def render_contexts(contexts: list[ContextItem], max_words: int) -> str:
    if not contexts:
        return ""
    lines = [
        f"Context{n}: {truncate_words(normalize_text(c['text']), max_words)}"
        for n, c in enumerate(contexts, 1)
    ]
    return "\n".join(lines) + "\n\n"


def unique_contexts(pairs: list[ScoredPair], cap: int | None = None) -> list[ContextItem]:
    """The pairs' chunks, duplicates (same normalised text) removed, in first-appearance order."""
    seen: set[str] = set()
    out: list[ContextItem] = []
    for p in pairs:
        key = chunk_hash(p["chunk"])
        if key in seen:
            continue
        seen.add(key)
        out.append(ContextItem(chunk_id=p["chunk_id"], text=p["chunk"], score=p["score"]))
    return out if cap is None else out[: max(cap, 0)]


def _norm_answer(text: str) -> str:
    from gaprag.eval.metrics import normalize_answer

    return normalize_answer(text)


def wrong_answers(store: PairStore, pairs: list[ScoredPair], seed: int, question: str) -> list[str]:
    """For each pair, an answer of another stored pair that differs after normalisation."""
    salt = int.from_bytes(hashlib.sha1(question.encode()).digest()[:4], "little")
    pool = store.sample_answers(8 * len(pairs) + 8, seed=seed * 1_000_003 + salt)
    out: list[str] = []
    cursor = 0
    for p in pairs:
        own = _norm_answer(p["answer"])
        pick = ""
        for _ in range(len(pool)):
            cand = pool[cursor % len(pool)] if pool else ""
            cursor += 1
            if cand and _norm_answer(cand) != own:
                pick = cand
                break
        out.append(pick or "unknown")
    return out


def _pair_evidence(pairs: list[ScoredPair], rnd: int) -> list[Evidence]:
    return [
        Evidence(
            id=p["id"],
            title=p["question"],
            text=f"Q: {p['question']}\nA: {p['answer']}",
            source="feedback",
            score=round(p["score"], 6),
            round=rnd,
        )
        for p in pairs
    ]


def _context_evidence(contexts: list[ContextItem], rnd: int, source: str) -> list[Evidence]:
    return [
        Evidence(
            id=c["chunk_id"],
            title="",
            text=c["text"],
            source=source,
            score=round(c["score"], 6),
            round=rnd,
        )
        for c in contexts
    ]


def parse_feedback(value: Any, question: str) -> Feedback | str | None:
    """An expert's resume value -> Feedback, ``None`` (skipped) or an error message."""
    if value is None or value == {} or (isinstance(value, dict) and value.get("skip")):
        return None
    if not isinstance(value, dict):
        return "resume with a dict {'answer': ..., 'chunk': ...}"
    answer = str(value.get("answer") or "").strip()
    chunk = str(value.get("chunk") or "").strip()
    missing = [name for name, v in (("answer", answer), ("chunk", chunk)) if not v]
    if missing:
        return f"feedback is missing {' and '.join(missing)}"
    q = str(value.get("question") or "").strip() or question
    cid = value.get("chunk_id")
    return Feedback(
        question=q,
        answer=answer,
        chunk=chunk,
        chunk_id=str(cid) if cid else None,
        source=str(value.get("source") or "expert"),
    )


# -- the graph -----------------------------------------------------------------------------
def build(
    res: Resources,
    defaults: Context,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    *,
    pair_store: PairStore | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    given = res.given_retriever  # build_graph("rag_ef", retriever=PairStore)
    if pair_store is None and isinstance(given, PairStore):
        pair_store = given
    documents_given = given is not None and not isinstance(given, PairStore)

    def store_for(ctx: Context) -> PairStore:
        if ctx.feedback_store:
            return open_pair_store(ctx.feedback_store)
        return pair_store if pair_store is not None else open_pair_store()

    def documents(ctx: Context) -> Retriever | None:
        if isinstance(given, PairStore):
            return None
        return res.retriever(ctx) if documents_given or ctx.store or given is None else None

    @node("retrieve")
    def retrieve_node(state: RagEfState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        store = store_for(ctx)
        rnd = state.round + 1
        sources = _sources(ctx)
        update: dict[str, Any] = {"round": rnd, "iterations": rnd, "queries": [state.question]}
        pairs: list[ScoredPair] = []
        passages: list[Evidence] = []
        if ctx.retrieval_mode == "standard":
            chunks = store.search_chunks(
                state.question, ctx.top_k, sources=sources, mode=ctx.similarity
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
        else:
            pairs = store.rank(
                state.question,
                ctx.top_k,
                gamma=ctx.gamma,
                sources=sources,
                mode=ctx.similarity,
                scoring=ctx.scoring,
            )
        if not pairs and not passages and ctx.empty_store_fallback:
            docs = documents(ctx)
            if docs is not None:
                passages = [
                    Evidence(**{**h, "round": rnd}) for h in docs.search(state.question, ctx.top_k)
                ]
                update["trace"] = [
                    {"node": "retrieve", "event": "empty_store_fallback", "passages": len(passages)}
                ]
        emit(round=rnd, query=state.question, pairs=len(pairs), passages=len(passages))
        update.update(retrieved_pairs=pairs, passages=passages, gated_out=[])
        return update

    def route_retrieved(
        state: RagEfState, runtime: Runtime[Context]
    ) -> Literal["rerank_filter", "assemble_evidence"]:
        ctx = merge_context(defaults, runtime.context)
        if _opt_float(ctx.min_pair_score) is not None and state.retrieved_pairs:
            return "rerank_filter"
        return "assemble_evidence"

    @node("rerank_filter")
    def gate_node(state: RagEfState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        tau = _opt_float(ctx.min_pair_score)
        assert tau is not None
        kept = [p for p in state.retrieved_pairs if p["score"] >= tau]
        dropped = [p["id"] for p in state.retrieved_pairs if p["score"] < tau]
        kept = [ScoredPair(**{**p, "rank": i}) for i, p in enumerate(kept, 1)]
        return {
            "retrieved_pairs": kept,
            "gated_out": dropped,
            "trace": [{"node": "rerank_filter", "tau": tau, "dropped": len(dropped)}],
        }

    @node("assemble_evidence")
    def assemble_node(state: RagEfState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        pairs = state.retrieved_pairs
        rnd = state.round
        cap = _opt_int(ctx.max_contexts)
        if pairs:
            answers = [p["answer"] for p in pairs]
            if ctx.qa_render_mode == "wrong_answer":
                answers = wrong_answers(
                    store_for(ctx), pairs, ctx.wrong_answer_seed, state.question
                )
            qa_block = [
                QAItem(
                    pair_id=p["id"],
                    question=p["question"],
                    answer="" if ctx.qa_render_mode == "q_only" else a,
                )
                for p, a in zip(pairs, answers, strict=True)
            ]
            contexts = unique_contexts(pairs, cap)
            evidence = _pair_evidence(pairs, rnd) + _context_evidence(contexts, rnd, "feedback")
        else:  # standard mode or the empty-store fallback: passages only
            qa_block = []
            shown = state.passages if cap is None else state.passages[: max(cap, 0)]
            contexts = [
                ContextItem(
                    chunk_id=p["id"],
                    text=f"{p['title']}: {p['text']}" if p["title"] else p["text"],
                    score=p["score"],
                )
                for p in shown
            ]
            evidence = list(shown)
        prompt_name = "answer" if pairs or ctx.retrieval_mode == "rag_ef" else "answer_standard"
        values = {
            "contexts": render_contexts(contexts, ctx.max_passage_words),
            "question": state.question,
        }
        if prompt_name == "answer":
            values["qa_block"] = render_qa_lines(qa_block, ctx.qa_render_mode)
        messages = PROMPTS[prompt_name].render(**values)
        prompt = "\n\n".join(text for _, text in messages)
        return {"qa_block": qa_block, "contexts": contexts, "prompt": prompt, "evidence": evidence}

    @node("generate_answer")
    def answer_node(state: RagEfState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        raw = res.llm(ctx).generate([("user", state.prompt)], max_tokens=ctx.answer_max_tokens)
        answer = clean_answer(raw)
        update: dict[str, Any] = {"answer": answer, "raw_generation": raw}
        if state.feedback_rounds == 0:
            update.update(first_answer=answer, stop_reason="answered")
        else:
            update["stop_reason"] = "reanswered"
        return update

    def route_answered(
        state: RagEfState, runtime: Runtime[Context]
    ) -> Literal["feedback_classifier", "__end__"]:
        ctx = merge_context(defaults, runtime.context)
        if state.feedback_rounds >= ctx.max_feedback_rounds:
            return "__end__"
        if ctx.judge == "off" and not ctx.review:
            return "__end__"
        return "feedback_classifier"

    def _judge(llm: LLM, state: RagEfState, ctx: Context) -> tuple[str, dict[str, Any]]:
        lines = [f"Q: {q['question']} A: {q['answer']}" for q in state.qa_block]
        lines += [truncate_words(c["text"], ctx.max_passage_words) for c in state.contexts]
        messages = PROMPTS["judge"].render(
            evidence="\n".join(lines) or "(none)",
            references="; ".join(state.gold_answers or []) or "(none)",
            question=state.question,
            answer=state.answer or "(no answer)",
        )
        choice = llm.choose(
            messages,
            ["correct", "incorrect"],
            default="correct",
            max_tokens=ctx.judge_max_tokens,
            call="feedback_classifier",
        )
        verdict = "unknown" if choice.path == "default" else choice.value
        return verdict, {"path": choice.path, "probs": choice.probs}

    @node("feedback_classifier")
    def judge_node(state: RagEfState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        info: dict[str, Any] = {}
        if ctx.judge == "gold":
            if state.gold_answers:
                from gaprag.eval.metrics import exact_match

                ok = exact_match(state.answer, state.gold_answers) > 0
                verdict = "correct" if ok else "incorrect"
            else:
                verdict = "unknown"
        elif ctx.judge == "llm":
            verdict, info = _judge(res.llm(ctx), state, ctx)
        else:
            verdict = "unknown"
        review = ctx.review or verdict == "incorrect"
        record_decision(
            call="feedback_classifier", judge=ctx.judge, verdict=verdict, review=review, **info
        )
        update: dict[str, Any] = {"verdict": verdict}
        if review:
            update["stop_reason"] = "awaiting_feedback"
        return update

    def route_judged(
        state: RagEfState, runtime: Runtime[Context]
    ) -> Literal["collect_feedback", "__end__"]:
        ctx = merge_context(defaults, runtime.context)
        return "collect_feedback" if ctx.review or state.verdict == "incorrect" else "__end__"

    @node("collect_feedback")
    def collect_node(state: RagEfState, runtime: Runtime[Context]) -> dict[str, Any]:
        request = {
            "question": state.question,
            "answer": state.answer,
            "verdict": state.verdict,
            "qa_pairs": [
                {"question": q["question"], "answer": q["answer"]} for q in state.qa_block
            ],
            "contexts": [c["text"] for c in state.contexts],
            "instructions": "Resume with {'answer': <correct answer>, 'chunk': <passage that "
            "supports it>} (optionally 'question'), or {'skip': True} to leave the store as is.",
        }
        parsed = parse_feedback(interrupt(request), state.question)
        if parsed is None:
            return {"feedback": None, "stop_reason": "feedback_skipped"}
        if isinstance(parsed, str):
            return {
                "feedback": None,
                "stop_reason": "feedback_invalid",
                "trace": [{"node": "collect_feedback", "error": parsed}],
            }
        return {"feedback": parsed}

    def route_feedback(
        state: RagEfState, runtime: Runtime[Context]
    ) -> Literal["update_evidence_pool", "__end__"]:
        return "update_evidence_pool" if state.feedback is not None else "__end__"

    @node("update_evidence_pool")
    def upsert_node(state: RagEfState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        fb = state.feedback
        assert fb is not None
        pid = store_for(ctx).add(
            fb["question"], fb["answer"], fb["chunk"], source=fb["source"], chunk_id=fb["chunk_id"]
        )
        emit(round=state.round, added=1, pair_id=pid)
        return {
            "inserted_pair_id": pid,
            "feedback_rounds": state.feedback_rounds + 1,
            "stop_reason": "feedback_added",
        }

    def route_inserted(
        state: RagEfState, runtime: Runtime[Context]
    ) -> Literal["retrieve", "__end__"]:
        ctx = merge_context(defaults, runtime.context)
        if ctx.reanswer_after_feedback and state.feedback_rounds <= ctx.max_feedback_rounds:
            return "retrieve"
        return "__end__"

    builder = StateGraph(
        RagEfState, context_schema=Context, input_schema=RagEfInput, output_schema=RagEfOutput
    )
    builder.add_node("retrieve", retrieve_node)
    builder.add_node("rerank_filter", gate_node)
    builder.add_node("assemble_evidence", assemble_node)
    builder.add_node("generate_answer", answer_node)
    builder.add_node("feedback_classifier", judge_node)
    builder.add_node("collect_feedback", collect_node)
    builder.add_node("update_evidence_pool", upsert_node)
    builder.add_edge(START, "retrieve")
    builder.add_conditional_edges("retrieve", route_retrieved)
    builder.add_edge("rerank_filter", "assemble_evidence")
    builder.add_edge("assemble_evidence", "generate_answer")
    builder.add_conditional_edges("generate_answer", route_answered)
    builder.add_conditional_edges("feedback_classifier", route_judged)
    builder.add_conditional_edges("collect_feedback", route_feedback)
    builder.add_conditional_edges("update_evidence_pool", route_inserted)
    return builder.compile(checkpointer=checkpointer, name="rag_ef")


def build_with_store(
    store: PairStore,
    *,
    llm: Any = None,
    retriever: Any = None,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    **options: Any,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """``build_graph("rag_ef", ...)`` over a given :class:`PairStore` object.

    ``retriever`` (optional) is the document retriever used only by the empty-store fallback.
    """
    from gaprag.graphs.common import make_context

    return build(
        Resources(llm=llm, retriever=retriever),
        make_context(Context, options),
        checkpointer,
        pair_store=store,
    )
