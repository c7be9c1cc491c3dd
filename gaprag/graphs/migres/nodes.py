"""MIGRES's nodes, one function per graph node (see docs/methods/migres.md).

Each round: retrieve candidates for the pending queries; the knowledge filter keeps the
passages (and, inside them, the sentences) that clear delta; the leaf call extracts facts
citing the snippets they come from; each fact is verified against a cited snippet; new facts
join the known information. The judge sees only that pool and answers or says what is missing;
the query generator turns the missing information into new queries. When nothing clears the
filter, the LLM writes background from its own knowledge instead.
"""

from __future__ import annotations

import hashlib
from typing import Any

from langgraph.runtime import Runtime

from gaprag import nodes
from gaprag.accounting import estimate_tokens
from gaprag.aio import to_thread
from gaprag.deps import Deps
from gaprag.errors import deprecated_names
from gaprag.graphs.migres.context import Context, threshold
from gaprag.graphs.migres.deps import MigresDeps, scorer_for
from gaprag.graphs.migres.filter import knowledge_filter
from gaprag.graphs.migres.known_info import known_passages, retrieved_facts, seeds_for
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
from gaprag.graphs.migres.prompting import FORMATS, PROMPTS, prompt
from gaprag.graphs.migres.snippets import round_candidates, snippet_item, strip_markup
from gaprag.graphs.migres.state import InfoItem, Snippet, State
from gaprag.graphs.migres.verify import LLMVerifier, Verifier, entailed
from gaprag.progress import emit
from gaprag.prompts import follow_up
from gaprag.state.base import Evidence

#: names that moved out of this module: where they are now (deprecated aliases, one release)
_MOVED = {
    "SEED_FACTS": "gaprag.graphs.migres.known_info",
    "DEMOS": "gaprag.graphs.migres.prompting",
    "FEW_SHOT": "gaprag.graphs.migres.prompting",
    "WHOLE": "gaprag.graphs.migres.prompting",
    "RETRY_PREFIX": "gaprag.graphs.migres.snippets",
}

__getattr__ = deprecated_names(__name__, _MOVED, globals())


# -- nodes -----------------------------------------------------------------------------------
def init(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
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
            Evidence(
                id=sn["id"],
                title=sn["title"],
                text=sn["text"],
                source="llm" if sn["source"] == "llm" else runtime.context.retrieval_mode,
                score=float(sn["score"] or 0.0),
                round=state.iterations,
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
) -> tuple[FinalReply | MainReply | None, str]:
    """P5 over the known facts: the parsed reply (None if unparseable) and its cleaned answer
    text ("" when there is none).

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
    reply = await llm.astructured(
        prompt(name, ctx).render(**fields, question=state.question),
        FinalReply,
        default=FinalReply(),
        max_tokens=ctx.judge_max_tokens,
        call=call,
    )
    value: FinalReply | MainReply | None = reply.value
    if reply.path == "default":
        value = salvage_main(reply.raw)
    return value, clean_answer_text(value.answer.text) if value is not None else ""


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
    """
    ctx = runtime.context
    rounds = state.judge_rounds + 1
    t = ctx.sufficiency_threshold
    if ctx.skip_judge_if_no_new_info and rounds > 1 and state.new_info_this_round == 0:
        nodes.log_decision(
            "sufficiency",
            rounds,
            "continue",
            path="rule",
            threshold=t,
            answer=state.candidate_answer or None,
        )
        return {
            "judge_rounds": rounds,
            "trace": [{"node": "judge_missing", "event": "skipped", "reason": "no new facts"}],
        }
    llm = await deps.achat(ctx)
    messages = prompt("main_yesno" if ctx.task_type == "strategyqa" else "main", ctx).render(
        known_info=known_passages(state), question=state.question
    )
    reply = await llm.astructured(
        messages,
        MainReply,
        default=MainReply(answer=AnswerField(text="unanswerable")),
        max_tokens=ctx.judge_max_tokens,
        call="main",
    )
    if reply.path != "default":
        verdict = judgement(reply.value)
    else:  # the key-scan salvage of the raw reply
        salvaged = salvage_main(reply.raw)
        verdict = judgement(salvaged or reply.value, parsed_ok=salvaged is not None)
    calls: dict[str, int] = {"main": 1}
    p: float | None = None
    says: bool | None = None  # the judge's own Yes, where it answered without a probability
    path: str = "rule"  # nothing retrieved yet: never a model stop
    if not verdict["parsed_ok"]:  # a judge reply nothing could read: keep retrieving
        path = "default"
    elif retrieved_facts(state, ctx):
        follow = follow_up(messages, reply.raw.strip() or "{}", PROMPTS["sufficiency"].render())
        choice = await llm.achoose(follow, ["Yes", "No"], default="No", call="sufficiency")
        calls["sufficiency"] = 1
        p, path, says = nodes.read_choice(choice, "Yes")
    stop = nodes.should_stop(
        p, t, calibration=ctx.calibration, says_stop=says, no_logprobs=ctx.no_logprobs
    )
    answer = verdict["answer_text"] if verdict["answered"] else ""
    confidence, explanation, source = verdict["confidence"], verdict["explanation"], "judge"
    if not answer and (stop or ctx.calibration):
        final, answer = await _pool_answer(state, ctx, deps, call="candidate")
        if final is not None:
            confidence, explanation = final.answer.confidence, final.explanation
        calls["candidate"] = 1
        source = "final"
    stop = stop and bool(answer)
    nodes.log_decision(
        "sufficiency",
        rounds,
        "stop" if stop else "continue",
        p=p,
        path=path,
        threshold=t,
        answer=answer or None,
    )
    update: dict[str, Any] = {
        "judge_rounds": rounds,
        "llm_calls_by_kind": calls,
        "candidate_answer": answer,
        "trace": [
            {
                "node": "judge_missing",
                "round": rounds,
                "answered": verdict["answered"],
                "p_sufficient": p,
                "path": path,
                "stop": stop,
                "answer_from": source,
            }
        ],
    }
    if stop:
        update.update(
            answer=answer,
            confidence=confidence,
            explanation=explanation,
            status="answered",
            stop_reason="answered",
        )
    else:
        missing = verdict["missing_information"]
        if missing.strip().lower() in ("", "none"):
            missing = state.missing_info or state.question
        update["missing_info"] = missing
    emit(round=state.iterations, answered=stop, p_sufficient=p, missing=update.get("missing_info"))
    return update


async def regenerate_keywords(
    state: State, runtime: Runtime[Context], deps: Deps
) -> dict[str, Any]:
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
    if nodes.reader_answers(runtime.context):  # the shared reader answers after this step
        return {"status": "forced", "stop_reason": "max_iterations"}
    value, text = await _pool_answer(state, runtime.context, deps, call="final")
    failed = not text
    return {
        "answer": "unanswerable" if failed else text,
        "confidence": value.answer.confidence if value is not None else -1,
        "explanation": value.explanation if value is not None else "",
        "status": "failed" if failed else "forced",
        "stop_reason": "max_iterations",
        "llm_calls_by_kind": {"final": 1},
    }


def finalize(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
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
