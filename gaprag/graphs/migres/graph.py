"""migres: missing-information guided retrieve - extract - solve (Wang et al., MIGRES).

Each round: BM25 retrieves candidates for the pending queries; a knowledge filter keeps the
passages (and, inside them, the sentences) that clear a relevance threshold; the leaf module
extracts standalone facts citing the passages they come from; each fact is verified against a
cited passage; new facts join the pool of known information. The main module sees only that
pool and either answers or says what is missing, and the query generator turns the missing
information into at most three new single-hop queries for the next round. When nothing clears
the filter, the LLM writes background from its own knowledge instead. After T judge rounds
a final call forces an answer. See docs/methods/migres.md.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
from dataclasses import dataclass
from typing import Any, Literal

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from gaprag.graphs.common import BaseContext, Resources, describe, merge_context
from gaprag.graphs.migres.filter import (
    DEFAULT_EMBEDDING_DELTA,
    CrossEncoderScorer,
    EmbeddingScorer,
    Scorer,
    cross_encoder,
    knowledge_filter,
)
from gaprag.graphs.migres.parsing import (
    AnswerField,
    FinalReply,
    LeafReply,
    MainReply,
    clean_answer_text,
    clean_queries,
    judgement,
    norm_fact,
    salvage_leaf,
    salvage_main,
    usable_knowledge,
    valid_facts,
)
from gaprag.graphs.migres.verify import LLMVerifier, Verifier
from gaprag.llm.accounting import node
from gaprag.nodes import truncate_words
from gaprag.progress import emit
from gaprag.prompts import load_prompts
from gaprag.state.base import Evidence, InputState
from gaprag.state.migres import InfoItem, MigresOutput, MigresState, Snippet
from gaprag.stores.embeddings import default_embedder
from gaprag.stores.retriever import Retriever
from gaprag.stores.store import RetrievalMode, Store

PROMPTS = load_prompts(__package__)

TaskType = Literal["multihop", "odqa", "strategyqa"]
# Paper, Table 11: T (most judge rounds) and delta (bge-reranker-base logits) per task type.
TASK_T: dict[str, int] = {"multihop": 5, "odqa": 3, "strategyqa": 5}
TASK_DELTA_LOGITS: dict[str, float] = {"multihop": 3.0, "odqa": 5.0, "strategyqa": 0.0}
RETRY_PREFIX = "Find information about "
SEED_FACTS: dict[str, str] = {  # the released code's 2Wiki "inference" helpers (seed_facts)
    "maternal grandmother": "The maternal grandmother of a person is the mother of that person's mother.",
    "maternal grandfather": "The maternal grandfather of a person is the father of that person's mother.",
    "paternal grandmother": "The paternal grandmother of a person is the mother of that person's father.",
    "paternal grandfather": "The paternal grandfather of a person is the father of that person's father.",
}
_HTML = re.compile(r"</?b>|<br\s*/?>", re.I)


@dataclass(kw_only=True)
class Context(BaseContext):
    task_type: str = describe(
        "multihop",
        "multihop, odqa or strategyqa: picks the paper's T and cross-encoder delta for the task "
        "(Table 11), and yes/no prompts for strategyqa.",
    )
    max_iterations: int = describe(
        0,
        "T, the most judge rounds (skipped ones count); at most T+1 retrieval rounds. "
        "0 = the task's paper value: multihop 5, odqa 3, strategyqa 5.",
    )
    delta: float | str = describe(
        "auto",
        "Relevance threshold delta of the knowledge filter (passages and sentences scoring at "
        "least delta are kept). 'auto' = per scorer: the calibrated cosine threshold for the "
        f"default embedding scorer ({DEFAULT_EMBEDDING_DELTA}), or the paper's "
        "bge-reranker-base logits with a cross-encoder (multihop 3.0, odqa 5.0, strategyqa 0.0).",
    )
    reranker: str = describe(
        "",
        "Path of a local sentence-transformers CrossEncoder for the knowledge filter (the paper "
        "uses BAAI/bge-reranker-base). Empty = cosine similarity with the store's embedder "
        "(the packaged MiniLM).",
    )
    top_k: int = describe(5, "k: most snippets shown to the leaf (extraction) call per round.")
    n_retrieve: int = describe(50, "BM25 candidates per query before filtering.")
    max_queries: int = describe(3, "Most new queries kept per query-generation call.")
    retrieval_mode: RetrievalMode = describe(
        "bm25", "bm25 (the paper), dense or hybrid retrieval of candidates."
    )
    retry_prefix: bool = describe(
        True, "Retry a query prefixed 'Find information about ' when it returns fewer hits."
    )
    sentence_filter: bool = describe(
        True, "Filter inside kept passages at sentence level (MIGRES's default)."
    )
    llm_knowledge: bool = describe(
        True, "When no passage clears delta, ask the LLM for background from its own knowledge."
    )
    verifier: str = describe(
        "llm",
        "Check each extracted fact against a cited passage: 'llm' (a yes/no entailment call, "
        "standing in for the paper's T5-XXL NLI model) or 'off' (accept every cited fact).",
    )
    skip_judge_if_no_new_info: bool = describe(
        True, "Skip the judge call (and reuse the missing information) when a round adds no fact."
    )
    seed_facts: bool = describe(
        False, "Seed the definitions of maternal/paternal grandparents (2Wiki preset)."
    )
    max_shown: int = describe(
        2, "A passage is shown at most this many times (a passage that supported a fact: once)."
    )
    min_snippet_tokens: int = describe(5, "Snippets with fewer words are never shown.")
    leaf_max_tokens: int = describe(400, "Output cap for the extraction call.")
    judge_max_tokens: int = describe(200, "Output cap for the judge and final-answer calls.")
    query_max_tokens: int = describe(96, "Output cap for the query-generation call.")
    knowledge_max_tokens: int = describe(160, "Output cap for the LLM-knowledge call.")


# -- settings --------------------------------------------------------------------------------
def task_of(ctx: Context) -> str:
    return ctx.task_type if ctx.task_type in TASK_T else "multihop"


def budget(ctx: Context) -> int:
    """T: the most judge rounds."""
    return ctx.max_iterations if ctx.max_iterations > 0 else TASK_T[task_of(ctx)]


def threshold(ctx: Context, scorer: Scorer) -> float:
    """delta: an explicit value, or the scorer's default for the task."""
    if not (isinstance(ctx.delta, str) and ctx.delta.strip().lower() in ("", "auto")):
        return float(ctx.delta)
    if isinstance(scorer, CrossEncoderScorer):
        return TASK_DELTA_LOGITS[task_of(ctx)]
    default = getattr(scorer, "default_delta", None)
    return float(default) if default is not None else DEFAULT_EMBEDDING_DELTA


def render_known(known: list[str]) -> str:
    return "; ".join(known) if known else "None"


def _tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4))


# -- the graph -------------------------------------------------------------------------------
def build(
    res: Resources,
    defaults: Context,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    *,
    scorer: Scorer | None = None,
    verifier: Verifier | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Compile the MIGRES graph. ``scorer`` replaces the knowledge filter's scorer and
    ``verifier`` the fact verifier (e.g. a DeBERTa-MNLI cross-encoder), for every run."""
    scorers: dict[int, Scorer] = {}
    lock = threading.Lock()

    def scorer_for(ctx: Context) -> Scorer:
        if scorer is not None:
            return scorer
        if ctx.reranker:
            return cross_encoder(ctx.reranker)
        retriever = res.retriever(ctx)
        with lock:
            key = id(retriever)
            if key not in scorers:
                if isinstance(retriever, Store):
                    scorers[key] = EmbeddingScorer(retriever.embedder, store=retriever)
                else:
                    scorers[key] = EmbeddingScorer(default_embedder())
            return scorers[key]

    def verifier_for(ctx: Context) -> Verifier | None:
        if verifier is not None:
            return verifier
        return LLMVerifier(res.llm(ctx)) if ctx.verifier == "llm" else None

    @node("init")
    def init_node(state: MigresState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        q0 = state.question.strip()
        seeds = (
            [fact for phrase, fact in SEED_FACTS.items() if phrase in q0.lower()]
            if ctx.seed_facts
            else []
        )
        return {
            "pending_queries": [q0], "query_history": [q0], "known_info": seeds,
            "seen_counts": {}, "judge_rounds": 0, "missing_info": "", "status": "running",
            "iterations": 0, "evidence": [], "answer": "", "stop_reason": "",
            "last_judgement": None, "confidence": 0, "explanation": "",
        }  # fmt: skip

    @node("retrieve")
    def retrieve_node(state: MigresState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        retriever: Retriever = res.retriever(ctx)
        queries = [q for q in state.pending_queries if q.strip()] or [state.question]
        total = len(retriever) if isinstance(retriever, Store) else None
        seen: set[str] = set()
        candidates: list[Evidence] = []
        round_ = state.iterations + 1
        for query in queries:
            hits = retriever.search(query, ctx.n_retrieve, mode=ctx.retrieval_mode)
            if (
                ctx.retry_prefix
                and len(hits) < ctx.n_retrieve
                and (total is None or total > len(hits))
            ):
                hits = hits + retriever.search(
                    RETRY_PREFIX + query, ctx.n_retrieve, mode=ctx.retrieval_mode
                )
            for hit in hits:
                if hit["text"] in seen:
                    continue
                seen.add(hit["text"])
                candidates.append(Evidence(**{**hit, "round": round_}))
        emit(round=round_, queries=queries, candidates=len(candidates))
        return {
            "raw_candidates": candidates, "iterations": round_, "queries": queries,
            "known_info_len_at_round_start": len(state.known_info),
            "filtered_snippets": [], "llm_knowledge_used": False, "leaf_passages": [],
            "leaf_question": "", "extracted_info": [], "verified_info": [],
        }  # fmt: skip

    @node("rerank_filter")
    def rerank_node(state: MigresState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        sc = scorer_for(ctx)
        delta = threshold(ctx, sc)
        candidates = [
            Evidence(**{**c, "text": _HTML.sub(" ", c["text"]).strip()})
            for c in state.raw_candidates
        ]
        snippets, log = knowledge_filter(
            candidates, state.pending_queries or [state.question], sc, delta=delta,
            seen_counts=state.seen_counts, sentence_filter=ctx.sentence_filter,
            max_shown=ctx.max_shown,
        )  # fmt: skip
        emit(round=state.iterations, kept=len(snippets))
        return {"filtered_snippets": snippets, "trace": [{"node": "rerank_filter", **log}]}

    def after_filter(
        state: MigresState, runtime: Runtime[Context]
    ) -> Literal["extract", "llm_knowledge", "update_evidence_pool"]:
        ctx = merge_context(defaults, runtime.context)
        if state.filtered_snippets:
            return "extract"
        return "llm_knowledge" if ctx.llm_knowledge else "update_evidence_pool"

    @node("llm_knowledge")
    def knowledge_node(state: MigresState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        query = (state.pending_queries or [state.question])[0]
        text = res.llm(ctx).generate(
            PROMPTS["knowledge"].render(question=query), max_tokens=ctx.knowledge_max_tokens
        )
        snippets: list[Snippet] = []
        if usable_knowledge(text):
            digest = hashlib.sha1(text.encode()).hexdigest()[:16]
            snippets.append(
                Snippet(
                    id=f"llm:{digest}", title="LLM knowledge", text=text, origin_text=text,
                    score=None, query=query, source="llm",
                )
            )  # fmt: skip
        return {
            "filtered_snippets": snippets,
            "llm_knowledge_used": True,
            "llm_calls_by_kind": {"knowledge": 1},
            "trace": [{"node": "llm_knowledge", "query": query, "usable": bool(snippets)}],
        }

    @node("extract")
    def extract_node(state: MigresState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        seen = dict(state.seen_counts)
        shown: list[Snippet] = []
        for sn in state.filtered_snippets:
            if len(shown) >= ctx.top_k:
                break
            key = sn["origin_text"]
            if seen.get(key, 0) >= ctx.max_shown:
                continue
            seen[key] = seen.get(key, 0) + 1
            if len(sn["text"].split()) < ctx.min_snippet_tokens:
                continue
            shown.append(sn)
        if state.llm_knowledge_used:
            question = (state.pending_queries or [state.question])[0]
        else:  # round 1: the question itself; later: the queries that found these snippets
            question = " ".join(dict.fromkeys(sn["query"] for sn in shown)) or state.question
        update: dict[str, Any] = {
            "leaf_passages": shown, "leaf_question": question, "seen_counts": seen,
            "extracted_info": [],
        }  # fmt: skip
        if not shown:
            return update
        texts = [truncate_words(sn["text"], ctx.max_passage_words) for sn in shown]
        passages = "\n".join(
            f"Passage {i}: (Title: {sn['title']}) {text}"
            for i, (sn, text) in enumerate(zip(shown, texts, strict=True))
        )
        reply = res.llm(ctx).structured(
            PROMPTS["leaf"].render(passages=passages, question=question), LeafReply,
            default=LeafReply(), max_tokens=ctx.leaf_max_tokens, call="leaf",
        )  # fmt: skip
        facts = reply.value.useful_information if reply.path != "default" else None
        items = valid_facts(facts if facts is not None else salvage_leaf(reply.raw), len(shown))
        update.update(
            extracted_info=items,
            knowledge_tokens=sum(_tokens(t) for t in texts),
            llm_calls_by_kind={"leaf": 1},
        )
        return update

    @node("verify_nli")
    def verify_node(state: MigresState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        check = verifier_for(ctx)
        known = {norm_fact(k) for k in state.known_info}
        accepted: list[InfoItem] = []
        rejected: list[str] = []
        checks = 0
        for item in state.extracted_info:
            key = norm_fact(item["info"])
            if key in known:  # already known: it would not be added, so do not pay to check it
                continue
            ok = check is None
            for idx in [] if ok else item["support_passages"]:
                sn = state.leaf_passages[idx]
                premise = (
                    sn["text"] if sn["source"] == "llm" else f"(Title: {sn['title']}) {sn['text']}"
                )
                checks += 1
                assert check is not None
                if check.entails(premise, item["info"]):
                    ok = True
                    break
            if ok:
                accepted.append(item)
                known.add(key)
            else:
                rejected.append(item["info"])
        update: dict[str, Any] = {"verified_info": accepted}
        if rejected:
            update["trace"] = [{"node": "verify_nli", "rejected": rejected}]
        if checks and isinstance(check, LLMVerifier):
            update["llm_calls_by_kind"] = {"verify": checks}
        return update

    @node("update_evidence_pool")
    def update_node(state: MigresState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        known = list(state.known_info)
        keys = {norm_fact(k) for k in known}
        cited: set[int] = set()
        for item in state.verified_info:
            key = norm_fact(item["info"])
            if key in keys:
                continue
            known.append(item["info"])
            keys.add(key)
            cited.update(item["support_passages"])
        seen = dict(state.seen_counts)
        evidence = list(state.evidence)
        have = {(e["id"], e["text"]) for e in evidence}
        for idx in sorted(cited):
            sn = state.leaf_passages[idx]
            seen[sn["origin_text"]] = seen.get(sn["origin_text"], 0) + 1
            if (sn["id"], sn["text"]) not in have:
                have.add((sn["id"], sn["text"]))
                evidence.append(
                    Evidence(
                        id=sn["id"], title=sn["title"], text=sn["text"],
                        source="llm" if sn["source"] == "llm" else ctx.retrieval_mode,
                        score=float(sn["score"] or 0.0), round=state.iterations,
                    )
                )  # fmt: skip
        added = len(known) - state.known_info_len_at_round_start
        emit(round=state.iterations, added=added, known=len(known))
        return {
            "known_info": known, "seen_counts": seen, "evidence": evidence,
            "new_info_this_round": added, "passages_per_round": [len(state.leaf_passages)],
        }  # fmt: skip

    def after_update(
        state: MigresState, runtime: Runtime[Context]
    ) -> Literal["judge_missing", "generate_answer"]:
        ctx = merge_context(defaults, runtime.context)
        return "generate_answer" if state.judge_rounds >= budget(ctx) else "judge_missing"

    @node("judge_missing")
    def judge_node(state: MigresState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        rounds = state.judge_rounds + 1
        if ctx.skip_judge_if_no_new_info and rounds > 1 and state.new_info_this_round == 0:
            return {
                "judge_rounds": rounds,
                "trace": [{"node": "judge_missing", "event": "skipped", "reason": "no new facts"}],
            }
        prompt = PROMPTS["main_yesno" if task_of(ctx) == "strategyqa" else "main"]
        reply = res.llm(ctx).structured(
            prompt.render(known_info=render_known(state.known_info), question=state.question),
            MainReply, default=MainReply(answer=AnswerField(text="unanswerable")),
            max_tokens=ctx.judge_max_tokens, call="main",
        )  # fmt: skip
        if reply.path != "default":
            verdict = judgement(reply.value)
        else:
            salvaged = salvage_main(reply.raw)
            verdict = judgement(salvaged or reply.value, parsed_ok=salvaged is not None)
        update: dict[str, Any] = {
            "judge_rounds": rounds, "last_judgement": verdict,
            "llm_calls_by_kind": {"main": 1},
        }  # fmt: skip
        if verdict["answered"]:
            update.update(
                answer=verdict["answer_text"], confidence=verdict["confidence"],
                explanation=verdict["explanation"], status="answered", stop_reason="answered",
            )  # fmt: skip
        else:
            missing = verdict["missing_information"]
            if missing.strip().lower() in ("", "none"):
                missing = state.missing_info or state.question
            update["missing_info"] = missing
        emit(
            round=state.iterations, answered=verdict["answered"], missing=update.get("missing_info")
        )
        return update

    def after_judge(state: MigresState) -> Literal["finalize", "regenerate_keywords"]:
        return "finalize" if state.status == "answered" else "regenerate_keywords"

    @node("regenerate_keywords")
    def query_node(state: MigresState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        history = state.query_history or [state.question]
        text = res.llm(ctx).generate(
            PROMPTS["query"].render(
                question=state.question, history=" ".join(history),
                known_info=render_known(state.known_info),
                missing_info=state.missing_info or state.question,
            ),
            max_tokens=ctx.query_max_tokens,
        )  # fmt: skip
        queries = clean_queries(text, history=history, max_queries=ctx.max_queries)
        if not queries:  # an empty reply: search the missing information; all repeats: q0
            missing = state.missing_info.strip()
            queries = [missing] if not text.strip() and len(missing) > 10 else [state.question]
        new_history = list(history)
        for q in queries:
            if q.lower() not in {h.lower() for h in new_history}:
                new_history.append(q)
        emit(round=state.iterations, new_queries=queries)
        return {
            "pending_queries": queries, "query_history": new_history,
            "llm_calls_by_kind": {"query": 1},
        }  # fmt: skip

    @node("generate_answer")
    def answer_node(state: MigresState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        prompt = PROMPTS["final_yesno" if task_of(ctx) == "strategyqa" else "final"]
        reply = res.llm(ctx).structured(
            prompt.render(known_info=render_known(state.known_info), question=state.question),
            FinalReply, default=FinalReply(), max_tokens=ctx.judge_max_tokens, call="final",
        )  # fmt: skip
        value: FinalReply | MainReply | None = reply.value
        if reply.path == "default":
            value = salvage_main(reply.raw)
        text = clean_answer_text(value.answer.text) if value is not None else ""
        failed = not text
        return {
            "answer": "unanswerable" if failed else text,
            "confidence": value.answer.confidence if value is not None else -1,
            "explanation": value.explanation if value is not None else "",
            "status": "failed" if failed else "forced",
            "stop_reason": "max_iterations",
            "llm_calls_by_kind": {"final": 1},
        }

    @node("finalize")
    def finalize_node(state: MigresState) -> dict[str, Any]:
        emit(done=True, stop_reason=state.stop_reason, iterations=state.iterations)
        return {
            "trace": [
                {
                    "node": "finalize", "stop_reason": state.stop_reason, "status": state.status,
                    "judge_rounds": state.judge_rounds, "retrieval_rounds": state.iterations,
                    "known_info": len(state.known_info),
                }
            ]
        }  # fmt: skip

    builder = StateGraph(
        MigresState, context_schema=Context, input_schema=InputState, output_schema=MigresOutput
    )
    builder.add_node("init", init_node)
    builder.add_node("retrieve", retrieve_node)
    builder.add_node("rerank_filter", rerank_node)
    builder.add_node("llm_knowledge", knowledge_node)
    builder.add_node("extract", extract_node)
    builder.add_node("verify_nli", verify_node)
    builder.add_node("update_evidence_pool", update_node)
    builder.add_node("judge_missing", judge_node)
    builder.add_node("regenerate_keywords", query_node)
    builder.add_node("generate_answer", answer_node)
    builder.add_node("finalize", finalize_node)
    builder.add_edge(START, "init")
    builder.add_edge("init", "retrieve")
    builder.add_edge("retrieve", "rerank_filter")
    builder.add_conditional_edges("rerank_filter", after_filter)
    builder.add_edge("llm_knowledge", "extract")
    builder.add_edge("extract", "verify_nli")
    builder.add_edge("verify_nli", "update_evidence_pool")
    builder.add_conditional_edges("update_evidence_pool", after_update)
    builder.add_conditional_edges("judge_missing", after_judge)
    builder.add_edge("regenerate_keywords", "retrieve")
    builder.add_edge("generate_answer", "finalize")
    builder.add_edge("finalize", END)
    graph = builder.compile(checkpointer=checkpointer, name="migres")
    # at most 8 nodes per round, T+1 rounds, plus init / generate_answer / finalize
    return graph.with_config(recursion_limit=max(100, 8 * (budget(defaults) + 1) + 10))
