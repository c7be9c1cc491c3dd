"""Method graphs inside other graphs and agents: subgraph node, LangChain tool, streaming."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from pydantic import BaseModel

import gaprag
from gaprag import as_tool, build_graph
from gaprag.stores import Store
from gaprag.testing import ScriptedChatModel
from gaprag.tool import compact_result, format_result, method_description

AVAILABLE = gaprag.list_methods()
#: every method with a loop (escalating_rag's rounds are its loops', reported by them)
ITERATIVE = [m for m in AVAILABLE if m not in ("standard_rag", "escalating_rag")]


def rag(store: Store, model: ScriptedChatModel) -> Any:
    return build_graph("standard_rag", llm=model, retriever=store, retrieval_mode="bm25", top_k=2)


class Parent(TypedDict, total=False):
    question: str
    answer: str


@dataclass
class AppContext:
    """A parent application's own run settings: nothing in common with a method's Context."""

    user_id: str = "anon"
    top_k: int = 1


# -- as a subgraph node ---------------------------------------------------------------------
def test_compiled_graph_is_a_node_in_a_parent_graph(store: Store) -> None:
    model = ScriptedChatModel(default="Paris")
    builder = StateGraph(Parent)
    builder.add_node("rag", rag(store, model))
    builder.add_node("shout", lambda s: {"answer": s["answer"].upper()})
    builder.add_edge(START, "rag")
    builder.add_edge("rag", "shout")
    builder.add_edge("shout", END)
    out = builder.compile().invoke({"question": "What is the capital of France?"})
    assert out == {"question": "What is the capital of France?", "answer": "PARIS"}
    assert len(model.calls) == 1
    assert "Paris is the capital and largest city of France." in model.prompts()[0]


def test_subgraph_updates_stream_with_their_namespace(store: Store) -> None:
    builder = StateGraph(Parent)
    builder.add_node("rag", rag(store, ScriptedChatModel(default="Berlin")))
    builder.add_edge(START, "rag")
    builder.add_edge("rag", END)
    chunks = list(
        builder.compile().stream(
            {"question": "capital of Germany"}, stream_mode="updates", subgraphs=True
        )
    )
    inner = [(ns, next(iter(upd))) for ns, upd in chunks if ns]
    assert [name for _, name in inner] == ["retrieve", "generate_answer", "reader", "short_answer"]
    assert all(ns[0].startswith("rag:") for ns, _ in inner)
    assert chunks[-1] == ((), {"rag": {"answer": "Berlin"}})  # the parent sees shared keys only


def test_subgraph_under_a_parent_with_its_own_context_schema(store: Store) -> None:
    """The parent's runtime context reaches the subgraph's nodes: only shared fields count."""
    builder = StateGraph(Parent, context_schema=AppContext)
    builder.add_node("rag", rag(store, ScriptedChatModel(default="Paris")))
    builder.add_edge(START, "rag")
    builder.add_edge("rag", END)
    out = builder.compile().invoke(
        {"question": "capital of France"}, context=AppContext(user_id="u1", top_k=1)
    )
    assert out["answer"] == "Paris"


# -- as a LangChain tool ----------------------------------------------------------------------
def test_as_tool_describes_itself_for_an_agent(store: Store) -> None:
    tool = as_tool("standard_rag", llm=ScriptedChatModel(default="x"), retriever=store)
    assert isinstance(tool, StructuredTool) and isinstance(tool, BaseTool)
    assert tool.name == "gaprag_standard_rag"
    assert "Retrieve top-k passages once" in tool.description  # from the module docstring
    assert tool.description.startswith("Answer a factual question")
    assert set(tool.args) == {"question"}
    schema = tool.get_input_schema()
    assert issubclass(schema, BaseModel) and schema.model_json_schema()["required"] == ["question"]


@pytest.mark.parametrize("method", AVAILABLE)
def test_every_method_becomes_a_named_tool(method: str) -> None:
    tool = as_tool(method, llm=ScriptedChatModel(default="x"))
    assert tool.name == f"gaprag_{method}"
    assert method_description(method) == tool.description
    assert len(tool.description) > len(f"Answer a factual question ... ({method}).")
    assert set(tool.args) == {"question"}


def test_tool_returns_the_answer_and_a_compact_evidence_list(store: Store) -> None:
    model = ScriptedChatModel(default="William Shakespeare")
    tool = as_tool("standard_rag", llm=model, retriever=store, retrieval_mode="bm25", top_k=2)
    text = tool.invoke({"question": "Is Hamlet by William Shakespeare?"})
    lines = text.splitlines()
    assert lines[0] == "answer: William Shakespeare"
    assert lines[1] == "stop_reason: answered"
    assert lines[2] == "evidence:"
    assert lines[3].startswith("- [hamlet] Hamlet: Hamlet is a tragedy")
    assert lines[4].startswith("- [shakes] William Shakespeare: William Shakespeare was")
    assert len(lines) == 5  # top_k=2 passages
    assert "Question: Is Hamlet by William Shakespeare?" in model.prompts()[0]


def test_tool_call_carries_the_full_result_as_artifact(store: Store) -> None:
    tool = as_tool(
        "standard_rag", llm=ScriptedChatModel(default="Paris"), retriever=store,
        retrieval_mode="bm25", top_k=1, name="lookup", description="Look facts up.",
    )  # fmt: skip
    msg = tool.invoke(
        {
            "type": "tool_call",
            "id": "c1",
            "name": "lookup",
            "args": {"question": "capital of France"},
        }
    )
    assert isinstance(msg, ToolMessage) and msg.tool_call_id == "c1"
    assert tool.name == "lookup" and tool.description == "Look facts up."
    art = msg.artifact
    assert art["answer"] == "Paris" and art["iterations"] == 1
    assert art["queries"] == ["capital of France"]
    assert [e["id"] for e in art["evidence"]] == ["fr"]
    assert art["usage"]["llm_calls"] == 1 and art["usage"]["retrieval_calls"] == 1


def test_tool_runs_async(store: Store) -> None:
    tool = as_tool(
        "standard_rag", llm=ScriptedChatModel(default="Berlin"), retriever=store,
        retrieval_mode="bm25",
    )  # fmt: skip
    text = asyncio.run(tool.ainvoke({"question": "capital of Germany"}))
    assert text.startswith("answer: Berlin\n")


def test_an_agent_calls_the_tool_through_a_tool_node(store: Store) -> None:
    """A minimal agent loop: the model asks for the tool, ToolNode runs it, the model answers."""
    tool = as_tool(
        "standard_rag", llm=ScriptedChatModel(default="Paris"), retriever=store,
        retrieval_mode="bm25", top_k=1,
    )  # fmt: skip

    def agent(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        if isinstance(last, ToolMessage):
            answer = last.content.splitlines()[0].removeprefix("answer: ")  # type: ignore[union-attr]
            return {"messages": [AIMessage(content=f"It is {answer}.")]}
        call = {"name": tool.name, "args": {"question": str(last.content)}, "id": "t1"}
        return {"messages": [AIMessage(content="", tool_calls=[call])]}

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    builder = StateGraph(MessagesState, context_schema=AppContext)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([tool]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    out = builder.compile().invoke(
        {"messages": [HumanMessage(content="What is the capital of France?")]},
        context=AppContext(user_id="u2"),
    )
    tool_msg = out["messages"][2]
    assert isinstance(tool_msg, ToolMessage) and "[fr] France" in str(tool_msg.content)
    assert out["messages"][-1].content == "It is Paris."


def test_compact_result_cuts_long_passages() -> None:
    long_text = " ".join(f"w{i}" for i in range(100))
    passage = {"id": "d1", "title": "T", "text": long_text, "source": "bm25", "round": 2}
    compact = compact_result({"answer": "a", "stop_reason": "answered", "evidence": [passage]})
    snippet = compact["evidence"][0]["snippet"]
    assert snippet.startswith("w0 w1 ") and snippet.endswith("w29 ...")
    assert format_result(compact).splitlines()[-1] == f"- [d1] T: {snippet}"
    assert format_result(compact_result({"answer": "a"})).endswith("evidence: none")


# -- streaming --------------------------------------------------------------------------------
def test_stream_updates_and_custom_show_each_node(store: Store) -> None:
    graph = rag(store, ScriptedChatModel(default="Paris"))
    chunks = list(
        graph.stream({"question": "capital of France"}, stream_mode=["updates", "custom"])
    )
    updates = [payload for mode, payload in chunks if mode == "updates"]
    assert [next(iter(u)) for u in updates] == [
        "retrieve",
        "generate_answer",
        "reader",
        "short_answer",
    ]
    retrieved = updates[0]["retrieve"]
    assert retrieved["queries"] == ["capital of France"] and retrieved["iterations"] == 1
    assert retrieved["evidence"][0]["id"] == "fr"
    assert retrieved["usage"]["retrieval_calls"] == 1 and retrieved["usage"]["llm_calls"] == 0
    answered = updates[1]["generate_answer"]
    assert answered["answer"] == "Paris" and answered["usage"]["llm_calls"] == 1
    assert all(mode in ("updates", "custom") for mode, _ in chunks)


def test_progress_events_reach_the_custom_stream_of_a_parent(store: Store) -> None:
    from gaprag.progress import emit

    def announce(state: Parent) -> dict[str, Any]:
        emit(round=0, query=state["question"], added=0)
        return {}

    builder = StateGraph(Parent)
    builder.add_node("announce", announce)
    builder.add_node("rag", rag(store, ScriptedChatModel(default="Paris")))
    builder.add_edge(START, "announce")
    builder.add_edge("announce", "rag")
    builder.add_edge("rag", END)
    custom = [p for m, p in builder.compile().stream({"question": "q"}, stream_mode=["custom"])]
    assert custom == [{"round": 0, "query": "q", "added": 0}]
    emit(round=1)  # outside a run: silently ignored


@pytest.mark.parametrize("method", ITERATIVE)
def test_iterative_methods_report_progress_rounds(method: str, store: Store) -> None:
    # rag_ef's retrieval_mode names its answer mode (rag_ef | standard), not a search mode
    options = {} if method == "rag_ef" else {"retrieval_mode": "bm25"}
    graph = build_graph(method, llm=ScriptedChatModel(default="Paris"), retriever=store, **options)
    chunks = list(
        graph.stream({"question": "capital of France"}, stream_mode=["updates", "custom"])
    )
    custom = [payload for mode, payload in chunks if mode == "custom"]
    assert any("round" in event for event in custom), custom
    assert [m for m, _ in chunks].count("updates") >= 2
