"""ircot: interleaved retrieval and chain of thought, with a scripted model over a tiny store."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.runtime import Runtime

from gaprag import build_graph
from gaprag.deps import Deps
from gaprag.graphs.ircot.context import Context
from gaprag.graphs.ircot.nodes import final_answer, first_sentence, reason
from gaprag.graphs.ircot.state import State
from gaprag.llm.client import LLM
from gaprag.stores.store import Store
from gaprag.testing import ScriptedChatModel

Q = "Who built the tower in the capital of France?"


def run(store: Store, *replies: str, **options: Any) -> tuple[dict[str, Any], ScriptedChatModel]:
    model = ScriptedChatModel(replies=list(replies), default="Unknown.")
    out = build_graph("ircot", llm=model, retriever=store, **options).invoke({"question": Q})
    return dict(out), model


def test_each_thought_retrieves_new_passages_until_the_answer_is_stated(store: Store) -> None:
    out, model = run(
        store,
        "The capital of France is Paris.",
        "The Eiffel Tower in Paris was built by Gustave Eiffel. So the answer is: Gustave Eiffel.",
        top_k=2,
        retrieval_mode="dense",
    )
    assert out["answer"] == "Gustave Eiffel" and out["stop_reason"] == "answered"
    assert out["queries"] == [Q, "The capital of France is Paris."]
    assert out["iterations"] == 2 and len(model.calls) == 2
    ids = [e["id"] for e in out["evidence"]]
    assert len(ids) == len(set(ids)) == 4  # the second step added two passages not seen before
    assert [e["round"] for e in out["evidence"]] == [1, 1, 2, 2]
    assert "Reasoning so far: The capital of France is Paris." in model.prompts()[1]
    assert [d["decision"] for d in out["decisions"]] == ["retrieve", "answer"]


def test_the_loop_is_bounded_and_then_answers_in_one_more_call(store: Store) -> None:
    out, model = run(store, "Step one.", "Step two.", "Eiffel", max_steps=2)
    assert out["stop_reason"] == "max_iterations" and out["answer"] == "Eiffel"
    assert out["iterations"] == 2 and len(model.calls) == 3
    assert "Reasoning: Step one. Step two." in model.prompts()[-1]


def test_an_empty_reply_cannot_loop_forever(store: Store) -> None:
    out, model = run(store, "", "", "", "x", max_steps=3)
    assert out["iterations"] == 3 and len(model.calls) == 4


def test_thoughts_parse() -> None:
    assert final_answer("So the answer is: Gustave Eiffel.") == "Gustave Eiffel"
    assert final_answer("The tower is in Paris.") is None
    assert first_sentence("Paris is the capital. Then more.\nNoise") == "Paris is the capital."


def test_passages_in_the_prompt_are_shown(store: Store) -> None:
    out, _ = run(store, "So the answer is: Eiffel.", top_k=3, max_passages=2)
    assert len(out["retrieved_ids"]) == 3
    assert out["shown_ids"] == out["retrieved_ids"][:2]


def test_a_second_question_on_a_thread_starts_clean(store: Store) -> None:
    model = ScriptedChatModel(
        rules=[
            ("Question: Who built", "So the answer is: Eiffel."),
            ("Question: Who wrote", "So the answer is: Shakespeare."),
        ]
    )
    graph = build_graph("ircot", llm=model, retriever=store, checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    graph.invoke({"question": Q}, config)
    second = graph.invoke({"question": "Who wrote Hamlet?"}, config)
    assert second["answer"] == "Shakespeare" and second["queries"] == ["Who wrote Hamlet?"]
    assert second["thoughts"] == ["So the answer is: Shakespeare."] and second["iterations"] == 1
    assert second["usage"]["llm_calls"] == 1 and len(second["decisions"]) == 1


def test_ainvoke_matches_invoke_and_a_node_runs_alone(store: Store) -> None:
    graph = build_graph(
        "ircot", llm=ScriptedChatModel(default="So the answer is: X."), retriever=store
    )
    sync = dict(graph.invoke({"question": Q}))
    asyn = dict(asyncio.run(graph.ainvoke({"question": Q})))
    for out in (sync, asyn):
        out["usage"].pop("wall_s")
    assert sync == asyn
    state = State(question=Q, evidence=sync["evidence"])
    deps = Deps.of(llm=ScriptedChatModel(default="Paris is the capital. More."))
    update = asyncio.run(reason(state, Runtime(context=Context()), deps))
    assert update == {"thoughts": ["Paris is the capital."], "last_step_empty": False}


PLAIN = "Use the passages below to answer the question."  # plain RAG's prompt (the gate's)
SHORT = "using the given passages and reasoning"  # IRCoT's answer prompt, after an unfinished chain


@pytest.mark.parametrize("select", ["off", "logprob"])
def test_the_answer_after_an_unfinished_chain_is_scored_for_selection(
    store: Store, select: str
) -> None:
    model = ScriptedChatModel(
        rules=[(PLAIN, "Paris"), ("Next sentence:", "Step one."), (SHORT, "Gustave Eiffel")],
        reply_logprobs={
            "Paris": [[("Paris", -2.0)]],  # the gate is unsure: the loop runs
            "Gustave Eiffel": [[("Gustave", -0.2)], [(" Eiffel", -0.4)]],
        },
    )
    graph = build_graph(
        "ircot", llm=LLM(model, supports_logprobs=True), retriever=store, max_steps=2,
        gate="logprob_mean", gate_threshold=-0.5, answer_scoring=select, answer_choice=select,
    )  # fmt: skip
    out = graph.invoke({"question": Q})
    assert out["answer"] == "Gustave Eiffel" and out["stop_reason"] == "max_iterations"
    (answering,) = [c for c in model.calls if SHORT in c["messages"][0][1]]
    selections = [d for d in out["decisions"] if d["node"] == "select"]
    if select == "off":
        assert not answering["kwargs"].get("logprobs") and not selections
        return
    assert answering["kwargs"]["logprobs"]
    (decision,) = selections
    assert decision["decision"] == "loop" and decision["path"] == "logprobs"
    assert decision["p"] == pytest.approx(math.exp(-0.3), rel=1e-4)
