"""iterkey: iterative keyword generation for BM25 RAG (Hayashi et al., arXiv 2505.08450).

generate_keywords (q -> K_1) -> retrieve (q + K_i, top-3) -> generate_answer (q, D_i -> a_i)
-> validate_answer (forced choice True/False) -> stop on True, else regenerate_keywords
(q, K_i -> K_(i+1), no documents, no answer) and retrieve again, up to ``max_iterations``
rounds. Each round sees only its own passages; K_(i+1) replaces K_i. See
docs/methods/iterkey.md and the spec for every choice the paper leaves open.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from langchain_core.language_models import BaseChatModel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from gaprag.errors import InputError
from gaprag.graphs.common import BaseContext, Resources, describe, make_context, merge_context
from gaprag.graphs.iterkey.analysis import FallbackPolicy, final_round
from gaprag.graphs.iterkey.parse import merge_keyword_lists, parse_keywords, retrieval_query
from gaprag.llm.accounting import node, record_decision
from gaprag.llm.client import LLM
from gaprag.llm.factory import openai_llm, resolve_llm
from gaprag.llm.parse import parse_choice
from gaprag.nodes import clean_answer, truncate_words
from gaprag.nodes.legacy import retrieve
from gaprag.progress import emit
from gaprag.prompts import load_prompts
from gaprag.state.base import Evidence, InputState
from gaprag.state.iterkey import (
    IterationRecord,
    IterKeyOutput,
    IterKeyState,
    ParseFailure,
    VerdictScores,
)
from gaprag.stores.store import RetrievalMode

PROMPTS = load_prompts(__package__)

VALIDATION_OPTIONS = ("True", "False")
# LLM.choose gives its constrained/text call ``max_tokens + 16`` (room for a JSON wrapper);
# asking for ``cap - 16`` keeps every validation request within the paper's cap of 30.
CHOOSE_EXTRA_TOKENS = 16
NO_DOCUMENTS = "(no documents retrieved)"
RECURSION_FLOOR = 10_000
RegenerationMode = Literal["keywords_only", "doc_by_doc"]
Role = Literal["keywords", "validator"]


@dataclass(kw_only=True)
class Context(BaseContext):
    max_iterations: int = describe(
        5, "N: most keywords-retrieve-answer-validate rounds (paper: up to five)."
    )
    top_k: int = describe(
        3, "Passages retrieved per round and shown to the answer and validation prompts (paper: 3)."
    )
    retrieval_mode: RetrievalMode = describe(
        "bm25",
        "bm25 (the paper's IterKey), dense (the IterKey (E5) ablation) or hybrid (RRF of both); "
        "every mode gets the same question + keywords query string.",
    )
    recall_k: int = describe(
        5,
        "Passages retrieved per round for recall logging only (ids kept in history); only the "
        "first top_k ever reach a prompt (the paper reports Top-1..5 recall).",
    )
    keywords_max_tokens: int = describe(
        50, "Output cap for the initial keyword list (paper Table 14: 50)."
    )
    regenerate_max_tokens: int = describe(
        50, "Output cap for a regenerated keyword list (paper silent; same as keyword generation)."
    )
    answer_max_tokens: int = describe(50, "Output cap for the answer call (paper Table 14: 50).")
    validate_max_tokens: int = describe(
        30,
        "Output cap for the True/False validation call (paper Table 14: 30); the logprobs path "
        "asks for a single token.",
    )
    cot_max_tokens: int = describe(
        256, "Output cap for the chain-of-thought validation and regeneration prompts (cot)."
    )
    max_passage_words: int = describe(
        256, "Passages are cut to this many words in prompts (paper: 256-token chunks)."
    )
    fallback_policy: FallbackPolicy = describe(
        "last",
        "Answer returned when no round validates (paper silent): last (a_N), first (a_1) or "
        "majority (most frequent normalised answer, ties to the latest).",
    )
    continue_after_true: bool = describe(
        False,
        "Keep iterating after a True verdict, for the paper's Table 9 analysis; the answer is "
        "still the first validated one.",
    )
    regeneration_mode: RegenerationMode = describe(
        "keywords_only",
        "keywords_only: new keywords from the question and previous keywords (the paper's "
        "method); doc_by_doc: one call per retrieved passage, lists concatenated (Table 10).",
    )
    cot: bool = describe(
        False,
        "Chain-of-thought validation and regeneration prompts (paper App. D: no consistent gain).",
    )
    query_joiner: str = describe(
        " ", "Separator between the question and the keywords in the retrieval query."
    )
    keywords_base_url: str = describe(
        "",
        "Endpoint of a separate keyword LLM (generation and regeneration, paper Table 7); "
        "empty uses the main LLM.",
    )
    keywords_model: str = describe("", "Model name for the keyword LLM endpoint.")
    validator_base_url: str = describe(
        "", "Endpoint of a separate validator LLM (paper Table 8); empty uses the main LLM."
    )
    validator_model: str = describe("", "Model name for the validator LLM endpoint.")


def render_documents(docs: Sequence[Evidence], max_words: int) -> str:
    """``[rank] title`` then the text, one block per passage, blank-line separated."""
    if not docs:
        return NO_DOCUMENTS
    blocks = []
    for rank, doc in enumerate(docs, 1):
        head = f"[{rank}] {doc.get('title') or ''}".rstrip()
        blocks.append(f"{head}\n{truncate_words(doc['text'], max_words)}")
    return "\n\n".join(blocks)


def cot_verdict(raw: str) -> bool | None:
    """The True/False after the last ``Conclusion:`` of a CoT reply (None if there is none)."""
    idx = raw.lower().rfind("conclusion")
    if idx < 0:
        return None
    picked = parse_choice(raw[idx + len("conclusion") :].lstrip(" :*"), VALIDATION_OPTIONS)
    return None if picked is None else picked == "True"


def _rounds(ctx: Context) -> int:
    return max(1, ctx.max_iterations)


def check_context(ctx: Context) -> Context:
    """Reject settings the graph cannot honour, with a clear message (not a silent default)."""
    allowed: dict[str, tuple[str, ...]] = {
        "fallback_policy": get_args(FallbackPolicy),
        "regeneration_mode": get_args(RegenerationMode),
        "retrieval_mode": get_args(RetrievalMode),
    }
    for name, options in allowed.items():
        if getattr(ctx, name) not in options:
            raise InputError(
                f"iterkey: {name}={getattr(ctx, name)!r} is not valid",
                hint=f"use one of: {', '.join(options)}",
            )
    for name in ("max_iterations", "top_k"):
        if getattr(ctx, name) < 1:
            raise InputError(f"iterkey: {name} must be at least 1", hint=f"set {name}=1 or more")
    return ctx


def build(
    res: Resources,
    defaults: Context,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    *,
    llm_keywords: LLM | BaseChatModel | None = None,
    llm_validator: LLM | BaseChatModel | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The IterKey graph. ``llm_keywords`` / ``llm_validator`` replace the main LLM for the
    keyword calls (P1, P4) or the validation call (P3) only: the paper's Table 7/8 ablations."""
    check_context(defaults)
    roles: dict[Role, LLM] = {}
    if llm_keywords is not None:
        roles["keywords"] = resolve_llm(llm_keywords)
    if llm_validator is not None:
        roles["validator"] = resolve_llm(llm_validator)
    endpoints: dict[tuple[str, str], LLM] = {}
    lock = threading.Lock()

    def role_llm(ctx: Context, role: Role) -> LLM:
        if role in roles:
            return roles[role]
        url, model = (
            (ctx.keywords_base_url, ctx.keywords_model)
            if role == "keywords"
            else (ctx.validator_base_url, ctx.validator_model)
        )
        if not url:
            return res.llm(ctx)
        with lock:
            if (url, model) not in endpoints:
                endpoints[(url, model)] = openai_llm(url, model or None)
            return endpoints[(url, model)]

    @node("generate_keywords")
    def generate_keywords_node(state: IterKeyState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = check_context(merge_context(defaults, runtime.context))
        raw = role_llm(ctx, "keywords").generate(
            PROMPTS["keywords"].render(question=state.question),
            max_tokens=ctx.keywords_max_tokens,
        )
        keywords = parse_keywords(raw)
        update: dict[str, Any] = {
            "keywords": keywords,
            "keyword_history": [keywords],
            "iterations": 1,
            "current_raw": {"keywords": raw},
        }
        if not keywords:  # spec §10.11: retrieve with the question alone (plain BM25 RAG)
            record_decision(call="generate_keywords", path="default", fallback="question_only")
            update["parse_failures"] = [
                ParseFailure(
                    node="generate_keywords", iteration=1, raw=raw[:300], fallback_used="[]"
                )
            ]
        emit(round=1, keywords=keywords)
        return update

    @node("retrieve")
    def retrieve_node(state: IterKeyState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        query = retrieval_query(state.question, state.keywords, ctx.query_joiner)
        hits = retrieve(
            res.retriever(ctx),
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

    @node("generate_answer")
    def answer_node(state: IterKeyState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        raw = res.llm(ctx).generate(
            PROMPTS["answer"].render(
                documents=render_documents(state.evidence, ctx.max_passage_words),
                question=state.question,
            ),
            max_tokens=ctx.answer_max_tokens,
        )
        return {"answer": clean_answer(raw), "current_raw": {**state.current_raw, "answer": raw}}

    @node("validate_answer")
    def validate_node(state: IterKeyState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        i = state.iterations
        documents = render_documents(state.evidence, ctx.max_passage_words)
        failures: list[ParseFailure] = []
        if not state.answer:  # spec §10.18: nothing to validate; False keeps the loop going
            verdict = False
            scores = VerdictScores(prob_true=None, prob_false=None, method="default", raw="")
            record_decision(call="validate_answer", path="default", reason="empty_answer")
        elif ctx.cot:
            raw = role_llm(ctx, "validator").generate(
                PROMPTS["validate_cot"].render(
                    documents=documents, question=state.question, answer=state.answer
                ),
                max_tokens=ctx.cot_max_tokens,
            )
            decided = cot_verdict(raw)
            verdict = bool(decided)
            method = "parsed" if decided is not None else "default"
            scores = VerdictScores(prob_true=None, prob_false=None, method=method, raw=raw)
            record_decision(call="validate_answer", path=method, mode="cot", value=verdict)
        else:
            choice = role_llm(ctx, "validator").choose(
                PROMPTS["validate"].render(
                    documents=documents, question=state.question, answer=state.answer
                ),
                VALIDATION_OPTIONS,
                default="False",
                max_tokens=max(1, ctx.validate_max_tokens - CHOOSE_EXTRA_TOKENS),
                call="validate_answer",
            )
            p_true, p_false = choice.probs.get("True"), choice.probs.get("False")
            if choice.path == "logprobs":  # True only if strictly more probable: ties are False
                verdict = (p_true or 0.0) > (p_false or 0.0)
            else:
                verdict = choice.value == "True"
            scores = VerdictScores(
                prob_true=p_true, prob_false=p_false, method=choice.path, raw=choice.raw
            )
        if scores["method"] == "default" and state.answer:
            failures.append(
                ParseFailure(
                    node="validate_answer",
                    iteration=i,
                    raw=scores["raw"][:300],
                    fallback_used="False",
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
        emit(round=i, answer=state.answer, verdict=verdict, decided_by=scores["method"])
        return {
            "verdict": verdict,
            "verdict_scores": dict(scores),
            "verdicts": [verdict],
            "history": [record],
            "first_true_iteration": first_true,
            "seen_keywords": [*state.seen_keywords, *(k.casefold() for k in new_keywords)],
            "seen_doc_ids": [*state.seen_doc_ids, *new_doc_ids],
            "current_raw": {},
            "parse_failures": failures,
        }

    def route_after_validation(
        state: IterKeyState, runtime: Runtime[Context]
    ) -> Literal["finalize", "regenerate_keywords"]:
        ctx = merge_context(defaults, runtime.context)
        if state.verdict and not ctx.continue_after_true:
            return "finalize"
        if state.iterations >= _rounds(ctx):
            return "finalize"
        return "regenerate_keywords"

    @node("regenerate_keywords")
    def regenerate_node(state: IterKeyState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        llm = role_llm(ctx, "keywords")
        i = state.iterations + 1
        previous = json.dumps(state.keywords, ensure_ascii=False)
        if ctx.regeneration_mode == "doc_by_doc" and state.evidence:
            raws = [
                llm.generate(
                    PROMPTS["regenerate_doc"].render(
                        document=render_documents([doc], ctx.max_passage_words),
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
            raw = llm.generate(
                PROMPTS["regenerate_cot"].render(question=state.question, keywords=previous),
                max_tokens=ctx.cot_max_tokens,
            )
            keywords = parse_keywords(raw, last=True)
        else:
            raw = llm.generate(
                PROMPTS["regenerate"].render(question=state.question, keywords=previous),
                max_tokens=ctx.regenerate_max_tokens,
            )
            keywords = parse_keywords(raw)
        update: dict[str, Any] = {}
        if not keywords:  # spec §10.11: keep the previous list
            keywords = list(state.keywords)
            record_decision(
                call="regenerate_keywords", path="default", fallback="previous_keywords"
            )
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

    @node("finalize")
    def finalize_node(state: IterKeyState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        validated = state.first_true_iteration is not None
        chosen = final_round(state.history, state.first_true_iteration, ctx.fallback_policy)
        update: dict[str, Any] = {"stop_reason": "validated" if validated else "max_iterations"}
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

    builder = StateGraph(
        IterKeyState,
        context_schema=Context,
        input_schema=InputState,
        output_schema=IterKeyOutput,
    )
    builder.add_node("generate_keywords", generate_keywords_node)
    builder.add_node("retrieve", retrieve_node)
    builder.add_node("generate_answer", answer_node)
    builder.add_node("validate_answer", validate_node)
    builder.add_node("regenerate_keywords", regenerate_node)
    builder.add_node("finalize", finalize_node)
    builder.add_edge(START, "generate_keywords")
    builder.add_edge("generate_keywords", "retrieve")
    builder.add_edge("retrieve", "generate_answer")
    builder.add_edge("generate_answer", "validate_answer")
    builder.add_conditional_edges("validate_answer", route_after_validation)
    builder.add_edge("regenerate_keywords", "retrieve")
    builder.add_edge("finalize", END)
    graph = builder.compile(checkpointer=checkpointer, name="iterkey")
    # A run takes 4 steps a round + 2 (21 at N=5). LangGraph 1.0 stopped graphs at 25 steps
    # (later releases at 10007); the loop is bounded by max_iterations, so the step limit is
    # only a safety net: never below the current default, and >= 4N + 10 (spec §10.24).
    return graph.with_config(recursion_limit=max(4 * _rounds(defaults) + 10, RECURSION_FLOOR))


def build_iterkey(
    *,
    llm: LLM | BaseChatModel | None = None,
    retriever: Any = None,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    llm_keywords: LLM | BaseChatModel | None = None,
    llm_validator: LLM | BaseChatModel | None = None,
    **options: Any,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """``build_graph("iterkey", ...)`` plus per-role LLM objects (keyword LLM, validator LLM)."""
    context = make_context(Context, options)
    return build(
        Resources(llm=llm, retriever=retriever),
        context,
        checkpointer,
        llm_keywords=llm_keywords,
        llm_validator=llm_validator,
    )


__all__ = ["PROMPTS", "Context", "build", "build_iterkey", "cot_verdict", "render_documents"]
