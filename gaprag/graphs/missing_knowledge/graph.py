"""missing_knowledge (MisK-RAG): one pass of missing-knowledge retrieval.

retrieve (user question -> KB A) -> generate_draft -> judge_missing (ONE call: thought, whether
knowledge is missing, the missing knowledge, KB-aligned queries) -> retrieve_missing (each
query -> KB B) -> update_evidence_pool (md5 dedup, round-robin merge within the budget) ->
generate_answer (Context / Missing Knowledge Context / Question). When the judge finds nothing
missing, the graph goes straight to generate_answer.

A knowledge base is the passage store ("passages"), a store of question-answer pairs
("qa_pairs", a :class:`gaprag.stores.pairs.PairStore` or any retriever whose evidence text is
"Q: ...\\nA: ..."), or both searched together ("merged"). KB A and KB B are chosen separately
(the paper's "Misk A+B").
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.retrievers import BaseRetriever
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from pydantic import BaseModel, Field, field_validator

from gaprag.errors import GapragError
from gaprag.graphs.common import BaseContext, Resources, describe, merge_context
from gaprag.llm.accounting import node
from gaprag.llm.client import LLM
from gaprag.nodes import clean_answer, truncate_words
from gaprag.progress import emit
from gaprag.prompts import load_prompts
from gaprag.state.base import Evidence, InputState
from gaprag.state.missing_knowledge import (
    Chunk,
    ChunkKind,
    KnowledgeBase,
    MissingKnowledgeOutput,
    MissingKnowledgeState,
)
from gaprag.stores.retriever import LangChainRetrieverAdapter, Retriever, as_retriever
from gaprag.stores.store import RetrievalMode

PROMPTS = load_prompts(__package__)

Language = Literal["auto", "en", "zh"]
BudgetMode = Literal["matched", "additive"]
MkBudget = Literal["round_robin", "per_query"]
MergedOrder = Literal["score", "interleave"]
FinalWhenNotMissing = Literal["regenerate", "reuse_draft"]
QA_SOURCE = "qa_pairs"


@dataclass(kw_only=True)
class Context(BaseContext):
    top_k: int = describe(
        4, "TopK: chunks in the final prompt. Paper: 4 (split between KB A and KB B)."
    )
    budget_mode: BudgetMode = describe(
        "matched",
        "matched: top_k//2 user-question chunks + at most top_k - top_k//2 missing-knowledge "
        "chunks (paper, inferred); additive: top_k user-question chunks + top_k//2 on top.",
    )
    k_mk_per_query: int = describe(
        0, "Chunks retrieved per missing-knowledge query; 0 = the missing-knowledge budget."
    )
    mk_budget: MkBudget = describe(
        "round_robin",
        "round_robin: merge the queries' results rank by rank and stop at the budget; "
        "per_query: keep every query's top k_mk_per_query (after md5 dedup).",
    )
    max_mk_queries: int = describe(
        5, "Cap on the judge's queries (the paper sets none; its examples use 2)."
    )
    kb_primary: KnowledgeBase = describe(
        "passages",
        "KB A, searched with the user question: passages, qa_pairs or merged. "
        "Paper's best: merged (EM) or qa_pairs with kb_secondary=passages (F1).",
    )
    kb_secondary: KnowledgeBase = describe(
        "passages", "KB B, searched with the missing-knowledge queries: passages, qa_pairs, merged."
    )
    qa_store: str = describe(
        "",
        "Path of a question-answer pair store (`gaprag kb qa-pairs`); needed when a KB is "
        "qa_pairs or merged, unless a pair store was passed to the graph.",
    )
    qa_gamma: float = describe(
        1.0,
        "Pair ranking sim(q, question)^gamma * sim(q, chunk)^(1-gamma): 1 = match the pairs' "
        "questions (the paper indexes the pair text); 0.5 = RAG-EF's mix with the source chunk.",
    )
    merged_order: MergedOrder = describe(
        "score",
        "How a merged KB ranks passages and pairs: score (one ranking, as one index; dense "
        "scores are cosine on both sides) or interleave (alternate the two stores' ranks).",
    )
    retrieval_mode: RetrievalMode = describe(
        "dense", "Passage retrieval: dense (paper), bm25 or hybrid (library extensions)."
    )
    language: Language = describe(
        "auto",
        "Prompt set: en, zh (the paper's Chinese medical setting), auto = from the question.",
    )
    options_text: str = describe(
        "",
        "Answer options of a multiple-choice question, one per line (e.g. 'A. ...'); shown "
        "under the question in every prompt but never used as a retrieval query. An "
        "'Options:' block appended to the question is recognised the same way.",
    )
    judge_max_tokens: int = describe(
        512, "Output cap for the judge call (thought + verdict + lists + queries)."
    )
    final_when_not_missing: FinalWhenNotMissing = describe(
        "regenerate",
        "When nothing is missing: regenerate (final call with the judge's thought) or "
        "reuse_draft (return the draft, one call fewer).",
    )
    include_missing_list: bool = describe(
        False, "Also list the judge's missing knowledge in the final prompt (not in the paper)."
    )


# -- the judge's reply ---------------------------------------------------------------------
_TRUE = {"true", "yes", "y", "1", "missing", "是", "缺失", "有", "对"}
_FALSE = {"false", "no", "n", "0", "none", "not missing", "否", "不缺失", "无", "没有", "不"}


class Judgement(BaseModel):
    """One reply holds the analysis, the verdict, what is missing and a query for each."""

    thought: str = Field(default="", description="Short analysis of the context and answer.")
    judge: bool = Field(description="True when knowledge is missing.")
    missing_knowledge: list[str] = Field(default_factory=list, description="Missing pieces.")
    query: list[str] = Field(default_factory=list, description="One search query per piece.")

    @field_validator("thought", mode="before")
    @classmethod
    def _thought(cls, value: Any) -> str:
        return "" if value is None else str(value).strip()

    @field_validator("judge", mode="before")
    @classmethod
    def _judge(cls, value: Any) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, int | float) and value in (0, 1):
            return bool(value)
        text = str(value).strip().strip(".。").lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ValueError(f"not a yes/no verdict: {value!r}")

    @field_validator("missing_knowledge", "query", mode="before")
    @classmethod
    def _strings(cls, value: Any) -> list[str]:
        if value is None:
            return []
        items = [value] if isinstance(value, str | int | float) else list(value)
        return [str(v).strip() for v in items if v is not None and str(v).strip()]


NOTHING_MISSING = Judgement(thought="", judge=False, missing_knowledge=[], query=[])


def mk_queries(judged: Judgement, max_queries: int) -> list[str]:
    """The retrieval queries: deduplicated (case-insensitive), capped; the missing-knowledge
    items stand in when the judge says knowledge is missing but wrote no query."""
    if not judged.judge:
        return []
    source = judged.query or judged.missing_knowledge
    seen: set[str] = set()
    out: list[str] = []
    for q in source:
        key = " ".join(q.split()).lower()
        if key and key not in seen:
            seen.add(key)
            out.append(" ".join(q.split()))
    return out[: max(0, max_queries)]


# -- knowledge bases -----------------------------------------------------------------------
def md5_text(text: str) -> str:
    return hashlib.md5(text.strip().encode("utf-8")).hexdigest()


def budget(top_k: int, mode: BudgetMode, per_query: int = 0) -> tuple[int, int, int]:
    """(chunks for the user question, per missing-knowledge query, missing-knowledge total)."""
    top_k = max(1, top_k)
    if mode == "additive":
        k_orig, k_mk_total = top_k, max(1, top_k // 2)
    else:
        k_orig = max(1, top_k // 2)
        k_mk_total = max(1, top_k - k_orig)
    return k_orig, per_query if per_query > 0 else k_mk_total, k_mk_total


def _chunks(
    hits: Sequence[Evidence],
    kind: ChunkKind,
    kb: KnowledgeBase,
    by: Literal["orig", "mk"],
    query: str,
) -> list[Chunk]:
    return [
        Chunk(
            id=h["id"],
            title=h.get("title", "") or "",
            text=h["text"],
            kind=kind,
            kb=kb,
            source=h.get("source", ""),
            score=float(h.get("score", 0.0)),
            rank=i,
            retrieved_by=by,
            query=query,
            md5=md5_text(h["text"]),
        )
        for i, h in enumerate(hits, 1)
    ]


class KnowledgeBaseRetriever:
    """One knowledge-base setup (passages, qa_pairs or merged) as a gaprag ``Retriever``.

    Also usable on its own, e.g. ``build_graph("standard_rag", retriever=KnowledgeBaseRetriever(
    "merged", store, pairs))`` for the paper's standard-RAG rows; ``merged`` with
    ``merged_order="interleave"`` is the paper's "2-way retrieval" (k/2 from each store).
    """

    def __init__(
        self,
        kb: KnowledgeBase,
        passages: Any,
        pairs: Any,
        *,
        merged_order: MergedOrder = "score",
        qa_gamma: float = 1.0,
    ) -> None:
        """``passages``: a gaprag store/retriever or a LangChain retriever; ``pairs``: a
        :class:`~gaprag.stores.pairs.PairStore` or a retriever of "Q: ...\\nA: ..." evidence."""
        if kb in ("qa_pairs", "merged") and pairs is None:
            raise GapragError(
                f"knowledge base {kb!r} needs a question-answer pair store",
                hint="build one with `gaprag kb qa-pairs CORPUS --out DIR` and pass "
                "qa_store=DIR (or --set qa_store=DIR)",
            )
        if kb in ("passages", "merged") and passages is None:
            raise GapragError(f"knowledge base {kb!r} needs a passage store", hint="pass a store")
        self.kb: KnowledgeBase = kb
        self.passages: Retriever | None = as_retriever(passages) if passages is not None else None
        self.pairs = pair_retriever(pairs, gamma=qa_gamma) if pairs is not None else None
        self.merged_order: MergedOrder = merged_order

    def chunks(
        self,
        query: str,
        k: int,
        *,
        mode: RetrievalMode | None = None,
        retrieved_by: Literal["orig", "mk"] = "orig",
        exclude: Collection[str] = (),
    ) -> list[Chunk]:
        if k <= 0:
            return []
        docs: list[Chunk] = []
        pairs: list[Chunk] = []
        if self.kb in ("passages", "merged"):
            assert self.passages is not None
            hits = self.passages.search(query, k, mode=mode, exclude=exclude)
            docs = _chunks(hits, "doc", self.kb, retrieved_by, query)
        if self.kb in ("qa_pairs", "merged"):
            assert self.pairs is not None
            hits = self.pairs.search(query, k, mode=mode, exclude=exclude)
            pairs = _chunks(hits, "qa", self.kb, retrieved_by, query)
        if self.kb != "merged":
            return docs or pairs
        if self.merged_order == "score" and mode == "dense":  # comparable cosines
            ranked = sorted([*docs, *pairs], key=lambda c: -c["score"])
        else:
            ranked = [c for pair in zip(docs, pairs, strict=False) for c in pair]
            ranked += docs[len(pairs) :] + pairs[len(docs) :]
        out: list[Chunk] = []
        seen: set[str] = set()
        for chunk in ranked:
            if chunk["md5"] not in seen:
                seen.add(chunk["md5"])
                out.append({**chunk, "rank": len(out) + 1})
            if len(out) >= k:
                break
        return out

    def search(
        self,
        query: str,
        k: int = 5,
        *,
        mode: RetrievalMode | None = None,
        exclude: Collection[str] = (),
    ) -> list[Evidence]:
        return [to_evidence(c, 0) for c in self.chunks(query, k, mode=mode, exclude=exclude)]


def pair_retriever(pairs: Any, *, gamma: float = 1.0) -> Retriever:
    """A :class:`~gaprag.stores.pairs.PairStore`, a LangChain retriever, or a gaprag retriever
    whose evidence text reads "Q: ...\\nA: ..." (e.g. ``PairStore.as_retriever()``)."""
    from gaprag.stores.pairs import PairStore

    if isinstance(pairs, PairStore):
        return pairs.as_retriever(gamma=gamma, source_label=QA_SOURCE)
    if isinstance(pairs, BaseRetriever):
        return LangChainRetrieverAdapter(pairs, source=QA_SOURCE)
    return as_retriever(pairs)


def open_pair_store(path: str) -> Any:
    from gaprag.stores.pairs import PairStore

    return PairStore.open(path)


def to_evidence(chunk: Chunk, round: int) -> Evidence:
    return Evidence(
        id=chunk["id"], title=chunk["title"], text=chunk["text"], source=chunk["source"],
        score=chunk["score"], round=round,
    )  # fmt: skip


def merge_round_robin(
    candidates: Sequence[Sequence[Chunk]], seen: Collection[str], limit: int | None
) -> list[Chunk]:
    """q1#1, q2#1, q1#2, q2#2, ...: skip md5 duplicates (of ``seen`` and of each other), stop
    at ``limit`` (None: keep everything)."""
    taken: set[str] = set(seen)
    out: list[Chunk] = []
    depth = max((len(c) for c in candidates), default=0)
    for rank in range(depth):
        for ranked in candidates:
            if rank >= len(ranked):
                continue
            chunk = ranked[rank]
            if chunk["md5"] in taken:
                continue
            taken.add(chunk["md5"])
            out.append(chunk)
            if limit is not None and len(out) >= limit:
                return out
    return out


# -- prompt parts --------------------------------------------------------------------------
_CJK = re.compile(r"[\u4e00-\u9fff]")
_HEADINGS = {
    "en": ("### Documents", "### History QA pairs", "(none)"),
    "zh": ("### Documents", "### History QA pairs", "（无）"),
}


def language(ctx: Context, question: str) -> Literal["en", "zh"]:
    if ctx.language in ("en", "zh"):
        return ctx.language
    return "zh" if _CJK.search(question) else "en"


def format_chunks(chunks: Sequence[Chunk], *, max_words: int = 150, lang: str = "en") -> str:
    """Documents first (``Document[i]: ...``), then question-answer pairs (``Q:`` / ``A:``);
    numbering starts at 1 in each call (each prompt section)."""
    docs_head, qa_head, empty = _HEADINGS.get(lang, _HEADINGS["en"])
    docs = [c for c in chunks if c["kind"] == "doc"]
    pairs = [c for c in chunks if c["kind"] == "qa"]
    lines: list[str] = []
    if docs:
        lines.append(docs_head)
        for i, c in enumerate(docs, 1):
            title = f"{c['title']}: " if c["title"] else ""
            lines.append(f"Document[{i}]: {title}{_cut(c['text'], max_words)}")
    if pairs:
        lines.append(qa_head)
        for c in pairs:
            text = c["text"].strip()
            if not text.startswith("Q:"):
                text = f"Q: {c['title']}\nA: {text}" if c["title"] else text
            lines.append(_cut(text, max_words))
    return "\n".join(lines) if lines else empty


def _cut(text: str, max_words: int) -> str:
    if _CJK.search(text):  # words do not split Chinese: cut by characters (~2 per word)
        limit = max_words * 2
        return text if len(text) <= limit else text[:limit] + "…"
    return truncate_words(text, max_words)


def format_options(options: Mapping[str, Any] | Sequence[Any]) -> str:
    """``{"A": "x", "B": "y"}`` or ``["x", "y"]`` as ``A. x`` lines, for ``options_text``."""
    if isinstance(options, Mapping):
        items = [(str(k), str(v)) for k, v in options.items()]
    else:
        items = [(chr(ord("A") + i), str(v)) for i, v in enumerate(options)]
    return "\n".join(f"{k}. {v}" for k, v in items)


_OPTIONS = re.compile(r"\n\s*(?:Options|选项)\s*[:：]\s*\n(?P<options>.+)$", re.S | re.I)


def split_question(question: str, options_text: str = "") -> tuple[str, str]:
    """(question stem, options). Options come from ``options_text`` or from an ``Options:``
    block appended to the question (the evaluation harness's multiple-choice format); only the
    stem is used as a retrieval query."""
    match = _OPTIONS.search(question)
    if match is None:
        return question.strip(), options_text.strip()
    return question[: match.start()].strip(), options_text.strip() or match["options"].strip()


def question_block(question: str, options_text: str, lang: str) -> str:
    stem, options = split_question(question, options_text)
    if not options:
        return stem
    label = "选项：" if lang == "zh" else "Options:"
    return f"{stem}\n{label}\n{options}"


# -- the graph -----------------------------------------------------------------------------
def build(
    res: Resources,
    defaults: Context,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    *,
    pairs: Any = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """``pairs``: the question-answer pair store (else ``qa_store`` is opened on first use)."""
    lock = threading.Lock()
    opened: dict[str, Any] = {}

    def pair_source(ctx: Context) -> Retriever | None:
        if pairs is None and not ctx.qa_store:
            return None
        key = f"{ctx.qa_store}|{ctx.qa_gamma}"
        with lock:
            if key not in opened:
                store = pairs if pairs is not None else open_pair_store(ctx.qa_store)
                opened[key] = pair_retriever(store, gamma=ctx.qa_gamma)
            return opened[key]  # type: ignore[no-any-return]

    def kb(ctx: Context, which: KnowledgeBase) -> KnowledgeBaseRetriever:
        needs_pairs = which in ("qa_pairs", "merged")
        needs_docs = which in ("passages", "merged")
        return KnowledgeBaseRetriever(
            which,
            res.retriever(ctx) if needs_docs else None,
            pair_source(ctx) if needs_pairs else None,
            merged_order=ctx.merged_order,
        )

    def llm_for(ctx: Context) -> LLM:
        return res.llm(ctx)

    @node("retrieve")
    def retrieve_node(state: MissingKnowledgeState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        k_orig, _, _ = budget(ctx.top_k, ctx.budget_mode, ctx.k_mk_per_query)
        query, _ = split_question(state.question)
        found = kb(ctx, ctx.kb_primary).chunks(
            query, k_orig, mode=ctx.retrieval_mode, retrieved_by="orig"
        )
        emit(round=1, query=query, kb=ctx.kb_primary, added=len(found))
        return {
            "initial_contexts": found,
            "evidence": [to_evidence(c, 1) for c in found],
            "queries": [query],
            "iterations": 1,
            # reset the per-question fields (a checkpointed thread may hold a previous run's)
            "mk_candidates": [],
            "mk_contexts": [],
            "mk_round": 0,
            "mk_queries": [],
            "missing_knowledge": [],
            "missing": False,
            "thought": "",
            "judge_parse_ok": True,
        }

    @node("generate_draft")
    def draft_node(state: MissingKnowledgeState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        lang = language(ctx, state.question)
        messages = PROMPTS[f"draft_{lang}"].render(
            context=format_chunks(state.initial_contexts, max_words=ctx.max_passage_words, lang=lang),
            question=question_block(state.question, ctx.options_text, lang),
        )  # fmt: skip
        draft = clean_answer(llm_for(ctx).generate(messages, max_tokens=ctx.answer_max_tokens))
        return {"draft_answer": draft}

    @node("judge_missing")
    def judge_node(state: MissingKnowledgeState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        lang = language(ctx, state.question)
        messages = PROMPTS[f"judge_{lang}"].render(
            question=question_block(state.question, ctx.options_text, lang),
            context=format_chunks(state.initial_contexts, max_words=ctx.max_passage_words, lang=lang),
            draft=state.draft_answer or "(empty)",
        )  # fmt: skip
        judged = llm_for(ctx).structured(
            messages, Judgement, default=NOTHING_MISSING, max_tokens=ctx.judge_max_tokens,
            call="judge_missing",
        )  # fmt: skip
        verdict = judged.value
        queries = mk_queries(verdict, ctx.max_mk_queries)
        emit(judge=verdict.judge, queries=queries, parse_ok=judged.path != "default")
        return {
            "missing": verdict.judge,
            "thought": verdict.thought,
            "missing_knowledge": verdict.missing_knowledge,
            "mk_queries": queries,
            "judge_parse_ok": judged.path != "default",
        }

    def route_after_judge(
        state: MissingKnowledgeState,
    ) -> Literal["retrieve_missing", "generate_answer"]:
        return "retrieve_missing" if state.missing and state.mk_queries else "generate_answer"

    @node("retrieve_missing")
    def retrieve_missing_node(
        state: MissingKnowledgeState, runtime: Runtime[Context]
    ) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        _, per_query, _ = budget(ctx.top_k, ctx.budget_mode, ctx.k_mk_per_query)
        base = kb(ctx, ctx.kb_secondary)
        candidates = []
        for q in state.mk_queries:
            found = base.chunks(q, per_query, mode=ctx.retrieval_mode, retrieved_by="mk")
            emit(round=2, query=q, kb=ctx.kb_secondary, found=len(found))
            candidates.append(found)
        return {"mk_candidates": candidates, "queries": list(state.mk_queries), "iterations": 2}

    @node("update_evidence_pool")
    def update_node(state: MissingKnowledgeState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        _, _, total = budget(ctx.top_k, ctx.budget_mode, ctx.k_mk_per_query)
        seen = [c["md5"] for c in state.initial_contexts]
        limit = total if ctx.mk_budget == "round_robin" else None
        added = merge_round_robin(state.mk_candidates, seen, limit)
        emit(round=2, added=len(added))
        pool = [to_evidence(c, 1) for c in state.initial_contexts]
        pool += [to_evidence(c, 2) for c in added]
        return {"mk_contexts": added, "evidence": pool, "mk_round": state.mk_round + 1}

    @node("generate_answer")
    def answer_node(state: MissingKnowledgeState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        stop = "single_pass" if state.missing else "nothing_missing"
        if not state.missing and ctx.final_when_not_missing == "reuse_draft":
            return {"answer": state.draft_answer, "stop_reason": stop}
        lang = language(ctx, state.question)
        mk_context = format_chunks(state.mk_contexts, max_words=ctx.max_passage_words, lang=lang)
        if not state.mk_contexts:
            mk_context = ""
        thought = state.thought
        if ctx.include_missing_list and state.missing_knowledge:
            thought = "\n".join([thought, *(f"- {m}" for m in state.missing_knowledge)]).strip()
        messages = PROMPTS[f"answer_{lang}"].render(
            context=format_chunks(state.initial_contexts, max_words=ctx.max_passage_words, lang=lang),
            thought=thought or _HEADINGS[lang][2],
            mk_context=mk_context,
            question=question_block(state.question, ctx.options_text, lang),
        )  # fmt: skip
        answer = clean_answer(llm_for(ctx).generate(messages, max_tokens=ctx.answer_max_tokens))
        return {"answer": answer or state.draft_answer, "stop_reason": stop}

    builder = StateGraph(
        MissingKnowledgeState,
        context_schema=Context,
        input_schema=InputState,
        output_schema=MissingKnowledgeOutput,
    )
    builder.add_node("retrieve", retrieve_node)
    builder.add_node("generate_draft", draft_node)
    builder.add_node("judge_missing", judge_node)
    builder.add_node("retrieve_missing", retrieve_missing_node)
    builder.add_node("update_evidence_pool", update_node)
    builder.add_node("generate_answer", answer_node)
    builder.add_edge(START, "retrieve")
    builder.add_edge("retrieve", "generate_draft")
    builder.add_edge("generate_draft", "judge_missing")
    builder.add_conditional_edges("judge_missing", route_after_judge)
    builder.add_edge("retrieve_missing", "update_evidence_pool")
    builder.add_edge("update_evidence_pool", "generate_answer")
    builder.add_edge("generate_answer", END)
    return builder.compile(checkpointer=checkpointer, name="missing_knowledge")


def build_missing_knowledge(
    *,
    llm: Any = None,
    retriever: Any = None,
    pairs: Any = None,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    **options: Any,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """``build_graph("missing_knowledge", ...)`` plus a live question-answer pair store."""
    from gaprag.graphs.common import make_context

    return build(
        Resources(llm=llm, retriever=retriever), make_context(Context, options), checkpointer,
        pairs=pairs,
    )  # fmt: skip
