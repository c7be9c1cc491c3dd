"""MIGRES's nodes, one function per graph node (see docs/methods/migres.md).

Each round: retrieve candidates for the pending queries; the knowledge filter keeps the
passages (and, inside them, the sentences) that clear delta; the leaf call extracts facts
citing the snippets they come from; each fact is verified against a cited snippet; new facts
join the known information. The judge sees only that pool and answers or says what is missing;
the query generator turns the missing information into new queries. When nothing clears the
filter, the LLM writes background from its own knowledge instead.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

from langgraph.runtime import Runtime

from gaprag import nodes
from gaprag.accounting import estimate_tokens
from gaprag.aio import to_thread
from gaprag.deps import Deps
from gaprag.graphs.migres.context import Context, threshold
from gaprag.graphs.migres.deps import MigresDeps, scorer_for
from gaprag.graphs.migres.filter import knowledge_filter
from gaprag.graphs.migres.known_info import known_passages, retrieved_facts, seeds_for
from gaprag.graphs.migres.parsing import (
    AnswerField,
    AnswerFirstReply,
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
from gaprag.graphs.migres.prompting import FORMATS, PROMPTS, prompt
from gaprag.graphs.migres.snippets import round_candidates, snippet_item, strip_markup
from gaprag.graphs.migres.state import InfoItem, Judgement, Snippet, State
from gaprag.graphs.migres.verify import LLMVerifier, Verifier, entailed
from gaprag.llm.client import LLM, Structured, TokenLogprob
from gaprag.nodes.select import answer_structured, scored_update
from gaprag.progress import emit
from gaprag.prompts import RenderedPrompt, follow_up
from gaprag.state.base import Evidence, carry_metadata


# -- nodes -----------------------------------------------------------------------------------
def init(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Start the question: the first query is the question; the seed facts are known.

    Reads: `question`; writes: `pending_queries`, `query_history`, `known_info`, `known_sources`,
    `missing_info`.
    """
    q0 = state.question.strip()
    seeds = seeds_for(q0, runtime.context)
    return {
        "pending_queries": [q0],
        "query_history": [q0],
        "known_info": seeds,
        "known_sources": [[] for _ in seeds],
        "missing_info": "",  # written now so that the output always carries it
    }


async def retrieve(state: State, runtime: Runtime[Context], deps: Deps) -> dict[str, Any]:
    """A new round: every pending query's candidate passages; the round's artefacts cleared.

    Reads: `question`, `pending_queries`, `known_info`, `iterations`; writes: `raw_candidates`,
    `iterations`, `queries`, `known_info_len_at_round_start`, `filtered_snippets`,
    `llm_knowledge_used`, `leaf_passages`, `extracted_info`, `verified_info`.
    """
    ctx = runtime.context
    retriever = await deps.aretriever(ctx)
    queries = [q for q in state.pending_queries if q.strip()] or [state.question]
    round_ = state.iterations + 1
    found = await round_candidates(retriever, queries, ctx, round_)
    emit(round=round_, queries=queries, candidates=len(found))
    return {
        "raw_candidates": found,
        "iterations": round_,
        "queries": queries,
        "known_info_len_at_round_start": len(state.known_info),
        "filtered_snippets": [],
        "llm_knowledge_used": False,
        "leaf_passages": [],
        "extracted_info": [],
        "verified_info": [],
    }


async def rerank_filter(
    state: State, runtime: Runtime[Context], deps: MigresDeps
) -> dict[str, Any]:
    """The knowledge filter: the candidates' sentences that the scorer finds relevant.

    Reads: `question`, `raw_candidates`, `pending_queries`, `seen_counts`, `iterations`; writes:
    `filtered_snippets`, `trace`.
    """
    ctx = runtime.context
    scorer = await to_thread(scorer_for, ctx, deps)
    cleaned = [Evidence(**{**c, "text": strip_markup(c["text"])}) for c in state.raw_candidates]
    snippets, log = await to_thread(
        knowledge_filter,
        cleaned,
        state.pending_queries or [state.question],
        scorer,
        delta=threshold(ctx, scorer),
        seen_counts=state.seen_counts,
        sentence_filter=ctx.sentence_filter,
        max_shown=ctx.max_shown,
    )
    emit(round=state.iterations, kept=len(snippets))
    return {"filtered_snippets": snippets, "trace": [{"node": "rerank_filter", **log}]}


async def llm_knowledge(state: State, runtime: Runtime[Context], deps: Deps) -> dict[str, Any]:
    """The model's own knowledge on the first pending query, as one snippet if usable.

    Reads: `question`, `pending_queries`; writes: `filtered_snippets`, `llm_knowledge_used`,
    `llm_calls_by_kind`, `trace`.
    """
    ctx = runtime.context
    query = (state.pending_queries or [state.question])[0]
    llm = await deps.achat(ctx)
    text = await llm.agenerate(
        prompt("knowledge", ctx).render(question=query), max_tokens=ctx.knowledge_max_tokens
    )
    snippets: list[Snippet] = []
    if usable_knowledge(text):
        digest = hashlib.sha1(text.encode()).hexdigest()[:16]
        snippets.append(
            Snippet(
                id=f"llm:{digest}",
                title="LLM knowledge",
                text=text,
                origin_text=text,
                score=None,
                query=query,
                source="llm",
            )
        )
    return {
        "filtered_snippets": snippets,
        "llm_knowledge_used": True,
        "llm_calls_by_kind": {"knowledge": 1},
        "trace": [{"node": "llm_knowledge", "query": query, "usable": bool(snippets)}],
    }


async def extract(state: State, runtime: Runtime[Context], deps: Deps) -> dict[str, Any]:
    """The leaf module: the useful facts in the snippets shown (at most ``top_k``).

    A snippet is shown at most ``max_shown`` times per question; the first snippets shown are kept
    for an answer without retrieved facts.

    Reads: `question`, `filtered_snippets`, `seen_counts`, `llm_knowledge_used`, `pending_queries`,
    `question_snippets`; writes: `leaf_passages`, `seen_counts`, `extracted_info`,
    `question_snippets`, `knowledge_tokens`, `llm_calls_by_kind`.
    """
    ctx = runtime.context
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
    update: dict[str, Any] = {"leaf_passages": shown, "seen_counts": seen, "extracted_info": []}
    if shown and not state.question_snippets and not state.llm_knowledge_used:
        update["question_snippets"] = shown
    if not shown:
        return update
    passages = nodes.render_passages(
        [snippet_item(sn) for sn in shown], FORMATS["leaf"], max_words=ctx.max_passage_words
    )
    llm = await deps.achat(ctx)
    reply = await llm.astructured(
        prompt("leaf", ctx).render(passages=passages, question=question),
        LeafReply,
        default=LeafReply(),
        max_tokens=ctx.leaf_max_tokens,
        call="leaf",
    )
    facts = reply.value.useful_information if reply.path != "default" else None
    items = valid_facts(facts if facts is not None else salvage_leaf(reply.raw), len(shown))
    texts = [nodes.truncate_words(sn["text"], ctx.max_passage_words) for sn in shown]
    update.update(
        extracted_info=items,
        knowledge_tokens=sum(estimate_tokens(t) for t in texts),
        llm_calls_by_kind={"leaf": 1},
    )
    return update


async def verify_nli(state: State, runtime: Runtime[Context], deps: MigresDeps) -> dict[str, Any]:
    """Keep the new facts a cited snippet entails (all of them with ``verifier="off"``).

    Reads: `extracted_info`, `known_info`, `leaf_passages`, `iterations`; writes: `verified_info`,
    `trace`, `llm_calls_by_kind`.
    """
    ctx = runtime.context
    check: Verifier | None = deps.fact_verifier
    if check is None and ctx.verifier == "llm":
        check = LLMVerifier(await deps.achat(ctx))
    known = {norm_fact(k) for k in state.known_info}
    accepted: list[InfoItem] = []
    rejected: list[str] = []
    checks = 0
    for item in state.extracted_info:
        key = norm_fact(item["info"])
        if key in known:  # already known: it would not be added, so do not pay to check it
            continue
        ok = check is None
        if check is not None:  # accepted at the first cited snippet that entails it
            for idx in item["support_passages"]:
                checks += 1
                if await entailed(check, state.leaf_passages[idx], item["info"], state.iterations):
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


def update_evidence_pool(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Add the verified facts to the known information, with the passages behind them.

    Reads: `verified_info`, `known_info`, `known_sources`, `leaf_passages`, `seen_counts`,
    `evidence`, `known_info_len_at_round_start`, `iterations`; writes: `known_info`,
    `known_sources`, `seen_counts`, `evidence`, `new_info_this_round`, `passages_per_round`.
    """
    known = list(state.known_info)
    sources = [list(s) for s in state.known_sources[: len(known)]]
    sources += [[] for _ in range(len(known) - len(sources))]
    keys = {norm_fact(k) for k in known}
    cited: set[int] = set()
    for item in state.verified_info:
        key = norm_fact(item["info"])
        if key in keys:
            continue
        known.append(item["info"])
        keys.add(key)
        cited.update(item["support_passages"])
        support = [state.leaf_passages[i] for i in item["support_passages"]]
        sources.append(list(dict.fromkeys(sn["id"] for sn in support if sn["source"] != "llm")))
    seen = dict(state.seen_counts)
    new: list[Evidence] = []
    for idx in sorted(cited):
        sn = state.leaf_passages[idx]
        seen[sn["origin_text"]] = seen.get(sn["origin_text"], 0) + 1
        new.append(
            carry_metadata(
                Evidence(
                    id=sn["id"],
                    title=sn["title"],
                    text=sn["text"],
                    source="llm" if sn["source"] == "llm" else runtime.context.retrieval_mode,
                    score=float(sn["score"] or 0.0),
                    round=state.iterations,
                ),
                sn,
            )
        )
    evidence, _ = nodes.update_evidence_pool(
        state.evidence, new, key=lambda e: (e["id"], e["text"])
    )
    added = len(known) - state.known_info_len_at_round_start
    emit(round=state.iterations, added=added, known=len(known))
    return {
        "known_info": known,
        "known_sources": sources,
        "seen_counts": seen,
        "evidence": evidence,
        "new_info_this_round": added,
        "passages_per_round": [len(state.leaf_passages)],
    }


async def _pool_answer(
    state: State, ctx: Context, deps: Deps, *, call: str
) -> tuple[FinalReply | MainReply | None, str, list[TokenLogprob] | None]:
    """P5 over the known facts: the parsed reply (None if unparseable), its cleaned answer
    text ("" when there is none) and, with answer selection on, the reply's token logprobs.

    With ``llm_knowledge`` off and no retrieved fact in the pool, the answer comes from the
    first passages the leaf was shown (those of the question itself), not from the model's
    memory: the paper's P5 falls back to the model's knowledge, which the switch turns off.
    """
    if ctx.task_type == "strategyqa":
        name, fields = "final_yesno", {"known_info": known_passages(state)}
    elif not ctx.llm_knowledge and state.question_snippets and not retrieved_facts(state, ctx):
        items = [snippet_item(sn) for sn in state.question_snippets]
        passages = nodes.render_passages(items, FORMATS["answer"], max_words=ctx.max_passage_words)
        name, fields = "final_passages", {"passages": passages}
    else:
        name, fields = "final", {"known_info": known_passages(state)}
    llm = await deps.achat(ctx)
    reply = await answer_structured(
        llm,
        prompt(name, ctx).render(**fields, question=state.question),
        FinalReply,
        ctx,
        default=FinalReply(),
        max_tokens=ctx.judge_max_tokens,
        call=call,
    )
    value: FinalReply | MainReply | None = reply.value
    if reply.path == "default":
        value = salvage_main(reply.raw)
    text = clean_answer_text(value.answer.text) if value is not None else ""
    return value, text, reply.tokens


# -- judge_missing: the main module, then the sufficiency decision -------------------------------
@dataclasses.dataclass(frozen=True)
class _Candidate:
    """The answer a judged round would stop with, and where it comes from."""

    text: str
    confidence: int
    explanation: str
    source: str  # "judge" (the main module's answer) or "final" (the final-answer prompt)
    tokens: list[TokenLogprob] | None = None  # its reply's token logprobs (answer selection)


def _skipped_judge(state: State, ctx: Context, rounds: int) -> dict[str, Any] | None:
    """The skip rule: with ``skip_judge_if_no_new_info``, a round after the first that added no
    fact is not judged; the loop continues (decision path ``rule``, the candidate answer so far
    recorded) without a model call. Returns that round's update, or None when the judge runs."""
    if not (ctx.skip_judge_if_no_new_info and rounds > 1 and state.new_info_this_round == 0):
        return None
    nodes.log_decision(
        "sufficiency",
        rounds,
        "continue",
        path="rule",
        threshold=ctx.sufficiency_threshold,
        answer=state.candidate_answer or None,
    )
    return {
        "judge_rounds": rounds,
        "trace": [{"node": "judge_missing", "event": "skipped", "reason": "no new facts"}],
    }


async def _ask_judge(
    state: State, ctx: Context, llm: LLM
) -> tuple[RenderedPrompt, Structured[MainReply], Judgement]:
    """The main call over the known facts (``main``, ``main_answer_first`` in the paper's
    field order, or ``main_yesno`` for StrategyQA): its messages, its reply (raw text; token
    logprobs with answer selection on) and its verdict (what is missing, an explanation, an
    answer or "unanswerable")."""
    if ctx.task_type == "strategyqa":
        name = "main_yesno"
    else:
        name = "main_answer_first" if ctx.judge_format == "answer_first" else "main"
    messages = prompt(name, ctx).render(known_info=known_passages(state), question=state.question)
    default = MainReply(answer=AnswerField(text="unanswerable"))
    if name == "main_answer_first":  # the same fields in the paper's order, read as one verdict
        first = await answer_structured(
            llm, messages, AnswerFirstReply, ctx, default=AnswerFirstReply(**default.model_dump()),
            max_tokens=ctx.judge_max_tokens, call="main",
        )  # fmt: skip
        value = MainReply.model_validate(first.value.model_dump())
        reply = Structured(value, first.path, first.raw, first.tokens)
    else:
        reply = await answer_structured(
            llm, messages, MainReply, ctx, default=default, max_tokens=ctx.judge_max_tokens,
            call="main",
        )  # fmt: skip
    return messages, reply, _verdict(reply)


def _verdict(reply: Structured[MainReply]) -> Judgement:
    """The salvage: the parsed reply's verdict, else that of the key-scan salvage of its raw
    text; a reply neither can read gives a verdict with ``parsed_ok`` False."""
    if reply.path != "default":
        return judgement(reply.value)
    salvaged = salvage_main(reply.raw)
    return judgement(salvaged or reply.value, parsed_ok=salvaged is not None)


async def _ask_sufficiency(
    state: State, ctx: Context, llm: LLM, messages: RenderedPrompt, raw: str, verdict: Judgement
) -> nodes.Reading | None:
    """The follow-up question: after the judge's reply, "is the information enough?" as a
    forced Yes/No choice, read as p = P(Yes). Not asked (None) when the verdict was unreadable
    or the pool holds no retrieved fact."""
    if not verdict["parsed_ok"] or not retrieved_facts(state, ctx):
        return None
    follow = follow_up(messages, raw.strip() or "{}", PROMPTS["sufficiency"].render())
    choice = await llm.achoose(follow, ["Yes", "No"], default="No", call="sufficiency")
    return nodes.read_choice(choice, "Yes")


async def _sufficiency(
    state: State, ctx: Context, llm: LLM, messages: RenderedPrompt, raw: str, verdict: Judgement
) -> tuple[nodes.Reading, bool, bool]:
    """(the reading, stop, whether the Yes/No was asked) of a judged round. ``stop_rule="answered"`` (the paper): stop when
    the main call answered instead of saying "unanswerable" (path ``verdict``, no p, no call).
    ``probability``: the follow-up Yes/No (:func:`_ask_sufficiency`) against
    ``sufficiency_threshold``; not asked for a reply nothing could read (path ``default``) or
    a pool with no retrieved fact (``rule``). A calibration run never stops."""
    if ctx.stop_rule == "answered":
        answered = verdict["parsed_ok"] and verdict["answered"]
        return nodes.Reading(None, "verdict", answered), answered and not ctx.calibration, False
    asked = await _ask_sufficiency(state, ctx, llm, messages, raw, verdict)
    reading = (
        asked
        if asked is not None
        else nodes.Reading(None, "rule" if verdict["parsed_ok"] else "default", None)
    )
    stop = nodes.should_stop(
        reading.p,
        ctx.sufficiency_threshold,
        calibration=ctx.calibration,
        says_stop=reading.says_stop,
        no_logprobs=ctx.no_logprobs,
    )
    return reading, stop, asked is not None


async def _candidate_answer(
    state: State,
    ctx: Context,
    deps: Deps,
    verdict: Judgement,
    stop: bool,
    tokens: list[TokenLogprob] | None,
) -> _Candidate:
    """The candidate answer: the judge's own (``tokens``: its reply's logprobs); when it said
    "unanswerable" and the loop stops (or at every judged round of a calibration run), the
    final-answer prompt's over the pool ("" when neither gives one)."""
    judged = _Candidate(
        verdict["answer_text"] if verdict["answered"] else "",
        verdict["confidence"],
        verdict["explanation"],
        "judge",
        tokens,
    )
    if judged.text or not (stop or ctx.calibration):
        return judged
    final, text, tokens = await _pool_answer(state, ctx, deps, call="candidate")
    if final is None:
        return dataclasses.replace(judged, text=text, source="final", tokens=tokens)
    return _Candidate(text, final.answer.confidence, final.explanation, "final", tokens)


def _judged_update(
    state: State,
    rounds: int,
    verdict: Judgement,
    reading: nodes.Reading,
    stop: bool,
    candidate: _Candidate,
    calls: dict[str, int],
) -> dict[str, Any]:
    """The trace and update of a judged round: its count, calls by kind, candidate answer and
    trace event; on a stop the answer with its confidence, explanation and probability
    (``answer_p``, with answer selection on; ``stop_reason`` ``answered``), else what is
    missing (the judge's words; when it names nothing, the previous missing information or the
    question)."""
    update: dict[str, Any] = {
        "judge_rounds": rounds,
        "llm_calls_by_kind": calls,
        "candidate_answer": candidate.text,
        "trace": [
            {
                "node": "judge_missing",
                "round": rounds,
                "answered": verdict["answered"],
                "p_sufficient": reading.p,
                "path": reading.path,
                "stop": stop,
                "answer_from": candidate.source,
            }
        ],
    }
    if stop:
        update.update(
            answer=candidate.text,
            confidence=candidate.confidence,
            explanation=candidate.explanation,
            status="answered",
            stop_reason="answered",
            **scored_update(candidate.text, candidate.tokens),
        )
    else:
        missing = verdict["missing_information"]
        if missing.strip().lower() in ("", "none"):
            missing = state.missing_info or state.question
        update["missing_info"] = missing
    return update


async def judge_missing(state: State, runtime: Runtime[Context], deps: Deps) -> dict[str, Any]:
    """The main module, then the sufficiency decision.

    The main call writes what is missing, an explanation and an answer (or "unanswerable").
    The loop then stops on a forced Yes/No choice asked as a follow-up turn ("is the
    information enough?"): p = P(Yes) from first-token logprobs, stop iff p >=
    ``sufficiency_threshold``. No probability (no logprobs, an unreadable choice), an
    unreadable judge reply, a pool with no retrieved fact, a skipped judge, or a calibration
    run: continue. A stop whose judge said "unanswerable" takes its answer from the
    final-answer prompt; calibration runs get that answer at every judged round, so that
    ``gaprag calibrate`` can replay any threshold from the records.

    Reads: `question`, `known_info`, `known_sources`, `missing_info`, `judge_rounds`,
    `iterations`; writes: `judge_rounds`, `llm_calls_by_kind`, `candidate_answer`, `trace`, and
    on a stop `answer`, `confidence`, `explanation`, `status`, `stop_reason`, `answer_p`, else
    `missing_info`.
    """
    ctx = runtime.context
    rounds = state.judge_rounds + 1
    skipped = _skipped_judge(state, ctx, rounds)
    if skipped is not None:
        return skipped
    llm = await deps.achat(ctx)
    messages, reply, verdict = await _ask_judge(state, ctx, llm)
    calls: dict[str, int] = {"main": 1}
    reading, stop, asked = await _sufficiency(state, ctx, llm, messages, reply.raw, verdict)
    if asked:
        calls["sufficiency"] = 1
    candidate = await _candidate_answer(state, ctx, deps, verdict, stop, reply.tokens)
    if candidate.source == "final":
        calls["candidate"] = 1
    stop = stop and bool(candidate.text)
    nodes.log_decision(
        "sufficiency",
        rounds,
        "stop" if stop else "continue",
        p=reading.p,
        path=reading.path,
        threshold=None if ctx.stop_rule == "answered" else ctx.sufficiency_threshold,
        answer=candidate.text or None,
    )
    update = _judged_update(state, rounds, verdict, reading, stop, candidate, calls)
    emit(
        round=state.iterations,
        answered=stop,
        p_sufficient=reading.p,
        missing=update.get("missing_info"),
    )
    return update


async def regenerate_keywords(
    state: State, runtime: Runtime[Context], deps: Deps
) -> dict[str, Any]:
    """New queries for the missing information, none repeating an earlier one.

    Reads: `question`, `query_history`, `known_info`, `known_sources`, `missing_info`, `iterations`;
    writes: `pending_queries`, `query_history`, `llm_calls_by_kind`.
    """
    ctx = runtime.context
    history = state.query_history or [state.question]
    llm = await deps.achat(ctx)
    text = await llm.agenerate(
        prompt("query", ctx).render(
            question=state.question,
            history=" ".join(history),
            known_info=known_passages(state),
            missing_info=state.missing_info or state.question,
        ),
        max_tokens=ctx.query_max_tokens,
    )
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
        "pending_queries": queries,
        "query_history": new_history,
        "llm_calls_by_kind": {"query": 1},
    }


async def generate_answer(state: State, runtime: Runtime[Context], deps: Deps) -> dict[str, Any]:
    """The forced answer when the loop ran out: one call over the known facts.

    That call is scored with answer selection on (``answer_p``). No call when the shared reader
    answers after this step.

    Reads: `question`, `known_info`, `known_sources`, `question_snippets`; writes: `answer`,
    `confidence`, `explanation`, `status`, `stop_reason`, `llm_calls_by_kind`, `answer_p`.
    """
    if nodes.reader_answers(runtime.context):  # the shared reader answers after this step
        return {"status": "forced", "stop_reason": "max_iterations"}
    value, text, tokens = await _pool_answer(state, runtime.context, deps, call="final")
    failed = not text
    return {
        **scored_update(text, tokens),
        "answer": "unanswerable" if failed else text,
        "confidence": value.answer.confidence if value is not None else -1,
        "explanation": value.explanation if value is not None else "",
        "status": "failed" if failed else "forced",
        "stop_reason": "max_iterations",
        "llm_calls_by_kind": {"final": 1},
    }


def finalize(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """The question's closing trace record: why it stopped, its status and its rounds.

    Reads: `stop_reason`, `status`, `judge_rounds`, `iterations`, `known_info`; writes: `trace`.
    """
    emit(done=True, stop_reason=state.stop_reason, iterations=state.iterations)
    return {
        "trace": [
            {
                "node": "finalize",
                "stop_reason": state.stop_reason,
                "status": state.status,
                "judge_rounds": state.judge_rounds,
                "retrieval_rounds": state.iterations,
                "known_info": len(state.known_info),
            }
        ]
    }


def gathered(state: State) -> nodes.Gathered:
    """For the ranked reader: the passages behind the known facts, the first snippets the
    question was shown and plain RAG's passages; the known facts and queries as the method's
    own text."""
    snippets = [
        Evidence(
            id=s["id"],
            title=s["title"],
            text=s["text"],
            source="corpus",
            score=float(s["score"] or 0.0),
            round=1,
        )
        for s in state.question_snippets
        if s["source"] != "llm"
    ]
    notes = [*state.known_info, *state.query_history]
    return nodes.Gathered([*state.evidence, *snippets, *state.gate_passages], notes)
