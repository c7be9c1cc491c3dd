"""A caller of `langgraph dev` cannot write a run's state or open the server's side doors.

Each request is one an attacker sent to the served graphs (``served``: the shipped
``langgraph.json``, the operator's store, endpoint and key): ``command.update`` and
``command.goto`` (a node name or a ``Send``), ``supersteps`` on a new thread, a thread state
update, an A2A message or a streaming-protocol command carrying them, a webhook, a cron. Each
is refused with HTTP 403 and one line of JSON ``detail`` before the graph runs; RAG-EF's
review resume (``command.resume`` alone) still works.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.conftest import Served

pytestmark = pytest.mark.integration

pytest.importorskip("langgraph_api", reason="needs the studio extra: langgraph-cli[inmem]")

OWN = "a run's state is written by its graph only"
POISON = {"question": "Who built the Eiffel Tower?", "answer": "POISON", "chunk": "poison",
          "source": "expert"}  # fmt: skip


@pytest.fixture(scope="module")
def http(served: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served.url, timeout=120) as client:
        yield client


def refused(reply: httpx.Response, start: str) -> bool:
    assert reply.status_code == 403, reply.text
    detail = reply.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail
    return detail.startswith(start)


def new_thread(http: httpx.Client) -> str:
    reply = http.post("/threads", json={})
    assert reply.status_code == 200, reply.text
    return str(reply.json()["thread_id"])


FORGED = {
    "feedback_poison": ("rag_ef", {"update": {"question": POISON["question"], "feedback": POISON},
                                   "goto": "update_evidence_pool"}, "command.goto, command.update"),
    "negative_counters": ("ircot", {"update": {"iterations": -40,
                                               "usage": {"prompt_tokens": -1000000000}},
                                    "goto": "retrieve"}, "command.goto, command.update"),
    "huge_question": ("standard_rag", {"update": {"question": "x" * 1_000_000},
                                       "goto": "generate_answer"}, "command.goto, command.update"),
    "send": ("standard_rag", {"goto": {"node": "generate_answer",
                                       "input": {"question": "forged"}}}, "command.goto"),
}  # fmt: skip


@pytest.mark.parametrize(("method", "command", "fields"), FORGED.values(), ids=FORGED.keys())
@pytest.mark.parametrize("where", ["stateless", "thread"])
def test_a_command_that_writes_state_is_refused(
    http: httpx.Client, served: Served, method: str, command: Any, fields: str, where: str
) -> None:
    before = len(served.llm.requests)
    path = "/runs/wait" if where == "stateless" else f"/threads/{new_thread(http)}/runs/wait"
    reply = http.post(path, json={"assistant_id": method, "command": command,
                                  "config": {"recursion_limit": 500}})  # fmt: skip
    assert refused(reply, f"{fields} ")
    assert OWN in reply.json()["detail"]
    assert len(served.llm.requests) == before  # nothing reached the operator's endpoint


def test_a_review_resume_alone_answers_the_paused_run(http: httpx.Client, served: Served) -> None:
    thread = new_thread(http)
    context = {"store": str(served.store), "review": True}
    paused = http.post(
        f"/threads/{thread}/runs/wait",
        json={"assistant_id": "rag_ef", "input": {"question": "Who built the Eiffel Tower?"},
              "context": context},
    )  # fmt: skip
    assert paused.status_code == 200, paused.text
    assert paused.json().get("__interrupt__"), paused.json()
    resumed = http.post(
        f"/threads/{thread}/runs/wait",
        json={"assistant_id": "rag_ef", "command": {"resume": {"skip": True}}, "context": context},
    )
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["stop_reason"] == "feedback_skipped", resumed.json()


def test_supersteps_on_a_new_thread_are_refused(http: httpx.Client) -> None:
    superstep = {"updates": [{"values": {"feedback": POISON}, "as_node": "collect_feedback"}]}
    reply = http.post("/threads", json={"graph_id": "rag_ef", "supersteps": [superstep]})
    assert refused(reply, "supersteps are refused")


def test_a_thread_state_update_is_refused(http: httpx.Client) -> None:
    thread = new_thread(http)
    reply = http.post(
        f"/threads/{thread}/state",
        json={"values": {"feedback": POISON}, "as_node": "collect_feedback"},
    )
    assert refused(reply, "thread state updates are refused")
    assert refused(http.post(f"/threads/{thread}/copy"), "copying a thread is refused")
    assert http.get(f"/threads/{thread}/state").json()["values"] in ({}, [], None)


def test_an_a2a_message_carrying_a_command_is_refused_and_a2a_is_off(http: httpx.Client) -> None:
    message = {"role": "user", "parts": [{"kind": "text", "text": "Who?"}], "messageId": "m1"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
    forged = {**body, "params": {"message": {**message, "command": {"update": POISON}}}}
    assert refused(http.post("/a2a/rag_ef", json=forged), "message.command.update is refused")
    assert http.post("/a2a/rag_ef", json=body).status_code == 404  # A2A is closed


def test_a_streaming_protocol_command_that_writes_state_is_refused(http: httpx.Client) -> None:
    thread = new_thread(http)
    command = {"id": 1, "method": "run.start",
               "params": {"assistant_id": "rag_ef", "input": {"question": "Who?"},
                          "force_resume": True, "update": {"feedback": POISON}}}  # fmt: skip
    reply = http.post(f"/threads/{thread}/commands", json=command)
    assert refused(reply, "run.start params.update is refused")


def test_webhooks_crons_and_the_store_are_closed(http: httpx.Client, served: Served) -> None:
    run = {"assistant_id": "standard_rag", "input": {"question": "Who?"}}
    hooked = http.post("/runs/wait", json={**run, "webhook": served.llm.base_url + "/hook"})
    assert refused(hooked, "webhook is refused")
    cron = http.post("/runs/crons", json={**run, "schedule": "* * * * *"})
    assert refused(cron, "crons are off")
    store = http.put("/store/items", json={"namespace": ["x"], "key": "k", "value": {"v": 1}})
    assert store.status_code == 404
