"""The server's MCP answers as gaprag tool text (``gaprag.server_app``), without a server:
the middleware wraps a stand-in for the LangGraph server's ``/mcp`` handler."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gaprag.route_guard import RouteGuard
from gaprag.server_app import McpToolText, StateGuard, rewrite_tool_call, run_output
from gaprag.tool import compact_result, format_result
from tests.guard import Recorder, guarded

OUTPUT: dict[str, Any] = {
    "answer": "Gustave Eiffel",
    "stop_reason": "answered",
    "iterations": 1,
    "queries": ["Who built the Eiffel Tower?"],
    "evidence": [
        {"id": "eiffel", "title": "Eiffel Tower", "text": "Built by Gustave Eiffel.", "source": "bm25", "score": 1.5, "round": 0},
    ],
    "usage": {"llm_calls": 1, "prompt_tokens": 50, "completion_tokens": 3, "retrieval_calls": 1, "wall_s": 0.2},
    "trace": [{"node": "generate_answer", "ok": True, "note": None}],
}  # fmt: skip


def answer(result: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 7, "result": result}).encode()


def served_text(value: Any) -> bytes:
    """What the LangGraph server answers to ``tools/call``: the run output's ``repr``."""
    return answer({"content": [{"type": "text", "text": repr(value)}]})


def test_a_method_output_becomes_the_tool_text_and_structured_content() -> None:
    body = json.loads(rewrite_tool_call(served_text(OUTPUT)) or b"null")
    assert body["jsonrpc"] == "2.0" and body["id"] == 7
    [content] = body["result"]["content"]
    assert content == {"type": "text", "text": format_result(compact_result(OUTPUT))}
    assert content["text"].splitlines() == [
        "answer: Gustave Eiffel",
        "stop_reason: answered",
        "evidence:",
        "- [eiffel] Eiffel Tower: Built by Gustave Eiffel.",
    ]
    assert body["result"]["structuredContent"] == compact_result(OUTPUT)


def test_a_paused_run_reads_as_paused_for_review() -> None:
    paused = {**OUTPUT, "stop_reason": "", "__interrupt__": [{"value": "review", "id": "i1"}]}
    body = json.loads(rewrite_tool_call(served_text(paused)) or b"null")
    text = body["result"]["content"][0]["text"]
    assert text.endswith("stop_reason: paused_for_review")
    assert body["result"]["structuredContent"]["stop_reason"] == "paused_for_review"


def test_other_answers_pass_unchanged() -> None:
    error = answer({"isError": True, "content": [{"type": "text", "text": "InputError"}]})
    other_graph = served_text({"messages": ["hi"]})
    tools_list = answer({"tools": [{"name": "standard_rag", "inputSchema": {}}]})
    two_parts = answer({"content": [{"type": "text", "text": repr(OUTPUT)}] * 2})
    for body in (error, other_graph, tools_list, two_parts, b"not json", b"[1]"):
        assert rewrite_tool_call(body) is None


def test_run_output_reads_json_or_a_repr_and_only_method_outputs() -> None:
    assert run_output(repr(OUTPUT)) == OUTPUT
    assert run_output(json.dumps(OUTPUT)) == OUTPUT
    assert run_output("{'answer': 'x'}") is None  # no stop_reason: not a method's output
    assert run_output("__import__('os').system('true')") is None  # never evaluated


async def fake_mcp(request: Request) -> Response:
    message = json.loads(await request.body())
    if message["method"] == "tools/call":
        content = [{"type": "text", "text": repr(OUTPUT)}]
        return JSONResponse({"jsonrpc": "2.0", "id": message["id"], "result": {"content": content}})
    return JSONResponse({"jsonrpc": "2.0", "id": message["id"], "result": {"tools": []}})


def client() -> httpx.AsyncClient:
    inner = Starlette(
        routes=[
            Route("/mcp", fake_mcp, methods=["POST"]),
            Route("/runs/wait", fake_mcp, methods=["POST"]),
        ]
    )
    transport = httpx.ASGITransport(app=McpToolText(inner))
    return httpx.AsyncClient(transport=transport, base_url="http://test")


async def test_middleware_rewrites_tools_call_at_mcp_only() -> None:
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "standard_rag"}}
    async with client() as http:
        rewritten = await http.post("/mcp", json=call)
        elsewhere = await http.post("/runs/wait", json=call)
        listed = await http.post("/mcp", json={**call, "method": "tools/list"})
    assert rewritten.status_code == 200
    assert rewritten.json()["result"]["content"][0]["text"].startswith("answer: Gustave Eiffel\n")
    assert int(rewritten.headers["content-length"]) == len(rewritten.content)
    assert elsewhere.json()["result"]["content"][0]["text"] == repr(OUTPUT)
    assert listed.json()["result"] == {"tools": []}


# -- StateGuard: a caller cannot write a run's state ------------------------------------------
RUN_PATHS = ["/runs", "/runs/wait", "/runs/stream", "/threads/t1/runs", "/threads/t1/runs/wait",
             "/threads/t1/runs/stream", "/deployment/api/runs/wait", "/runs/wait/"]  # fmt: skip
POISON = {"feedback": {"question": "q", "answer": "POISON", "chunk": "c", "source": "expert"}}
FORGED_COMMANDS = {
    "update": {"update": POISON},
    "goto": {"goto": "update_evidence_pool"},
    "send": {"goto": {"node": "generate_answer", "input": {"question": "x" * 1000}}},
    "goto_list": {"goto": ["retrieve", {"node": "retrieve", "input": {"iterations": -40}}]},
    "resume_and_update": {"resume": "ok", "update": {"iterations": -40}},
    "update_as_pairs": {"update": [["question", "forged"]]},
    "not_an_object": "update_evidence_pool",
}


@pytest.mark.parametrize("path", RUN_PATHS)
@pytest.mark.parametrize("command", FORGED_COMMANDS.values(), ids=FORGED_COMMANDS.keys())
async def test_a_run_request_that_writes_state_is_refused(path: str, command: Any) -> None:
    inner = Recorder()
    async with guarded(inner) as http:
        reply = await http.post(path, json={"assistant_id": "rag_ef", "command": command})
    assert reply.status_code == 403
    assert "a run's state is written by its graph only" in reply.json()["detail"]
    assert inner.requests == []


async def test_the_refusal_names_the_fields() -> None:
    async with guarded(Recorder()) as http:
        both = await http.post("/runs/wait", json={"command": {"update": {}, "goto": "x"}})
    assert both.json()["detail"].startswith("command.goto, command.update are refused: ")


@pytest.mark.parametrize("path", RUN_PATHS)
async def test_a_resume_alone_reaches_the_server_byte_for_byte(path: str) -> None:
    inner = Recorder()
    body = json.dumps(
        {"assistant_id": "rag_ef", "command": {"resume": {"approve": True}, "goto": None}}
    ).encode()
    async with guarded(inner) as http:
        reply = await http.post(path, content=body)
    assert reply.status_code == 200
    assert reply.text == "event: a\n\nevent: b\n\nevent: end\n\n"  # streamed chunks, all of them
    assert inner.requests == [("POST", path, body)]


async def test_a_plain_run_a_read_and_bad_json_pass_untouched() -> None:
    inner = Recorder()
    async with guarded(inner) as http:
        await http.post("/runs/wait", json={"assistant_id": "a", "input": {"question": "Who?"}})
        await http.get("/threads/t1/state")
        await http.post("/threads/t1/state/checkpoint", json={"checkpoint": {}})
        await http.post("/threads/t1/history", json={"limit": 5})
        await http.post("/runs/crons/search", json={})
        await http.post("/runs/wait", content=b"{not json")
    assert [(m, p) for m, p, _ in inner.requests] == [
        ("POST", "/runs/wait"), ("GET", "/threads/t1/state"),
        ("POST", "/threads/t1/state/checkpoint"), ("POST", "/threads/t1/history"),
        ("POST", "/runs/crons/search"), ("POST", "/runs/wait"),
    ]  # fmt: skip
    assert inner.requests[-1][2] == b"{not json"  # the server answers it


async def test_a_webhook_is_refused() -> None:
    inner = Recorder()
    async with guarded(inner) as http:
        reply = await http.post(
            "/threads/t1/runs", json={"assistant_id": "a", "webhook": "https://collector.test/"}
        )
    assert reply.status_code == 403 and reply.json()["detail"].startswith("webhook is refused")
    assert inner.requests == []


async def test_a_batch_with_one_forged_run_is_refused_whole() -> None:
    inner = Recorder()
    clean = {"assistant_id": "a", "input": {"question": "Who?"}}
    async with guarded(inner) as http:
        forged = await http.post("/runs/batch", json=[clean, {**clean, "command": {"goto": "x"}}])
        hooked = await http.post("/runs/batch", json=[{**clean, "webhook": "http://x.test"}])
        ok = await http.post("/runs/batch", json=[clean, clean])
    assert (forged.status_code, hooked.status_code, ok.status_code) == (403, 403, 200)
    assert len(inner.requests) == 1


async def test_thread_creation_with_supersteps_is_refused() -> None:
    inner = Recorder()
    superstep = {"updates": [{"values": POISON, "as_node": "update_evidence_pool"}]}
    async with guarded(inner) as http:
        forged = await http.post("/threads", json={"supersteps": [superstep]})
        plain = await http.post("/threads", json={"metadata": {"user": "u1"}})
    assert forged.status_code == 403 and forged.json()["detail"].startswith("supersteps")
    assert plain.status_code == 200 and len(inner.requests) == 1


@pytest.mark.parametrize(
    ("method", "path", "detail"),
    [("POST", "/threads/t1/state", "thread state updates are refused"),
     ("POST", "/threads/t1/state/", "thread state updates are refused"),
     ("POST", "/threads/t1/copy", "copying a thread is refused"),
     ("POST", "/runs/crons", "crons are off"), ("POST", "/threads/t1/runs/crons", "crons are off"),
     ("PATCH", "/runs/crons/c1", "crons are off")],
)  # fmt: skip
async def test_state_updates_copies_and_crons_are_refused_unread(
    method: str, path: str, detail: str
) -> None:
    inner = Recorder()
    async with guarded(inner) as http:
        reply = await http.request(method, path, json={"values": POISON, "as_node": "x"})
    assert reply.status_code == 403 and reply.json()["detail"].startswith(detail)
    assert inner.requests == []


def a2a_message(**extra: Any) -> dict[str, Any]:
    message = {"role": "user", "parts": [{"kind": "text", "text": "Who?"}], "messageId": "m1"}
    return {"jsonrpc": "2.0", "id": 1, "method": "message/send",
            "params": {"message": {**message, **extra}}}  # fmt: skip


async def test_an_a2a_message_carrying_a_command_is_refused() -> None:
    inner = Recorder()
    async with guarded(inner) as http:
        forged = await http.post("/a2a/rag_ef", json=a2a_message(command={"update": POISON}))
        resume = await http.post("/a2a/rag_ef", json=a2a_message(command={"resume": "yes"}))
        plain = await http.post("/a2a/rag_ef", json=a2a_message())
    assert forged.status_code == 403
    assert forged.json()["detail"].startswith("message.command.update is refused")
    assert (resume.status_code, plain.status_code) == (200, 200) and len(inner.requests) == 2


@pytest.mark.parametrize(
    "command",
    [{"id": 1, "method": "run.start", "params": {"assistant_id": "a", "input": {}, "update": POISON}},
     {"id": 2, "method": "run.start", "params": {"assistant_id": "a", "input": {},
                                                 "force_resume": True, "goto": "retrieve"}},
     {"id": 3, "method": "input.respond", "params": {"interrupt_id": "i", "response": "ok",
                                                     "goto": {"node": "x", "input": {}}}}],
)  # fmt: skip
async def test_a_streaming_protocol_command_that_writes_state_is_refused(
    command: dict[str, Any],
) -> None:
    inner = Recorder()
    async with guarded(inner) as http:
        reply = await http.post("/threads/t1/commands", json=command)
    assert reply.status_code == 403
    assert reply.json()["detail"].startswith(f"{command['method']} params.")
    assert inner.requests == []


def test_a_forged_command_frame_on_the_protocol_socket_is_answered_and_dropped() -> None:
    from starlette.testclient import TestClient

    inner = Recorder()
    forged = {"id": 7, "method": "input.respond",
              "params": {"interrupt_id": "i", "response": "ok", "update": POISON}}  # fmt: skip
    clean = {"id": 8, "method": "subscription.subscribe", "params": {"channels": ["values"]}}
    http = TestClient(StateGuard(inner))  # not entered: the stand-in has no lifespan
    with http.websocket_connect("/threads/t1/stream/events") as socket:
        socket.send_text(json.dumps(forged))
        error = socket.receive_json()
        socket.send_text(json.dumps(clean))
        ack = socket.receive_json()
    assert error["type"] == "error" and error["id"] == 7
    assert error["message"].startswith("input.respond params.update is refused")
    assert ack == {"ack": json.dumps(clean)} and inner.frames == [json.dumps(clean)]


async def test_a_body_over_the_limit_is_refused_and_a_chunked_one_reassembled() -> None:
    inner = Recorder()
    question = {"assistant_id": "a", "input": {"question": "x" * 600}}
    body = json.dumps(question).encode()

    async def chunks() -> Any:
        for i in range(0, len(body), 100):
            yield body[i : i + 100]

    async with guarded(inner, max_body_bytes=500) as http:
        big = await http.post("/runs/wait", content=body)
    async with guarded(inner, max_body_bytes=1000) as http:
        chunked = await http.post("/runs/wait", content=chunks())
    assert big.status_code == 413 and big.json()["detail"] == (
        "request body over 500 bytes is refused on this route"
    )
    assert chunked.status_code == 200 and inner.requests == [("POST", "/runs/wait", body)]


def test_the_shipped_server_guards_runs_and_closes_the_side_doors() -> None:
    from pathlib import Path

    from gaprag.server_app import app

    config = json.loads((Path(__file__).parents[2] / "langgraph.json").read_text())
    assert config["http"]["app"] == "gaprag.server_app:app"
    assert {k: v for k, v in config["http"].items() if k.startswith("disable_")} == {
        "disable_webhooks": True, "disable_a2a": True, "disable_store": True, "disable_ui": True,
    }  # fmt: skip
    assert config["http"]["middleware_order"] == "auth_first"  # gaprag's middleware sees the caller
    assert [m.cls for m in app.user_middleware] == [RouteGuard, StateGuard, McpToolText]
