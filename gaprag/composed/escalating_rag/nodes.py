"""escalating_rag's nodes: plain RAG's scored answer, up to two method loops run as
subgraphs, and the choice among the candidates after each loop."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from gaprag.aio import sync_mode
from gaprag.composed.escalating_rag.context import Context
from gaprag.composed.escalating_rag.deps import EscalatingDeps
from gaprag.composed.escalating_rag.state import Candidate, State
from gaprag.llm import spend
from gaprag.nodes import choice as rules
from gaprag.nodes.decisions import log_decision
from gaprag.nodes.gate import GATE_STOP, gate, read_gate
from gaprag.progress import emit

#: settings of the run handed to each loop as they are: endpoint, model, store, filter,
#: behaviour without logprobs, calibration
PASSED = ("base_url", "model", "store", "filter", "no_logprobs", "calibration")
#: what a loop's run returns to its rung
LOOP_KEYS = (
    "answer",
    "stop_reason",
    "iterations",
    "queries",
    "evidence",
    "usage",
    "trace",
    "decisions",
    "answer_p",
    "retrieved_ids",
    "shown_ids",
)


def calls_left(ctx: Context) -> int:
    """LLM calls the question may still take under ``call_budget``."""
    ledger = spend.current()
    return ctx.call_budget - (ledger.calls if ledger is not None else 0)


async def plain_rag(
    state: State, runtime: Runtime[Context], deps: EscalatingDeps
) -> dict[str, Any]:
    """Plain RAG's answer and its confidence; confident, it ends the question.

    The shared gate: plain RAG's own request, scored. (``call_budget`` is the run's ledger's
    limit from its first step on: :func:`gaprag.nodes.wiring.run_limits`.)

    Reads: `question`; writes: `answer`, `evidence`, `queries`, `iterations`, `stop_reason`
    (when confident), `gate_passages`, `decisions`.
    """
    return await gate(state, runtime, deps)


def _plain_candidate(state: State) -> list[Candidate]:
    """Plain RAG's answer as the first candidate (as the gate recorded it), once."""
    said = read_gate(state.decisions, state.trace)
    if state.candidates or not said.answer:
        return []
    return [
        Candidate(
            method="standard_rag",
            answer=said.answer,
            p=said.p,
            llm_calls=1,
            stop_reason="answered",
            evidence=[],
        )
    ]


def _prefixed(records: list[dict[str, Any]], method: str) -> list[dict[str, Any]]:
    return [{**r, "node": f"{method}.{r.get('node', '')}"} for r in records]


async def _run_loop(
    state: State, runtime: Runtime[Context], deps: EscalatingDeps, method: str
) -> dict[str, Any]:
    """Run ``method``'s graph on the question (its gate off, its final answer scored) and
    add its answer as a candidate."""
    ctx = runtime.context
    plain = _plain_candidate(state)
    rung = state.rungs + 1
    left = calls_left(ctx)
    if not rules.may_start_loop(left):
        log_decision("escalate", rung, "skip", path="call_budget", threshold=float(left))
        return {"candidates": plain, "rungs": rung}
    emit(rung=rung, method=method)
    settings = {name: getattr(ctx, name) for name in PASSED}
    graph = deps.loops[method]
    run: dict[str, Any] = {
        "context": {**settings, "gate": "off", "answer_scoring": ctx.answer_scoring},
        "output_keys": list(LOOP_KEYS),
    }
    inputs = {"question": state.question}
    # a synchronous run runs its subgraph synchronously (no event loop to suspend on)
    out = graph.invoke(inputs, **run) if sync_mode() else await graph.ainvoke(inputs, **run)
    answer = str(out.get("answer") or "")
    scores = dict(out.get("answer_p") or {})
    p = scores.get(answer)
    if p is None and len(scores) == 1:  # the short-answer step cut the scored answer
        p = next(iter(scores.values()))
    usage = dict(out.get("usage") or {})
    candidate = Candidate(
        method=method,
        answer=answer,
        p=p,
        llm_calls=int(usage.get("llm_calls", 0)),
        stop_reason=str(out.get("stop_reason") or ""),
        evidence=list(out.get("evidence") or []),
    )
    return {
        "candidates": [*plain, candidate],
        "rungs": rung,
        "iterations": state.iterations + int(out.get("iterations") or 0),
        "queries": list(out.get("queries") or []),
        "usage": usage,
        "decisions": _prefixed(list(out.get("decisions") or []), method),
        "trace": _prefixed(list(out.get("trace") or []), method),
        "retrieved_ids": list(out.get("retrieved_ids") or []),
        "shown_ids": list(out.get("shown_ids") or []),
    }


async def first_loop(
    state: State, runtime: Runtime[Context], deps: EscalatingDeps
) -> dict[str, Any]:
    """The ``first_loop`` method's run, when plain RAG's answer is unsure.

    Reads: `question`, `decisions`, `trace`, `candidates`, `rungs`, `iterations`; writes:
    `candidates`, `rungs`, `iterations`, `queries`, `usage`, `decisions`, `trace`,
    `retrieved_ids`, `shown_ids`.
    """
    return await _run_loop(state, runtime, deps, runtime.context.first_loop)


async def second_loop(
    state: State, runtime: Runtime[Context], deps: EscalatingDeps
) -> dict[str, Any]:
    """The ``second_loop`` method's run, when the answer is still unsure.

    Reads: `question`, `candidates`, `rungs`, `iterations`; writes: `candidates`, `rungs`,
    `iterations`, `queries`, `usage`, `decisions`, `trace`, `retrieved_ids`, `shown_ids`.
    """
    return await _run_loop(state, runtime, deps, runtime.context.second_loop)


def ladder(ctx: Context) -> rules.Ladder:
    """The settings that decide the steps: the rungs' loops and the choice and stop rules."""
    return rules.Ladder(
        loops=tuple(m for m in (ctx.first_loop, ctx.second_loop) if m != "none"),
        answer_choice=ctx.answer_choice,
        choice_margin=ctx.choice_margin,
        escalate_p=ctx.escalate_threshold,
    )


def choose(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """The answer among every candidate so far; then stop or escalate.

    :func:`gaprag.nodes.choice.next_step`: the ``answer_choice`` rule (a candidate without an
    answer is left out), recorded as decision ``select``; the stop or the next loop, as
    decision ``escalate`` with the chosen answer's p and ``escalate_threshold``.

    Reads: `candidates`, `rungs`, `answer`; writes: `answer`, `evidence`, `chosen`,
    `stop_reason` (when it stops), `decisions`.
    """
    ctx = runtime.context
    kept = [c for c in state.candidates if c["answer"]]
    update: dict[str, Any] = {"answer": state.answer or ""}
    options = [rules.Candidate(c["answer"], c["p"]) for c in kept]
    ledger = spend.current()
    reached = ledger.limit() if ledger is not None else ""
    step = rules.next_step(options, state.rungs, ladder(ctx), calls_left(ctx), reached)
    chosen = step.choice or rules.Choice(-1, None, "rule")
    if step.choice is not None:
        winner = kept[chosen.index]
        log_decision(
            "select",
            state.rungs,
            winner["method"],
            p=chosen.p,
            path=chosen.path,
            answer=winner["answer"],
        )
        update = {
            "answer": winner["answer"],
            "chosen": {"method": winner["method"], "path": chosen.path},
        }
        if winner["evidence"]:
            update["evidence"] = winner["evidence"]
    why = step.stop_reason
    log_decision(
        "escalate",
        state.rungs,
        "stop" if why else "continue",
        p=chosen.p,
        path=chosen.path,
        threshold=ctx.escalate_threshold,
        answer=update.get("answer", state.answer),
    )
    if why:
        update["stop_reason"] = why
    return update


def confident(state: State) -> bool:
    """Whether plain RAG's answer ended the question."""
    return state.stop_reason == GATE_STOP
