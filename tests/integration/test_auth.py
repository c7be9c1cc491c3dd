"""Two clients of one served gaprag, with the shipped authentication on (``gaprag.auth``).

``langgraph dev`` serves the shipped ``langgraph.json`` with client tokens for ``alice`` and
``bob`` and a fake endpoint that counts LLM calls. Bob tries every way to reach Alice's
threads and runs, and to change or shadow the operator's assistants; each is refused or finds
nothing, and none reaches the endpoint. A request without a token is refused, Studio's
``x-auth-scheme: langsmith`` header included.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.conftest import CANNED, Served, serve

pytestmark = pytest.mark.integration

pytest.importorskip("langgraph_api", reason="needs the studio extra: langgraph-cli[inmem]")

ALICE, BOB = "alice-token-0123456789abcdef", "bob-token-0123456789abcdef"
QUESTION = {"question": "Who built the Eiffel Tower?"}
STANDARD_RAG_ID = str(uuid.uuid5(uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8"), "standard_rag"))


@pytest.fixture(scope="module")
def served_auth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    operator = {"GAPRAG_STORE": "STORE", "GAPRAG_CLIENT_TOKENS": f"alice={ALICE},bob={BOB}"}
    with serve(tmp_path_factory.mktemp("auth"), operator) as server:
        yield server


def client(served: Served, token: str | None, **headers: str) -> httpx.Client:
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.Client(base_url=served.url, headers=headers, timeout=120)


@pytest.fixture(scope="module")
def alice(served_auth: Served) -> Iterator[httpx.Client]:
    with client(served_auth, ALICE) as http:
        yield http


@pytest.fixture(scope="module")
def bob(served_auth: Served) -> Iterator[httpx.Client]:
    with client(served_auth, BOB) as http:
        yield http


def ok(reply: httpx.Response) -> Any:
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_a_request_without_a_client_token_is_refused(served_auth: Served) -> None:
    for headers in (
        {},
        {"x-auth-scheme": "langsmith"},
        {"Authorization": "Bearer wrong-0123456789abc"},
    ):
        with client(served_auth, None, **headers) as http:
            for reply in (http.post("/threads", json={}), http.post("/assistants/search", json={}),
                          http.post("/runs/wait", json={"assistant_id": "standard_rag", "input": QUESTION})):  # fmt: skip
                assert reply.status_code == 401, (headers, reply.text)
    with client(served_auth, None, **{"x-api-key": ALICE}) as http:  # the SDK's api_key
        assert http.post("/threads", json={}).status_code == 200


def test_bob_cannot_reach_alices_threads_and_runs(
    served_auth: Served, alice: httpx.Client, bob: httpx.Client
) -> None:
    thread = ok(alice.post("/threads", json={}))["thread_id"]
    answer = ok(alice.post(f"/threads/{thread}/runs/wait",
                           json={"assistant_id": "standard_rag", "input": QUESTION}))  # fmt: skip
    assert answer["answer"] == CANNED
    [run] = ok(alice.get(f"/threads/{thread}/runs"))
    calls = len(served_auth.llm.requests)
    t, r = f"/threads/{thread}", f"/threads/{thread}/runs/{run['run_id']}"
    tries = {
        "read": bob.get(t), "state": bob.get(f"{t}/state"), "history": bob.post(f"{t}/history", json={}),
        "runs": bob.get(f"{t}/runs"), "run": bob.get(r), "join": bob.get(f"{r}/join"),
        "stream": bob.get(f"{r}/stream"), "cancel": bob.post(f"{r}/cancel"),
        "run on it": bob.post(f"{t}/runs/wait", json={"assistant_id": "standard_rag", "input": QUESTION}),
        "update": bob.patch(t, json={"metadata": {"owner": "bob"}}), "delete": bob.delete(t),
        "delete run": bob.delete(r),
    }  # fmt: skip
    for name, reply in tries.items():
        refused = reply.status_code in (403, 404)
        empty = name == "runs" and reply.status_code == 200 and reply.json() == []
        # a stream answers 200 at once, then its only event is the refusal
        stream_refused = (
            name == "stream"
            and reply.text.startswith("event: error")
            and ("not found" in reply.text)
        )
        assert refused or empty or stream_refused, (name, reply.status_code, reply.text)
    found = ok(bob.post("/threads/search", json={"limit": 100}))
    assert thread not in {x["thread_id"] for x in found}
    assert len(served_auth.llm.requests) == calls  # none of it reached the endpoint
    assert ok(alice.get(t))["thread_id"] == thread  # and Alice's thread is as it was
    assert ok(alice.get(f"{r}/join"))["answer"] == CANNED


def test_bob_cancels_only_his_own_runs(
    served_auth: Served, alice: httpx.Client, bob: httpx.Client
) -> None:
    served_auth.llm.latency = 2.0
    try:
        thread = ok(alice.post("/threads", json={}))["thread_id"]
        run = ok(alice.post(f"/threads/{thread}/runs",
                            json={"assistant_id": "standard_rag", "input": QUESTION}))  # fmt: skip
        time.sleep(0.5)
        everyone = bob.post("/runs/cancel", json={"status": "all"})
        assert everyone.status_code == 404, everyone.text  # Bob has no runs to cancel
        by_id = bob.post("/runs/cancel", json={"thread_id": thread, "run_ids": [run["run_id"]]})
        assert by_id.status_code == 404, by_id.text
        joined = ok(alice.get(f"/threads/{thread}/runs/{run['run_id']}/join"))
    finally:
        served_auth.llm.latency = 0.0
    assert joined["answer"] == CANNED and joined["stop_reason"]


def test_no_client_changes_or_shadows_the_operators_assistants(
    served_auth: Served, bob: httpx.Client
) -> None:
    before = ok(bob.get(f"/assistants/{STANDARD_RAG_ID}"))
    for target in (STANDARD_RAG_ID, "standard_rag"):
        assert (
            bob.patch(f"/assistants/{target}", json={"context": {"top_k": 2.5}}).status_code == 403
        )
        assert bob.post(f"/assistants/{target}/latest", json={"version": 1}).status_code == 403
        assert bob.delete(f"/assistants/{target}").status_code == 403
    for name in ("standard_rag", "bob's own"):
        made = bob.post("/assistants", json={"graph_id": "standard_rag", "name": name})
        assert made.status_code == 403, made.text
    assert ok(bob.get(f"/assistants/{STANDARD_RAG_ID}")) == before
    names = [a["name"] for a in ok(bob.post("/assistants/search", json={"limit": 100}))]
    assert sorted(names) == sorted(set(names)) == sorted(served_auth.methods)
    assert (
        bob.post(
            "/runs/crons", json={"assistant_id": "standard_rag", "schedule": "* * * * *"}
        ).status_code
        == 403
    )


#: Every route LangGraph's server answers beside its API, as ``langgraph dev`` serves the
#: shipped ``langgraph.json``: what a caller without a token and a client each get.
BESIDE_THE_API = [
    # method, path, anonymous, client
    ("GET", "/ok", 200, 200),
    ("GET", "/", 200, 200),
    ("GET", "/info", 401, 200),
    ("GET", "/docs", 401, 200),
    ("GET", "/openapi.json", 401, 200),
    ("GET", "/metrics", 401, 403),
    ("GET", "/internal/debug/thread/{thread}", 401, 403),
    ("POST", "/internal/truncate", 401, 403),
    ("GET", "/deploy", 401, 403),
    ("POST", "/deploy", 401, 403),
    ("GET", "/deploy/00000000-0000-0000-0000-000000000000/stream", 401, 403),
    ("GET", "/ui/standard_rag", 401, 404),
    ("POST", "/ui/standard_rag", 401, 404),
]


def test_no_route_beside_the_api_answers_a_caller_without_a_token_or_another_client(
    served_auth: Served, alice: httpx.Client, bob: httpx.Client
) -> None:
    thread = ok(alice.post("/threads", json={"metadata": {"note": "alice's"}}))["thread_id"]
    logged = len(served_auth.log.read_text())
    with client(served_auth, None) as anonymous:
        for method, path, nobody, someone in BESIDE_THE_API:
            route = path.format(thread=thread)
            for who, http, status in (("anonymous", anonymous, nobody), ("bob", bob, someone)):
                reply = http.request(method, route, json={} if method == "POST" else None)
                assert reply.status_code == status, (who, method, route, reply.text[:200])
                assert thread not in reply.text, (who, route)
    # the refused truncates left Alice's thread as it was
    assert ok(alice.get(f"/threads/{thread}"))["metadata"]["note"] == "alice's"
    assert "Traceback" not in served_auth.log.read_text()[logged:]  # no route failed


@pytest.fixture(scope="module")
def served_own_assistants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    operator = {
        "GAPRAG_STORE": "STORE",
        "GAPRAG_CLIENT_TOKENS": f"alice={ALICE},bob={BOB}",
        "GAPRAG_CLIENT_ASSISTANTS": "1",
    }
    with serve(tmp_path_factory.mktemp("own-assistants"), operator) as server:
        yield server


def test_no_assistant_name_passes_for_a_graphs_or_another_assistants_tool(
    served_own_assistants: Served,
) -> None:
    look_alikes = ["standard_rag\u200b", "ｓｔａｎｄａｒｄ_ｒａｇ", "Standard_RAG", "\u202egar_dradnats",
                   "standard rag", "standard\trag", "ſtandard_rag"]  # fmt: skip
    with client(served_own_assistants, BOB) as bob, client(served_own_assistants, ALICE) as alice:
        for name in look_alikes:
            made = bob.post("/assistants", json={"graph_id": "ircot", "name": name})
            assert made.status_code == 403, (name, made.text)
        mine = ok(bob.post("/assistants", json={"graph_id": "ircot", "name": "bob's ircot"}))
        twin = bob.post("/assistants", json={"graph_id": "ircot", "name": "Bob's  IRCoT"})
        assert twin.status_code == 403 and "reads as the assistant" in twin.text
        renamed = bob.patch(f"/assistants/{mine['assistant_id']}", json={"name": "bob's ircot"})
        assert renamed.status_code == 200, renamed.text  # its own name again
        assert (
            alice.post("/assistants", json={"graph_id": "ircot", "name": "bob's ircot"}).status_code
            == 200
        )
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "standard_rag", "arguments": QUESTION}}  # fmt: skip
        tool = bob.post("/mcp", json=call, headers={"Accept": "application/json"})
    assert tool.status_code == 200 and not tool.json()["result"].get("isError"), tool.text
    assert CANNED in tool.json()["result"]["content"][0]["text"]
