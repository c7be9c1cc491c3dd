"""rfm_rag: RFM-RAG (Li et al., arXiv 2508.17862). Retrieval feedback + a persistent evidence pool.

Once per question the LLM writes the question's entities and relational triples with
placeholders. Each round retrieves unseen passages, condenses them into fact sentences that
join a persistent evidence pool, and the R-Feedback Model (a tiny MLP over entity coverage S_f
and question-pool relevance G_f) decides whether the pool is sufficient. If not, the next query
is the low-coverage entities plus the entities that fill the triples' placeholders. At most
``max_iterations`` retrievals; the answer is generated once from the whole pool.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from langgraph.types import Overwrite
from pydantic import BaseModel, Field, field_validator

from gaprag.graphs.common import BaseContext, Resources, describe, merge_context
from gaprag.graphs.rfm_rag.features import (
    FeatureExtractor,
    LengthUnit,
    coverage_map,
    normalise,
    syntactic_coverage,
)
from gaprag.graphs.rfm_rag.model import (
    FeedbackResult,
    FixedJudge,
    HeuristicJudge,
    MLPJudge,
    RFeedbackMLP,
    SufficiencyJudge,
    expected_embedder,
    shipped_weights_path,
)
from gaprag.llm.accounting import metered, node
from gaprag.llm.client import LLM
from gaprag.nodes.legacy import format_passages, retrieve
from gaprag.progress import emit
from gaprag.prompts import load_prompts
from gaprag.state.base import Evidence, InputState
from gaprag.state.rfm_rag import EvidenceItem, RFMOutput, RFMState, Triple
from gaprag.stores.embeddings import Embedder, embedder_by_name
from gaprag.stores.store import RetrievalMode

PROMPTS = load_prompts(__package__)

FeedbackMode = Literal["mlp", "llm_judge", "heuristic", "never_sufficient", "always_sufficient"]
QuestionMode = Literal["both", "query", "original"]
TaskType = Literal["auto", "short_answer", "yes_no"]
PoolScope = Literal["thread", "question"]


@dataclass(kw_only=True)
class Context(BaseContext):
    max_iterations: int = describe(
        3,
        "Maximum retrievals per question (paper: 3). The loop also stops when the pool is sufficient.",
    )
    top_k: int = describe(3, "Passages per retrieval (UNSPECIFIED in the paper; spec default 3).")
    retrieval_mode: RetrievalMode = describe(
        "bm25", "bm25 (paper), dense or hybrid. Passages already seen for the question are skipped."
    )
    feedback_mode: FeedbackMode = describe(
        "mlp",
        "Sufficiency judge: mlp (the trained R-Feedback Model, paper), llm_judge, heuristic "
        "(S_f >= 0.5), never_sufficient (the wo-RFM ablation: always max_iterations rounds), "
        "always_sufficient (one round).",
    )
    rf_weights: str = describe(
        "",
        "R-Feedback weights JSON (`gaprag rfm train`); empty uses the weights shipped with gaprag.",
    )
    rf_threshold: float = describe(
        0.5, "Pool is sufficient when sigmoid(logit) >= this (UNSPECIFIED; spec default 0.5)."
    )
    coverage_threshold: float = describe(
        0.2, "θ: an entity whose pool coverage is below this is a knowledge gap (UNSPECIFIED; 0.2)."
    )
    coverage_length_unit: LengthUnit = describe(
        "sentences", "L_E in coverage = occurrences / L_E: pool sentences (default) or tokens."
    )
    prompt1_question_mode: QuestionMode = describe(
        "both",
        "What the evidence prompt is asked about: both (question + current search focus), "
        "query (the round's query only, literal Eq. 1) or original (the question only).",
    )
    task_type: TaskType = describe(
        "auto",
        "short_answer, yes_no, or auto (yes/no when the question starts with is/are/did...).",
    )
    pool_scope: PoolScope = describe(
        "thread",
        "thread: with a checkpointer the evidence pool persists across the turns of a thread; "
        "question: every question starts from an empty pool.",
    )
    answer_max_tokens: int = describe(128, "Output cap for the final (chain-of-thought) answer.")
    structure_max_tokens: int = describe(256, "Output cap for the entities/triples call.")
    extract_max_tokens: int = describe(320, "Output cap for the evidence-condensing call.")
    fills_max_tokens: int = describe(128, "Output cap for the placeholder-filling call.")
    judge_max_tokens: int = describe(96, "Output cap for the llm_judge call.")


# -- parsing ---------------------------------------------------------------------------------
_PLACEHOLDER = re.compile(r"^<\s*[A-Za-z]\w*\s*>$")
_TUPLE = re.compile(r"\(([^,()]+),\s*([^,()]+),\s*([^()]+?)\)")
_EMPTY_EVIDENCE = {"", "none", "empty", "n/a", "no relevant information", "nothing"}
_BULLET = re.compile(r"^\s*(?:[-*•]+|\d+[.)]|\(\d+\))\s*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_ANSWER = re.compile(r"(?i)so the answer is[:\s]*(.+?)(?:(?<!\b[A-Z])\.\s|\.$|\n|$)")
_NONE_FILLS = {"none", "unknown", "n/a", "null", "end", ""}
_YES_NO_START = re.compile(
    r"^(is|are|was|were|do|does|did|can|could|has|have|had|will|would|should|shall|may|might)\b",
    re.I,
)


def is_placeholder(text: str) -> bool:
    return bool(_PLACEHOLDER.match(text.strip()))


def is_end(text: str) -> bool:
    return text.strip().strip("\"'").lower() == "end"


def _dedupe(items: Sequence[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for item in items:
        key = normalise(item).strip()
        if key and key not in seen:
            seen.add(key)
            out.append(item)
    return out


class QuestionStructure(BaseModel):
    """Prompt 2's reply: key entities and triples [head, relation, tail]."""

    entities: list[str] = Field(default_factory=list)
    triples: list[list[str]] = Field(default_factory=list)

    @field_validator("entities", mode="before")
    @classmethod
    def _entities(cls, value: Any) -> list[str]:
        if isinstance(value, str):
            value = [value]
        return [str(v).strip() for v in value or [] if str(v).strip()]

    @field_validator("triples", mode="before")
    @classmethod
    def _triples(cls, value: Any) -> list[list[str]]:
        out: list[list[str]] = []
        for item in value or []:
            if isinstance(item, dict):
                vals = [str(item.get(k, "")) for k in ("head", "relation", "tail")]
                if not all(vals):
                    vals = [str(v) for v in item.values()][:3]
            elif isinstance(item, str):
                m = _TUPLE.search(item)
                vals = list(m.groups()) if m else []
            else:
                vals = [str(v) for v in item]
            if len(vals) >= 3:
                out.append([vals[0].strip(), vals[1].strip(), ", ".join(vals[2:]).strip()])
        return out


def parse_structure_text(raw: str) -> QuestionStructure:
    """Fallback for non-JSON replies: ``(head, relation, tail)`` tuples and an Entities: line."""
    triples = [list(m.groups()) for m in _TUPLE.finditer(raw)]
    entities: list[str] = []
    m = re.search(r"(?im)^\s*entities\s*[:：]\s*(.+)$", raw)
    if m:
        entities = [e.strip(" \"'[]") for e in m.group(1).split(",")]
    return QuestionStructure(entities=entities, triples=triples)


def finalize_structure(parsed: QuestionStructure) -> tuple[list[str], list[Triple]]:
    """De-duplicated entities (from the triples' concrete heads/tails if none) and triples."""
    triples = [
        Triple(
            head=h.strip().strip("\"'"),
            relation=r.strip().strip("\"'"),
            tail=t.strip().strip("\"'"),
        )
        for h, r, t in (tr[:3] for tr in parsed.triples)
    ]
    entities = [e for e in parsed.entities if not is_placeholder(e) and not is_end(e)]
    if not entities:
        for t in triples:
            entities += [
                x for x in (t["head"], t["tail"]) if x and not is_placeholder(x) and not is_end(x)
            ]
    return _dedupe(entities), triples


def parse_evidence(raw: str) -> list[str]:
    """Prompt 1's reply: the fact sentences after the last ``EVIDENCE:`` (none for NONE)."""
    idx = raw.upper().rfind("EVIDENCE:")
    body = raw[idx + len("EVIDENCE:") :] if idx >= 0 else raw
    body = body.strip()
    if body.lower().rstrip(".!").strip() in _EMPTY_EVIDENCE:
        return []
    out: list[str] = []
    for line in body.splitlines():
        line = _BULLET.sub("", line).strip()
        for part in _SENTENCE_END.split(line):
            part = part.strip().strip('"').strip()
            if len(part) >= 3 and part.lower().rstrip(".") not in _EMPTY_EVIDENCE:
                out.append(part)
    return out


class FillsReply(BaseModel):
    """Prompt 3's reply: one entity per triple."""

    fills: list[str] = Field(default_factory=list)

    @field_validator("fills", mode="before")
    @classmethod
    def _fills(cls, value: Any) -> list[str]:
        if isinstance(value, str):
            value = [value]
        return ["" if v is None else str(v) for v in value or []]


def parse_fills_text(raw: str) -> list[str]:
    """Fallback for non-JSON replies: one item per non-empty line, numbering removed."""
    out = []
    for line in raw.splitlines():
        line = re.sub(r"^\s*\d+[.)]\s*", "", line).strip().strip("\"'").strip()
        if line:
            out.append(line)
    return out


def clean_fills(items: Sequence[str]) -> list[str]:
    """z: the fills without placeholders, ``end``, empties or "none", de-duplicated."""
    out = []
    for item in items:
        item = item.strip().strip("\"'").strip().rstrip(".,;:!").strip().strip("\"'").strip()
        if item.lower() in _NONE_FILLS or is_placeholder(item) or is_end(item):
            continue
        out.append(item)
    return _dedupe(out)


def build_query(gaps: Sequence[str], fills: Sequence[str], question: str) -> tuple[list[str], str]:
    """G' = G then z (de-duplicated); the next query is G' space-joined, or the question."""
    gap_list = _dedupe([*gaps, *fills])
    return gap_list, (" ".join(gap_list) if gap_list else question)


def detect_task_type(question: str, setting: str = "auto") -> str:
    if setting in ("short_answer", "yes_no"):
        return setting
    return "yes_no" if _YES_NO_START.match(question.strip()) else "short_answer"


def extract_answer(text: str, task_type: str = "short_answer") -> str:
    """The span after "So the answer is" (else the last non-empty line); yes/no if asked."""
    m = _ANSWER.search(text)
    if m:
        span = m.group(1).strip()
    else:
        lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
        span = lines[-1] if lines else ""
        span = re.sub(r"(?i)^(final answer|answer)\s*[:：-]\s*", "", span)
    span = span.strip().strip("*").strip().strip("\"'").strip()
    if span.endswith(".") and not re.search(r"\b[A-Z]\.$", span):
        span = span[:-1].strip()
    if task_type == "yes_no":
        yn = re.search(r"\b(yes|no)\b", span, re.I) or re.search(r"\b(yes|no)\b", text, re.I)
        return yn.group(1).lower() if yn else span
    return span


# -- evidence pool ---------------------------------------------------------------------------
def _norm_fact(text: str) -> str:
    return " ".join(normalise(text).split()).rstrip(".!?;, ").strip()


def fact_id(text: str) -> str:
    return hashlib.sha1(_norm_fact(text).encode("utf-8")).hexdigest()[:16]


def add_to_pool(
    pool: Sequence[EvidenceItem],
    sentences: Sequence[str],
    *,
    round: int,
    query: str,
    question: str,
    source_passage_ids: Sequence[str],
) -> tuple[list[EvidenceItem], int]:
    """Add sentences to the pool: exact duplicates (case, spacing, final period) are dropped, a
    sentence contained in an existing one is dropped, and an existing sentence contained in a
    new one is replaced by it in place. Returns the new pool and how many sentences were added
    or replaced."""
    out = list(pool)
    changed = 0
    for sentence in sentences:
        norm = _norm_fact(sentence)
        if not norm:
            continue
        item = EvidenceItem(
            id=fact_id(sentence), text=sentence.strip(), round=round, query=query,
            question=question, source_passage_ids=list(source_passage_ids),
        )  # fmt: skip
        norms = [_norm_fact(e["text"]) for e in out]
        if any(norm == n or norm in n for n in norms):
            continue
        contained = [i for i, n in enumerate(norms) if n in norm]
        if contained:
            out[contained[0]] = item
            for i in reversed(contained[1:]):
                del out[i]
        else:
            out.append(item)
        changed += 1
    return out, changed


def pool_text(pool: Sequence[EvidenceItem]) -> str:
    return "\n".join(item["text"] for item in pool)


def pool_as_evidence(pool: Sequence[EvidenceItem]) -> list[Evidence]:
    return [
        Evidence(id=e["id"], title="", text=e["text"], source="llm", score=0.0, round=e["round"])
        for e in pool
    ]


# -- judges ----------------------------------------------------------------------------------
class JudgeReply(BaseModel):
    sufficient: bool = False
    missing: list[str] = Field(default_factory=list)


class LLMJudge:
    """Optional (not in the paper): ask the LLM whether the pool suffices; parse failure = no."""

    def __init__(self, llm: LLM, max_tokens: int = 96) -> None:
        self.llm = llm
        self.max_tokens = max_tokens

    def judge(
        self, question: str, entities: list[str], sentences: list[str], s_f: float
    ) -> FeedbackResult:
        messages = PROMPTS["judge"].render(
            question=question, pool="\n".join(sentences) or "(no facts)"
        )
        reply = self.llm.structured(
            messages, JudgeReply, default=JudgeReply(), max_tokens=self.max_tokens, call="judge"
        )
        return FeedbackResult(reply.value.sufficient, 1.0 if reply.value.sufficient else 0.0)


_judges: dict[tuple[Any, ...], SufficiencyJudge] = {}
_judges_lock = threading.Lock()


def mlp_judge(ctx: Context, retriever: Any) -> SufficiencyJudge:
    """The R-Feedback MLP with the embedder its weights were trained with (the store's own
    embedder when it is that one, so a loaded MiniLM is shared)."""
    path = ctx.rf_weights or str(shipped_weights_path())
    name = expected_embedder(path)
    store_embedder = getattr(retriever, "embedder", None)
    key = (path, name, ctx.rf_threshold, ctx.coverage_length_unit, id(store_embedder))
    with _judges_lock:
        if key not in _judges:
            embedder: Embedder = (
                store_embedder
                if store_embedder is not None and getattr(store_embedder, "name", "") == name
                else embedder_by_name(name)
            )
            model = RFeedbackMLP.load(path, expect_embedder=embedder.name)
            extractor = FeatureExtractor(embedder, ctx.coverage_length_unit)
            _judges[key] = MLPJudge(model, extractor, threshold=ctx.rf_threshold)
        return _judges[key]


# -- the graph -------------------------------------------------------------------------------
def build(
    res: Resources,
    defaults: Context,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    *,
    judge: SufficiencyJudge | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Compile the graph; ``judge`` replaces the sufficiency judge chosen by ``feedback_mode``."""

    def pick_judge(ctx: Context) -> SufficiencyJudge:
        if judge is not None:
            return judge
        if ctx.feedback_mode == "never_sufficient":
            return FixedJudge(False)
        if ctx.feedback_mode == "always_sufficient":
            return FixedJudge(True)
        if ctx.feedback_mode == "heuristic":
            return HeuristicJudge()
        if ctx.feedback_mode == "llm_judge":
            return LLMJudge(res.llm(ctx), ctx.judge_max_tokens)
        return mlp_judge(ctx, res.retriever(ctx))

    @node("extract_question_structure")
    def structure_node(state: RFMState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        start = time.perf_counter()
        # a fresh turn: usage and trace restart (with a checkpointer they would otherwise sum
        # over the thread); the evidence pool is kept when pool_scope == "thread"
        with metered() as meter:
            reply = res.llm(ctx).structured(
                PROMPTS["structure"].render(question=state.question), QuestionStructure,
                default=QuestionStructure(), max_tokens=ctx.structure_max_tokens, call="structure",
            )  # fmt: skip
        parsed = reply.value
        if reply.path == "default":
            parsed = parse_structure_text(reply.raw)
        entities, triples = finalize_structure(parsed)
        trace = [{"node": "extract_question_structure", **d} for d in meter.decisions]
        trace.append({"node": "extract_question_structure", "entities": entities,
                      "triples": len(triples), "pool_kept": len(state.evidence_pool)
                      if ctx.pool_scope == "thread" else 0})  # fmt: skip
        return {
            "entities": entities,
            "triples": triples,
            "task_type": detect_task_type(state.question, ctx.task_type),
            "current_query": state.question,
            "query_history": [],
            "retrieval_count": 0,
            "iterations": 0,
            "retrieved": [],
            "retrieved_passages": [],
            "seen_passage_ids": [],
            "round_evidence": "",
            "evidence_pool": list(state.evidence_pool) if ctx.pool_scope == "thread" else [],
            "sufficient": False,
            "feedback_prob": None,
            "feedback_logit": None,
            "semantic_relevance": None,
            "feedback_calls": 0,
            "gap_entities": [],
            "placeholder_fills": [],
            "gap_list": [],
            "answer": "",
            "raw_answer": "",
            "stop_reason": "",
            "queries": Overwrite([]),
            "usage": Overwrite(meter.usage(time.perf_counter() - start)),
            "trace": Overwrite(trace),
        }

    @node("retrieve")
    def retrieve_node(state: RFMState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        round_no = state.retrieval_count + 1
        query = state.current_query or state.question
        hits = retrieve(
            res.retriever(ctx), [query], k=ctx.top_k, mode=ctx.retrieval_mode, round=round_no,
            exclude=state.seen_passage_ids,
        )  # fmt: skip
        emit(method="rfm_rag", round=round_no, query=query, retrieved=len(hits))
        return {
            "retrieved": hits,
            "retrieved_passages": [*state.retrieved_passages, *hits],
            "seen_passage_ids": [*state.seen_passage_ids, *(h["id"] for h in hits)],
            "retrieval_count": round_no,
            "iterations": round_no,
            "query_history": [*state.query_history, query],
            "queries": [query],
        }

    @node("extract_evidence")
    def extract_node(state: RFMState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        if not state.retrieved:
            return {"round_evidence": ""}
        query = state.current_query or state.question
        first_round = query == state.question
        mode = ctx.prompt1_question_mode
        asked = query if mode == "query" else state.question
        focus = "" if mode != "both" or first_round else f"\nCurrent search focus: {query}"
        messages = PROMPTS["extract"].render(
            question=asked,
            focus=focus,
            focus_note=" (and the search focus)" if focus else "",
            passages=format_passages(state.retrieved, max_words=ctx.max_passage_words),
        )
        raw = res.llm(ctx).generate(messages, max_tokens=ctx.extract_max_tokens)
        return {"round_evidence": "\n".join(parse_evidence(raw))}

    @node("update_evidence_pool")
    def pool_node(state: RFMState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        sentences = [s for s in state.round_evidence.splitlines() if s.strip()]
        pool, added = add_to_pool(
            state.evidence_pool, sentences, round=state.retrieval_count,
            query=state.current_query or state.question, question=state.question,
            source_passage_ids=[p["id"] for p in state.retrieved],
        )  # fmt: skip
        texts = [e["text"] for e in pool]
        coverage = coverage_map(state.entities, texts, ctx.coverage_length_unit)
        s_f = syntactic_coverage(coverage)
        emit(method="rfm_rag", round=state.retrieval_count, added=added, pool=len(pool),
             coverage=round(s_f, 3))  # fmt: skip
        return {
            "evidence_pool": pool,
            "evidence": pool_as_evidence(pool),
            "entity_coverage": {k: round(v, 4) for k, v in coverage.items()},
            "syntactic_coverage": round(s_f, 4),
        }

    def after_pool(
        state: RFMState, runtime: Runtime[Context]
    ) -> Literal["feedback_classifier", "generate_answer"]:
        ctx = merge_context(defaults, runtime.context)
        if state.retrieval_count >= ctx.max_iterations:
            return "generate_answer"  # the verdict could not change anything: skip the judge
        return "feedback_classifier"

    @node("feedback_classifier")
    def feedback_node(state: RFMState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        result = pick_judge(ctx).judge(
            state.question, list(state.entities), [e["text"] for e in state.evidence_pool],
            state.syntactic_coverage,
        )  # fmt: skip
        emit(method="rfm_rag", round=state.retrieval_count, sufficient=result.sufficient,
             prob=result.prob)  # fmt: skip
        return {
            "sufficient": result.sufficient,
            "feedback_prob": result.prob,
            "feedback_logit": result.logit,
            "semantic_relevance": result.g_f,
            "feedback_calls": state.feedback_calls + 1,
            "trace": [{"node": "feedback_classifier", "mode": ctx.feedback_mode if judge is None
                       else type(judge).__name__, "round": state.retrieval_count,
                       "s_f": state.syntactic_coverage, "g_f": result.g_f, "prob": result.prob,
                       "sufficient": result.sufficient}],
        }  # fmt: skip

    def after_feedback(state: RFMState) -> Literal["judge_missing", "generate_answer"]:
        return "generate_answer" if state.sufficient else "judge_missing"

    @node("judge_missing")
    def missing_node(state: RFMState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        gaps = [
            e for e in state.entities if state.entity_coverage.get(e, 0.0) < ctx.coverage_threshold
        ]
        return {"gap_entities": gaps}

    @node("regenerate_keywords")
    def keywords_node(state: RFMState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        fills: list[str] = []
        if state.triples:
            listing = "\n".join(
                f"{i}. ({t['head']}, {t['relation']}, {t['tail']})"
                for i, t in enumerate(state.triples, 1)
            )
            reply = res.llm(ctx).structured(
                PROMPTS["fills"].render(pool=pool_text(state.evidence_pool) or "(empty)",
                                        triples=listing),
                FillsReply, default=FillsReply(), max_tokens=ctx.fills_max_tokens, call="fills",
            )  # fmt: skip
            raw_fills = (
                reply.value.fills if reply.path != "default" else parse_fills_text(reply.raw)
            )
            fills = clean_fills(raw_fills)
        gap_list, query = build_query(state.gap_entities, fills, state.question)
        emit(method="rfm_rag", round=state.retrieval_count + 1, next_query=query)
        return {"placeholder_fills": fills, "gap_list": gap_list, "current_query": query}

    @node("generate_answer")
    def answer_node(state: RFMState, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = merge_context(defaults, runtime.context)
        messages = PROMPTS["answer"].render(
            pool=pool_text(state.evidence_pool) or "(no facts found)", question=state.question
        )
        raw = res.llm(ctx).generate(messages, max_tokens=ctx.answer_max_tokens)
        stop = "sufficient" if state.sufficient else "max_iterations"
        return {
            "raw_answer": raw,
            "answer": extract_answer(raw, state.task_type),
            "stop_reason": stop,
            "evidence": pool_as_evidence(state.evidence_pool),
            "trace": [{"node": "generate_answer", "stop_reason": stop,
                       "retrievals": state.retrieval_count, "pool": len(state.evidence_pool)}],
        }  # fmt: skip

    builder = StateGraph(
        RFMState, context_schema=Context, input_schema=InputState, output_schema=RFMOutput
    )
    builder.add_node("extract_question_structure", structure_node)
    builder.add_node("retrieve", retrieve_node)
    builder.add_node("extract_evidence", extract_node)
    builder.add_node("update_evidence_pool", pool_node)
    builder.add_node("feedback_classifier", feedback_node)
    builder.add_node("judge_missing", missing_node)
    builder.add_node("regenerate_keywords", keywords_node)
    builder.add_node("generate_answer", answer_node)
    builder.add_edge(START, "extract_question_structure")
    builder.add_edge("extract_question_structure", "retrieve")
    builder.add_edge("retrieve", "extract_evidence")
    builder.add_edge("extract_evidence", "update_evidence_pool")
    builder.add_conditional_edges("update_evidence_pool", after_pool)
    builder.add_conditional_edges("feedback_classifier", after_feedback)
    builder.add_edge("judge_missing", "regenerate_keywords")
    builder.add_edge("regenerate_keywords", "retrieve")
    builder.add_edge("generate_answer", END)
    return builder.compile(checkpointer=checkpointer, name="rfm_rag")
