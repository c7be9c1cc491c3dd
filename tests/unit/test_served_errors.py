"""A served run's caller never reads a library's own error text: when Chroma, openai, httpx,
bm25s or any other library fails inside a served graph's node, the run ends with gaprag's one
line naming the library and the error's class (``DependencyError``), and the library's text,
which can show the server's paths and data, stays in the server's log. A library user keeps
the library's own error."""

from __future__ import annotations

import json
import logging
from collections.abc import Collection
from typing import Any

import pytest
from chromadb.api.types import validate_where

from gaprag import build_graph
from gaprag.errors import DependencyError, StoreError, raised_in
from gaprag.operator import OperatorPolicy
from gaprag.state.base import Evidence
from gaprag.testing import ScriptedChatModel

Q = "Who built the Eiffel Tower?"
SERVER_TEXT = "/srv/operator/corpus/private.jsonl"


class ChromaFails:
    """A retriever whose search reaches Chroma with a value Chroma rejects, as a filter that
    slipped past gaprag's checks would."""

    def search(
        self, query: str, k: int = 5, *, mode: Any = None, exclude: Collection[str] = ()
    ) -> list[Evidence]:
        validate_where(SERVER_TEXT)  # type: ignore[arg-type]  # Chroma's ValueError, its text
        return []


def run(policy: OperatorPolicy) -> None:
    graph = build_graph(
        "standard_rag", llm=ScriptedChatModel(default="x"), retriever=ChromaFails(), policy=policy
    )
    graph.invoke({"question": Q})


def test_a_served_run_tells_which_library_failed_not_its_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="gaprag"), pytest.raises(DependencyError) as err:
        run(OperatorPolicy(hide_paths=True))  # as the served graphs are built
    told = str(err.value)
    assert "chromadb" in told and "ValueError" in told and "\n" not in told
    assert SERVER_TEXT not in told and "Expected where" not in told
    assert err.value.hint
    cause = err.value.__cause__
    assert isinstance(cause, ValueError) and SERVER_TEXT in str(cause)
    [logged] = [r for r in caplog.records if r.exc_info and r.exc_info[1] is cause]
    assert SERVER_TEXT in logged.getMessage()  # the server's log keeps the library's text


def test_a_library_user_keeps_the_librarys_own_error() -> None:
    with pytest.raises(ValueError, match="Expected where") as err:
        run(OperatorPolicy())
    assert not isinstance(err.value, DependencyError)


def test_gaprags_own_errors_stay_its_own_with_paths_hidden() -> None:
    policy = OperatorPolicy(hide_paths=True)
    assert policy.hidden(StoreError("the store is empty", hint="run gaprag index")) is None
    told = policy.hidden(StoreError(f"cannot read {SERVER_TEXT}", hint="check it"))
    assert isinstance(told, StoreError) and SERVER_TEXT not in str(told)


def test_the_library_is_the_one_whose_code_raised() -> None:
    try:
        json.loads("{")
    except ValueError as err:
        assert raised_in(err) == "json"
    assert raised_in(KeyError("x")) == ""  # made here, never raised: Python's own class


def test_langgraphs_server_passes_the_one_line_to_the_caller() -> None:
    serde = pytest.importorskip("langgraph_api.serde", reason="needs the studio extra")
    try:
        validate_where(SERVER_TEXT)  # type: ignore[arg-type]
    except ValueError as raw:
        told = DependencyError.of(raw)
        leaked = json.loads(serde.json_dumpb(raw))
        sent = json.loads(serde.json_dumpb(told))
    assert SERVER_TEXT in leaked["message"]  # what the caller read before
    assert sent == {"error": "DependencyError", "message": str(told)}
    assert SERVER_TEXT not in sent["message"]
