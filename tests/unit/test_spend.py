"""A run's spend is kept by the LLM layer, before every call, whatever its state says.

A caller who writes the state (LangGraph's ``Command(update=..., goto=...)``, a thread-state
update) controls its counters and its ``usage``; none of them bounds the run: the LLM layer's
ledger counts the calls and tokens really spent and the times each node ran, and refuses a
call the run's token budget cannot cover before it is sent.
"""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from gaprag import build_graph
from gaprag.accounting import estimate_tokens
from gaprag.context import MAX_PASSAGES
from gaprag.errors import InputError
from gaprag.llm import spend
from gaprag.operator import OperatorPolicy
from gaprag.stores.embeddings import HashingEmbedder
from gaprag.stores.store import Store
from gaprag.testing import ScriptedChatModel

Q = "Who built the Eiffel Tower?"
THOUGHT = "The tower stands in a city of many towers."  # never states an answer: IRCoT loops
FORGED_USAGE = {
    "llm_calls": -1000, "prompt_tokens": -1_000_000_000, "completion_tokens": 0,
    "retrieval_calls": 0, "wall_s": 0.0,
}  # fmt: skip


def served_tokens(llm: ScriptedChatModel) -> int:
    """Tokens the fake endpoint really served, as it reports them (characters / 4)."""
    return sum(
        sum(estimate_tokens(text) for _, text in c["messages"]) + estimate_tokens(c["reply"])
        for c in llm.calls
    )


def forged_ircot(llm: ScriptedChatModel, store: Store, policy: OperatorPolicy) -> dict[str, Any]:
    """IRCoT run from a state a caller wrote: counters and usage forged, a recursion limit of
    500 (the graph's own is far below)."""
    graph = build_graph(
        "ircot", llm=llm, retriever=store, checkpointer=InMemorySaver(), policy=policy
    )
    config: Any = {"configurable": {"thread_id": "forged"}, "recursion_limit": 500}
    update = {"question": Q, "iterations": -40, "usage": FORGED_USAGE}
    graph.update_state(config, update, as_node="gate")  # the gate's "go on": retrieve next
    return dict(graph.invoke(None, config))


def test_forged_counters_and_usage_do_not_lift_the_token_budget(many_docs_store: Store) -> None:
    llm = ScriptedChatModel(default=THOUGHT)
    out = forged_ircot(llm, many_docs_store, OperatorPolicy(token_budget=3000))
    assert out["stop_reason"] == "token_budget"
    assert 0 < served_tokens(llm) <= 3000


def test_forged_counters_end_the_loop_near_its_bound(many_docs_store: Store) -> None:
    """Without any budget the loop still ends by its own bound (5 steps), within two rounds
    of it, with a true stop_reason and no recursion error at the caller's limit."""
    free_llm, llm = ScriptedChatModel(default=THOUGHT), ScriptedChatModel(default=THOUGHT)
    free = build_graph("ircot", llm=free_llm, retriever=many_docs_store).invoke({"question": Q})
    out = forged_ircot(llm, many_docs_store, OperatorPolicy())
    assert free["stop_reason"] == out["stop_reason"] == "max_iterations"
    assert len(free_llm.calls) <= len(llm.calls) <= len(free_llm.calls) + 2


def test_one_step_cannot_spend_past_the_budget(short_docs_store: Store) -> None:
    """The ranked reader with the LLM ranker makes one call per gathered passage in one step
    (here the most passages the settings allow); the budget holds inside the step."""
    llm = ScriptedChatModel(default="Yes")
    graph = build_graph(
        "missing_knowledge", llm=llm, retriever=short_docs_store,
        policy=OperatorPolicy(token_budget=3000),
    )  # fmt: skip
    most = MAX_PASSAGES
    context = {"first_k": most, "reader": "ranked", "reader_ranker": "llm", "reader_budget": most}
    out = graph.invoke({"question": Q}, context=context)
    assert out["stop_reason"] == "token_budget"
    assert out["usage"]["llm_calls"] == len(llm.calls)
    assert 0 < served_tokens(llm) <= 3000
    stops = [t["node"] for t in out["trace"] if t.get("event") == "spend_limit"]
    assert stops == ["reader"]  # stopped inside the step, between two of its calls


def test_a_resumed_review_spends_from_the_same_budget(store: Store) -> None:
    """RAG-EF's run interrupted for the expert's review and resumed is one run: the resume
    starts from what the first part spent."""
    llm = ScriptedChatModel(default="Gustave Eiffel")
    free = build_graph("rag_ef", llm=ScriptedChatModel(default="Gustave Eiffel"),
                       retriever=store, checkpointer=InMemorySaver(), review=True)  # fmt: skip
    config: Any = {"configurable": {"thread_id": "review"}}
    first = free.invoke({"question": Q}, config)
    first_tokens = first["usage"]["prompt_tokens"] + first["usage"]["completion_tokens"]
    # a budget the first part fits in, and the resumed part would not fit in on its own
    graph = build_graph("rag_ef", llm=llm, retriever=store, checkpointer=InMemorySaver(),
                        review=True, policy=OperatorPolicy(token_budget=first_tokens + 1))  # fmt: skip
    graph.invoke({"question": Q}, config)
    calls = len(llm.calls)
    out = graph.invoke(Command(resume={"answer": "Eiffel", "chunk": "Eiffel built it."}), config)
    assert out["stop_reason"] == "token_budget"
    assert len(llm.calls) == calls  # the resumed part could afford no call


def test_a_new_question_on_the_thread_gets_a_new_budget(store: Store) -> None:
    llm = ScriptedChatModel(default="Gustave Eiffel")
    graph = build_graph("standard_rag", llm=llm, retriever=store, checkpointer=InMemorySaver(),
                        policy=OperatorPolicy(token_budget=2000))  # fmt: skip
    config: Any = {"configurable": {"thread_id": "two-questions"}}
    first = graph.invoke({"question": Q}, config)
    second = graph.invoke({"question": "Who designed the Eiffel Tower?"}, config)
    assert first["stop_reason"] != "token_budget" and second["stop_reason"] != "token_budget"


@pytest.mark.parametrize("node", ["generate_answer", "reason", "retrieve"])
def test_a_question_written_into_any_node_is_validated(store: Store, node: str) -> None:
    llm = ScriptedChatModel(default=THOUGHT)
    graph = build_graph("ircot", llm=llm, retriever=store, checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": f"big-{node}"}}
    with pytest.raises(InputError, match="characters long"):
        graph.invoke(Command(update={"question": "x" * 1_000_000}, goto=node), config)
    assert llm.calls == []


def test_ledger_holds_concurrent_calls_against_the_budget() -> None:
    ledger = spend.Ledger(token_budget=100)
    held = [ledger.admit(40), ledger.admit(40)]
    with pytest.raises(spend.SpendLimit, match="token_budget"):
        ledger.admit(40)  # 80 held + 40 > 100, though nothing was spent yet
    ledger.settle(held[0], 10, 5)
    assert ledger.limit() == "token_budget"  # stopped: later calls are refused too
    with pytest.raises(spend.SpendLimit):
        ledger.admit(1)


@pytest.fixture
def store(tiny_docs: list[dict[str, str]], tmp_path: Any) -> Store:
    return Store.build(tmp_path / "store", tiny_docs, embedder=HashingEmbedder(), progress=False)


@pytest.fixture
def many_docs_store(tmp_path: Any) -> Store:
    filler = " ".join(f"word{j}" for j in range(40))
    docs = [
        {"id": f"d{i}", "title": f"Tower {i}", "text": f"Tower {i} in Paris was built. {filler}"}
        for i in range(300)
    ]
    return Store.build(tmp_path / "many", docs, embedder=HashingEmbedder(), progress=False)


@pytest.fixture
def short_docs_store(tmp_path: Any) -> Store:
    docs = [{"id": f"s{i}", "title": f"T{i}", "text": f"Tower {i}."} for i in range(300)]
    return Store.build(tmp_path / "short", docs, embedder=HashingEmbedder(), progress=False)
