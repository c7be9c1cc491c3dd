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
from gaprag.errors import (
    DependencyError,
    EndpointError,
    GapragError,
    InputError,
    ServerError,
    StoreError,
    raised_in,
)
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


ENDPOINT = "http://user:pa55word@10.0.0.7:8000/v1"
KEY = "sk-live-0123456789abcdefgh"
#: gaprag's own failures as a served run raises them, and what the caller must read
OWN_FAILURES = [
    (EndpointError(f"cannot reach the LLM endpoint at {ENDPOINT} (ConnectError: refused)",
                   hint="start it or set GAPRAG_BASE_URL"),
     EndpointError, "the model endpoint is not answering as it should: cannot reach the LLM "
     "endpoint at <URL> (ConnectError: refused)"),
    (EndpointError(f"{ENDPOINT} answered HTTP 401: Bearer {KEY} is not valid"),
     EndpointError, "the model endpoint is not answering as it should: <URL> answered HTTP "
     "401: Bearer *** is not valid"),
    (StoreError(f"cannot open the store at {SERVER_TEXT}: not a gaprag store",
                hint="run gaprag index"),
     StoreError, "the store cannot be opened or read: cannot open the store at <server path>: "
     "not a gaprag store"),
    (GapragError("the embedder minilm is not installed", hint="pip install 'gaprag[local]'"),
     ServerError, "the server could not run this: the embedder minilm is not installed"),
]  # fmt: skip


@pytest.mark.parametrize(("raised", "kind", "line"), OWN_FAILURES)
def test_a_served_caller_reads_what_failed_and_what_to_do(
    raised: GapragError, kind: type[GapragError], line: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="gaprag"):
        told = OperatorPolicy(hide_paths=True).hidden(raised)
    assert type(told) is kind and isinstance(told, RuntimeError)  # LangGraph passes its text
    assert told.message == line
    assert told.hint.startswith("try again in a while; if it keeps failing, tell the server's")
    for secret in (SERVER_TEXT, "pa55word", "10.0.0.7", KEY):
        assert secret not in str(told)
    assert str(raised) in caplog.text  # the server's log keeps the whole text


def test_a_callers_bad_input_keeps_its_class_and_hint_with_paths_hidden() -> None:
    policy = OperatorPolicy(hide_paths=True)
    assert policy.hidden(InputError("top_k must be positive", hint="set top_k >= 1")) is None
    told = policy.hidden(InputError(f"cannot read {SERVER_TEXT}", hint=f"see {ENDPOINT}"))
    assert isinstance(told, InputError)
    assert str(told) == "cannot read <server path> (hint: see <URL>)"


def test_a_library_user_keeps_gaprags_own_error_as_raised() -> None:
    raised = StoreError(f"cannot open {SERVER_TEXT}")
    assert OperatorPolicy().hidden(raised) is None


def test_the_library_is_the_one_whose_code_raised() -> None:
    try:
        json.loads("{")
    except ValueError as err:
        assert raised_in(err) == "json"
    assert raised_in(KeyError("x")) == ""  # made here, never raised: Python's own class


@pytest.mark.parametrize(("raised", "kind", "line"), OWN_FAILURES)
def test_langgraphs_server_passes_gaprags_own_line_to_the_caller(
    raised: GapragError, kind: type[GapragError], line: str
) -> None:
    serde = pytest.importorskip("langgraph_api.serde", reason="needs the studio extra")
    told = OperatorPolicy(hide_paths=True).hidden(raised)
    assert json.loads(serde.json_dumpb(told)) == {"error": kind.__name__, "message": str(told)}


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
