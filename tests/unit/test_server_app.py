"""The server's MCP answers as gaprag tool text (``gaprag.server_app``), without a server:
the middleware wraps a stand-in for the LangGraph server's ``/mcp`` handler."""

from __future__ import annotations

import json
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gaprag.server_app import McpToolText, rewrite_tool_call, run_output
from gaprag.tool import compact_result, format_result

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
