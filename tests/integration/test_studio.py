"""`langgraph dev` serves every method graph: a real server, a fake OpenAI endpoint, a real store.

The server (the ``served`` fixture of ``tests/integration/conftest.py``) is started exactly as
docs/studio.md says (offline, no browser, no reload). The operator's environment names the
store (``GAPRAG_STORE``), the endpoint and an API key; the last tests try, as a client of the
server would, to turn a served graph against its operator.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import gaprag
from tests.fake_openai import FakeOpenAI
from tests.integration.conftest import CANNED, ROOT, Served

pytestmark = pytest.mark.integration

langgraph_sdk = pytest.importorskip("langgraph_sdk", reason="needs the studio extra")
pytest.importorskip("langgraph_api", reason="needs the studio extra: langgraph-cli[inmem]")


@pytest.fixture(scope="module")
def client(served: Served) -> Any:
    return langgraph_sdk.get_sync_client(url=served.url)


def assistant_id(client: Any, graph_id: str) -> str:
    found = client.assistants.search(graph_id=graph_id)
    assert len(found) == 1, found
    return str(found[0]["assistant_id"])


def test_every_available_method_is_an_assistant(client: Any, served: Served) -> None:
    assistants = client.assistants.search(limit=50)
    assert sorted(a["graph_id"] for a in assistants) == sorted(served.methods)
    config = json.loads((ROOT / "langgraph.json").read_text())
    for a in assistants:
        assert a["description"] == config["graphs"][a["graph_id"]]["description"]


@pytest.mark.parametrize("method", gaprag.list_methods())
def test_studio_forms_come_from_the_schemas(client: Any, method: str) -> None:
    schemas = client.assistants.get_schemas(assistant_id(client, method))
    assert schemas["input_schema"]["required"] == ["question"]
    context = schemas["context_schema"]["properties"]
    assert {"base_url", "model", "store"} <= set(context)
    assert all(p.get("description") for p in context.values())
    output = schemas["output_schema"]  # None when the server could not build it
    assert output is not None, "the server could not build the output schema"
    assert {"answer", "stop_reason", "evidence", "usage"} <= set(output["properties"])


def test_graph_drawing_has_the_method_nodes(client: Any) -> None:
    drawn = client.assistants.get_graph(assistant_id(client, "standard_rag"))
    ids = {n["id"] for n in drawn["nodes"]}
    assert {"__start__", "retrieve", "generate_answer", "__end__"} <= ids
    edges = {(e["source"], e["target"]) for e in drawn["edges"]}
    assert ("retrieve", "generate_answer") in edges


def test_streamed_run_answers_with_the_fake_llm(client: Any, served: Served) -> None:
    thread = client.threads.create()
    question = "Who built the Eiffel Tower in Paris?"  # BM25 matches two documents
    before = len(served.llm.requests)
    parts = list(
        client.runs.stream(
            thread["thread_id"],
            "standard_rag",
            input={"question": question},
            stream_mode="updates",
            context={"store": str(served.store), "retrieval_mode": "bm25", "top_k": 1},
        )
    )
    errors = [p.data for p in parts if p.event == "error"]
    assert errors == [], f"{errors}\n{served.log.read_text()[-3000:]}"
    updates = [p.data for p in parts if p.event == "updates"]
    steps = ["retrieve", "generate_answer", "reader", "short_answer"]
    assert [next(iter(u)) for u in updates] == steps
    retrieved = updates[0]["retrieve"]
    # the context's store and top_k were used (the default top_k would keep both matches)
    assert [e["id"] for e in retrieved["evidence"]] == ["eiffel"]
    assert updates[1]["generate_answer"]["answer"] == CANNED

    # exactly one LLM call, with the store's passage and the question in the prompt
    sent = served.llm.requests[before:]
    assert len(sent) == 1
    prompt = sent[0]["messages"][-1]["content"]
    assert "built by the engineer Gustave Eiffel" in prompt and question in prompt

    # the server's own checkpointer kept the thread's final state
    state = client.threads.get_state(thread["thread_id"])
    assert state["values"]["answer"] == CANNED
    assert state["values"]["usage"]["llm_calls"] == 1
    assert state["next"] == []


def test_stateless_wait_run_returns_the_output_schema(client: Any, served: Served) -> None:
    out = client.runs.wait(
        None,
        "standard_rag",
        input={"question": "What is the capital of France?"},
        context={"store": str(served.store), "retrieval_mode": "bm25", "top_k": 1},
    )
    assert out["answer"] == CANNED and out["stop_reason"] == "answered"
    assert out["queries"] == ["What is the capital of France?"]
    assert [e["id"] for e in out["evidence"]] == ["fr"]
    assert "question" not in out  # output_schema, not the internal state


def test_run_time_bound_at_its_maximum_runs_under_the_server(client: Any, served: Served) -> None:
    aid = assistant_id(client, "ircot")
    form = client.assistants.get_schemas(aid)["context_schema"]["properties"]["max_steps"]
    assert (form["minimum"], form["maximum"]) == (1, 25)
    # the canned reply never states "answer is": every step retrieves again, up to the bound
    out = client.runs.wait(
        None,
        "ircot",
        input={"question": "Who built the Eiffel Tower in Paris?"},
        context={"store": str(served.store), "max_steps": 25},
    )
    assert "__error__" not in out, f"{out}\n{served.log.read_text()[-3000:]}"
    assert out["iterations"] == 25 and out["stop_reason"] == "max_iterations"


# -- a client of the server tries to turn a served graph against its operator ---------------
@pytest.fixture
def attacker() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(reply="owned") as server:
        yield server


def test_served_run_answers_from_the_operators_store_without_naming_it(
    client: Any, served: Served
) -> None:
    out = client.runs.wait(
        None, "standard_rag", input={"question": "What is the capital of France?"},
        context={"retrieval_mode": "bm25", "top_k": 1},
    )  # fmt: skip
    assert [e["id"] for e in out["evidence"]] == ["fr"]  # GAPRAG_STORE, not the demo corpus


@pytest.mark.parametrize(
    ("method", "key"),
    [("standard_rag", "base_url"), ("iterkey", "keywords_base_url"),
     ("iterkey", "validator_base_url")],
)  # fmt: skip
def test_served_run_cannot_send_prompts_or_the_key_elsewhere(
    client: Any, attacker: FakeOpenAI, method: str, key: str
) -> None:
    with pytest.raises(Exception, match=f"InputError: {method}: {key}=.*operator's setting"):
        client.runs.wait(
            None, method, input={"question": "Who built the Eiffel Tower?"},
            context={key: attacker.base_url},
        )  # fmt: skip
    assert attacker.requests == []


@pytest.mark.parametrize(
    ("method", "key", "value"),
    [("standard_rag", "store", "../../.."), ("rag_ef", "feedback_store", "OUT/fb.sqlite"),
     ("missing_knowledge", "qa_store", "OUT/pairs"), ("rfm_rag", "rf_weights", "OUT/w.json"),
     ("migres", "reranker", "OUT/model")],
)  # fmt: skip
def test_served_run_cannot_name_a_path(
    client: Any, tmp_path: Path, method: str, key: str, value: str
) -> None:
    value = value.replace("OUT", str(tmp_path / "out"))
    with pytest.raises(Exception, match=f"InputError: {method}: {key}=.*operator's setting"):
        client.runs.wait(None, method, input={"question": "Who?"}, context={key: value})
    assert not (tmp_path / "out").exists()


def test_served_run_cannot_force_calibration(client: Any) -> None:
    with pytest.raises(Exception, match="calibration=True"):
        client.runs.wait(None, "iterkey", input={"question": "Who?"}, context={"calibration": True})


def _mcp_call(url: str, name: str, arguments: dict[str, Any], **params: Any) -> dict[str, Any]:
    import urllib.request

    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": name, "arguments": arguments, **params}}  # fmt: skip
    request = urllib.request.Request(
        f"{url}/mcp", data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=120) as resp:
        return json.loads(resp.read())  # type: ignore[no-any-return]


def test_assistant_carrying_operator_settings_is_refused_in_runs_and_mcp(
    client: Any, served: Served, attacker: FakeOpenAI
) -> None:
    evil = client.assistants.create(
        graph_id="standard_rag", name="evil_rag", context={"base_url": attacker.base_url}
    )
    try:
        with pytest.raises(Exception, match="InputError: standard_rag: base_url="):
            client.runs.wait(None, evil["assistant_id"], input={"question": "Who?"})
        reply = _mcp_call(served.url, "evil_rag", {"question": "Who?"})
        assert reply["result"]["isError"] is True, reply
    finally:
        client.assistants.delete(evil["assistant_id"])
    assert attacker.requests == []


def test_mcp_tool_call_cannot_name_an_endpoint(served: Served, attacker: FakeOpenAI) -> None:
    reply = _mcp_call(
        served.url, "standard_rag", {"question": "Who built the Eiffel Tower?"},
        context={"base_url": attacker.base_url},
    )  # fmt: skip
    assert reply["result"]["isError"] is True, reply
    assert attacker.requests == []
    ok = _mcp_call(served.url, "standard_rag", {"question": "Who built the Eiffel Tower?"})
    assert "isError" not in ok["result"] and CANNED in ok["result"]["content"][0]["text"]


@pytest.mark.parametrize("method", gaprag.list_methods())
def test_run_on_the_default_demo_store_without_allow_blocking(
    served_default: Served, method: str
) -> None:
    """The default setup, as docs/studio.md starts it (no ``--allow-blocking``, so any blocking
    call on the server's event loop fails the run): no store in the context, so the first run
    builds the bundled demo store into GAPRAG_HOME, and every method answers from it."""
    client = langgraph_sdk.get_sync_client(url=served_default.url)
    out = client.runs.wait(
        None, method, input={"question": "Who built the Eiffel Tower?"}, raise_error=False
    )
    log = served_default.log.read_text()
    assert "Blocking call" not in log, log[-3000:]
    assert "__error__" not in out, f"{out}\n{log[-3000:]}"
    assert out["answer"] and out["stop_reason"]
    assert sorted(p.name.split("-")[0] for p in (served_default.home / "stores").iterdir()) == [
        "demo"
    ]
