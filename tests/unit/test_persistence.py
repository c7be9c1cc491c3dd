"""Checkpointers for in-process runs: SQLite by default, resume after a failure, URL choice."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

from gaprag import build_graph
from gaprag.errors import EndpointError, GapragError
from gaprag.persistence import (
    SQLITE_FILE,
    checkpointer_from_url,
    postgres_checkpointer,
    sqlite_checkpointer,
    thread_config,
)
from gaprag.stores import Store
from gaprag.testing import ScriptedChatModel
from tests.retrievers import CountingRetriever

# the LLM layer passes the error through or maps it to EndpointError; either stops the run
MID_RUN_FAILURE = (ConnectionError, EndpointError)


class FlakyReply:
    """A reply that raises on its first ``fail`` calls, then answers; counts attempts."""

    def __init__(self, answer: str, fail: int = 1) -> None:
        self.answer = answer
        self.fail = fail
        self.attempts = 0

    def __call__(self, messages: list[BaseMessage]) -> str:
        self.attempts += 1
        if self.attempts <= self.fail:
            raise ConnectionError("endpoint went away mid-run")
        return self.answer


def test_sqlite_checkpointer_defaults_to_gaprag_home(_isolated_home: Path) -> None:
    saver = sqlite_checkpointer()
    assert isinstance(saver, SqliteSaver)
    db = _isolated_home / SQLITE_FILE
    assert db.is_file()
    tables = {r[0] for r in sqlite3.connect(db).execute("select name from sqlite_master")}
    assert {"checkpoints", "writes"} <= tables  # set up eagerly, not on first use


def test_run_interrupted_mid_loop_resumes_without_repeating_finished_work(
    tmp_path: Path, store: Store
) -> None:
    db = tmp_path / "ck.sqlite"
    config = thread_config("t-resume")
    question = "What is the capital of France?"

    # process 1: retrieval succeeds, then the answer call fails
    retriever1 = CountingRetriever(store)
    flaky = FlakyReply("Paris")
    graph1 = build_graph(
        "standard_rag", llm=ScriptedChatModel(default=flaky), retriever=retriever1,
        checkpointer=sqlite_checkpointer(db), retrieval_mode="bm25", top_k=2,
    )  # fmt: skip
    with pytest.raises(MID_RUN_FAILURE):
        graph1.invoke({"question": question}, config)
    assert retriever1.queries == [question] and flaky.attempts == 1
    snapshot = graph1.get_state(config)
    assert snapshot.next == ("generate_answer",)  # the finished retrieve step is saved
    assert snapshot.values["evidence"][0]["id"] == "fr"

    # process 2: a fresh checkpointer on the same file, a fresh graph, a working model
    retriever2 = CountingRetriever(store)
    model2 = ScriptedChatModel(default="Paris")
    graph2 = build_graph(
        "standard_rag", llm=model2, retriever=retriever2,
        checkpointer=sqlite_checkpointer(db), retrieval_mode="bm25", top_k=2,
    )  # fmt: skip
    out = graph2.invoke(None, config)
    assert out["answer"] == "Paris" and out["stop_reason"] == "answered"
    assert retriever2.queries == []  # retrieval was not repeated
    assert len(model2.calls) == 1  # only the failed answer call ran again
    assert "Paris is the capital" in model2.prompts()[0]  # ... with the saved evidence
    assert out["usage"]["retrieval_calls"] == 1 and out["usage"]["llm_calls"] == 1
    assert out["queries"] == [question]  # the reducer did not append the query twice
    assert graph2.get_state(config).next == ()


def test_resume_with_in_memory_saver_and_same_graph(store: Store) -> None:
    retriever = CountingRetriever(store)
    flaky = FlakyReply("William Shakespeare", fail=2)
    graph = build_graph(
        "standard_rag", llm=ScriptedChatModel(default=flaky), retriever=retriever,
        checkpointer=InMemorySaver(), retrieval_mode="bm25",
    )  # fmt: skip
    config = thread_config("t-mem")
    for _ in range(2):
        with pytest.raises(MID_RUN_FAILURE):
            graph.invoke({"question": "Who wrote Hamlet?"} if _ == 0 else None, config)
    out = graph.invoke(None, config)
    assert out["answer"] == "William Shakespeare"
    assert len(retriever.queries) == 1 and flaky.attempts == 3


def test_checkpointer_from_url(tmp_path: Path, _isolated_home: Path) -> None:
    assert isinstance(checkpointer_from_url("memory"), InMemorySaver)
    assert isinstance(checkpointer_from_url("sqlite"), SqliteSaver)
    assert (_isolated_home / SQLITE_FILE).is_file()
    path = tmp_path / "sub" / "x.sqlite"
    assert isinstance(checkpointer_from_url(f"sqlite:///{path}"), SqliteSaver)
    assert path.is_file()
    with pytest.raises(GapragError, match="unknown checkpointer URL") as info:
        checkpointer_from_url("redis://localhost")
    assert "postgresql://" in info.value.hint


def test_postgres_checkpointer_reports_an_unreachable_server_in_one_line() -> None:
    with pytest.raises(GapragError, match="cannot connect to PostgreSQL") as info:
        postgres_checkpointer("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")
    assert "\n" not in str(info.value) and "server is running" in info.value.hint


def test_thread_config() -> None:
    assert thread_config("a") == {"configurable": {"thread_id": "a"}}
    expected: dict[str, Any] = {"configurable": {"thread_id": "a", "checkpoint_id": "c1"}}
    assert thread_config("a", "c1") == expected
