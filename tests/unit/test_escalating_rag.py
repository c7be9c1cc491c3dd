"""escalating_rag: plain RAG once; when unsure, the first loop; when still unsure, the second;
the answer chosen among every candidate, within the call budget."""

from __future__ import annotations

import math
from typing import Any

import pytest

from gaprag import build_graph
from gaprag.llm.client import LLM
from gaprag.nodes.choice import Candidate, Rule, choose_answer
from gaprag.stores.store import Store
from gaprag.testing import ScriptedChatModel
from tests.methods.escalating_rag import SURE, UNSURE, Q, model_for


def escalate(
    store: Store,
    plain: list[list[tuple[str, float]]] = UNSURE,
    loop: str = "Lyon",
    loop_logprob: float = -1.0,
    **options: Any,
) -> tuple[dict[str, Any], ScriptedChatModel]:
    model = model_for(plain, loop, loop_logprob)
    options = {
        "gate_threshold": -0.5,
        "first_loop": "ircot",
        "second_loop": "missing_knowledge",
        **options,
    }
    graph = build_graph(
        "escalating_rag",
        llm=LLM(model, supports_logprobs=True),
        retriever=store,
        profile=None,
        **options,
    )
    return graph.invoke({"question": Q}), model


def decisions(out: dict[str, Any], node: str) -> list[dict[str, Any]]:
    return [dict(d) for d in out["decisions"] if d["node"] == node]


def test_a_confident_plain_answer_ends_the_question_in_one_call(store: Store) -> None:
    out, _ = escalate(store, plain=SURE)
    assert out["answer"] == "Paris" and out["stop_reason"] == "gate_confident"
    assert out["usage"]["llm_calls"] == 1 and out["candidates"] == []


def test_an_unsure_plain_answer_runs_the_first_loop_and_its_confident_answer_wins(
    store: Store,
) -> None:
    out, _ = escalate(store, loop_logprob=-0.05, escalate_threshold=0.9)
    methods = [c["method"] for c in out["candidates"]]
    assert methods == ["standard_rag", "ircot"] and out["answer"] == "Lyon"
    assert out["stop_reason"] == "confident"
    (chosen,) = decisions(out, "select")
    assert chosen["decision"] == "ircot" and chosen["p"] == pytest.approx(math.exp(-0.05), 1e-4)
    (step,) = decisions(out, "escalate")
    assert step["decision"] == "stop" and step["threshold"] == 0.9
    assert any(d["node"].startswith("ircot.") for d in out["decisions"])


def test_an_unsure_loop_answer_escalates_to_the_second_loop(store: Store) -> None:
    out, _ = escalate(store, loop_logprob=-1.0, escalate_threshold=0.9)
    methods = [c["method"] for c in out["candidates"]]
    assert methods == ["standard_rag", "ircot", "missing_knowledge"]
    first, last = decisions(out, "escalate")
    assert first["decision"] == "continue" and last["decision"] == "stop"
    assert out["stop_reason"] == "last_loop"
    calls = sum(c["llm_calls"] for c in out["candidates"])
    assert out["usage"]["llm_calls"] >= calls


def test_a_loop_answer_that_agrees_with_plain_rag_ends_the_question(store: Store) -> None:
    out, _ = escalate(store, loop="Paris", loop_logprob=-2.0, escalate_threshold=0.99)
    assert out["stop_reason"] == "agreed" and out["answer"] == "Paris"
    assert [c["method"] for c in out["candidates"]] == ["standard_rag", "ircot"]


def test_no_second_loop_stops_after_the_first(store: Store) -> None:
    out, _ = escalate(store, loop_logprob=-1.0, escalate_threshold=0.99, second_loop="none")
    assert out["stop_reason"] == "last_loop" and len(out["candidates"]) == 2


def test_the_call_budget_bounds_the_question(store: Store) -> None:
    out, _ = escalate(store, loop_logprob=-1.0, escalate_threshold=1.5, call_budget=3)
    assert out["usage"]["llm_calls"] <= 3
    assert [c["method"] for c in out["candidates"]] == ["standard_rag", "ircot"]
    assert out["stop_reason"] == "call_budget"


def test_a_budget_too_small_for_a_loop_keeps_plain_rags_answer(store: Store) -> None:
    out, _ = escalate(store, call_budget=2, escalate_threshold=1.5)
    assert out["answer"] == "Paris" and out["usage"]["llm_calls"] <= 2


@pytest.mark.parametrize(
    ("candidates", "rule", "chosen", "path"),
    [
        ([("Paris", 0.2), ("Lyon", 0.5), ("paris", 0.1)], "logprob", 2, "agreement"),
        ([("Paris", 0.9), ("Lyon", 0.5)], "logprob", 0, "logprobs"),
        ([("Paris", 0.4), ("Lyon", 0.5), ("Nice", 0.3)], "logprob", 1, "logprobs"),
        ([("Paris", 0.9), ("Lyon", None)], "logprob", 1, "agreement_fallback"),
        ([("Paris", 0.9), ("Lyon", 0.1)], "agreement", 1, "agreement"),
        ([("Paris", 0.9), ("Lyon", 0.1)], "off", 1, "rule"),
    ],
)
def test_the_answer_is_chosen_by_agreement_first_then_probability(
    candidates: list[tuple[str, float | None]], rule: Rule, chosen: int, path: str
) -> None:
    choice = choose_answer([Candidate(a, p) for a, p in candidates], rule, 0.1)
    assert (choice.index, choice.path) == (chosen, path)


def test_an_async_run_escalates_as_a_sync_run_does(store: Store) -> None:
    import asyncio

    model = model_for(UNSURE, "Lyon", -1.0)
    graph = build_graph(
        "escalating_rag",
        llm=LLM(model, supports_logprobs=True),
        retriever=store,
        profile=None,
        gate_threshold=-0.5,
        second_loop="missing_knowledge",
        escalate_threshold=0.9,
    )
    out = asyncio.run(graph.ainvoke({"question": Q}))
    sync, _ = escalate(store, escalate_threshold=0.9)
    assert [c["method"] for c in out["candidates"]] == [c["method"] for c in sync["candidates"]]
    assert (
        out["answer"] == sync["answer"] and out["usage"]["llm_calls"] == sync["usage"]["llm_calls"]
    )


def test_the_escalation_order_is_the_settings_order(store: Store) -> None:
    out, _ = escalate(
        store,
        first_loop="missing_knowledge",
        second_loop="ircot",
        escalate_threshold=1.5,
        call_budget=20,
    )
    assert [c["method"] for c in out["candidates"]] == [
        "standard_rag",
        "missing_knowledge",
        "ircot",
    ]
    assert next(d["node"].split(".")[0] for d in out["decisions"] if "." in d["node"]) == (
        "missing_knowledge"
    )


def test_the_recursion_limit_covers_every_graph_it_composes(store: Store) -> None:
    graph = build_graph("escalating_rag", llm=ScriptedChatModel(default="Paris"), retriever=store)
    own = int((graph.config or {})["recursion_limit"])
    for method in ("ircot", "migres", "rfm_rag", "iterkey", "missing_knowledge"):
        inner = build_graph(method, llm=ScriptedChatModel(default="Paris"), retriever=store)
        assert own >= int((inner.config or {})["recursion_limit"]), method


def test_building_the_composed_graph_without_its_loops_says_how_to_build_it() -> None:
    from gaprag.composed.escalating_rag import EscalatingDeps, build
    from gaprag.errors import InputError

    with pytest.raises(InputError, match="no compiled graph for") as err:
        build(EscalatingDeps())
    assert "build_graph('escalating_rag')" in (err.value.hint or "")
