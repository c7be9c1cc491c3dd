"""Any MCP client: the official MCP Python client against `langgraph dev`'s ``/mcp`` endpoint.

The server (``served`` in ``tests/integration/conftest.py``) serves every method with the fake
OpenAI endpoint and a three-document store. A tool's text is what :func:`gaprag.as_tool`
returns for the same run (``gaprag.server_app`` shapes it); ``structuredContent`` carries the
compact result.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gaprag import as_tool
from tests.integration.conftest import CANNED, ROOT, Served

pytestmark = pytest.mark.integration

langgraph_sdk = pytest.importorskip("langgraph_sdk", reason="needs the studio extra")
mcp = pytest.importorskip("mcp", reason="needs the dev extra: mcp")

QUESTION = "Who built the Eiffel Tower in Paris?"
#: Assistants made for these tests: each method's settings over the served store. An assistant
#: is an MCP tool of its own name.
SETTINGS: dict[str, dict[str, Any]] = {
    "standard_rag": {"retrieval_mode": "bm25", "top_k": 2},
    "ircot": {"retrieval_mode": "bm25", "top_k": 1, "max_steps": 2},
}


def tool_name(method: str) -> str:
    return f"{method}_docs"


@pytest.fixture(scope="module")
def store_assistants(served: Served) -> dict[str, dict[str, Any]]:
    """One assistant per method of ``SETTINGS``, reading the served store; its context."""
    client = langgraph_sdk.get_sync_client(url=served.url)
    contexts = {}
    for method, settings in SETTINGS.items():
        context = {"store": str(served.store), **settings}
        client.assistants.create(method, context=context, name=tool_name(method))
        contexts[method] = context
    return contexts


def mcp_client(served: Served) -> Any:
    return mcp.Client(f"{served.url}/mcp")


def same_run(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two compact results agree on everything but the wall time."""
    strip = [{**x, "usage": {k: v for k, v in x["usage"].items() if k != "wall_s"}} for x in (a, b)]
    return strip[0] == strip[1]


async def test_tools_list_names_every_method_with_its_input_schema(served: Served) -> None:
    async with mcp_client(served) as client:
        listed = await client.list_tools()
    tools = {t.name: t for t in listed.tools}
    assert set(served.methods) <= set(tools)
    config = json.loads((ROOT / "langgraph.json").read_text())
    assert served.methods == list(config["graphs"])  # every graph langgraph.json lists
    assert {f"{m}_paper" for m in ("ircot", "migres")} <= set(tools)  # paper configurations
    for method in served.methods:
        tool = tools[method]
        assert tool.description == config["graphs"][method]["description"]
        schema = tool.input_schema
        assert schema["type"] == "object" and schema["required"] == ["question"]
        assert schema["properties"]["question"]["type"] == "string"


@pytest.mark.parametrize("method", list(SETTINGS))
async def test_tool_call_returns_what_as_tool_returns(
    served: Served,
    store_assistants: dict[str, dict[str, Any]],
    method: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = len(served.llm.requests)
    async with mcp_client(served) as client:
        result = await client.call_tool(tool_name(method), {"question": QUESTION})
    assert not result.is_error, result.content
    assert len(served.llm.requests) > before  # the run really called the endpoint
    [content] = result.content
    text = content.text

    # the same run in-process, through as_tool, against the same endpoint and store
    monkeypatch.setenv("GAPRAG_BASE_URL", served.llm.base_url)
    local = as_tool(method, **store_assistants[method])
    message = local.invoke({"type": "tool_call", "id": "c1", "name": local.name, "args": {"question": QUESTION}})  # fmt: skip
    assert text == message.content
    assert same_run(result.structured_content, message.artifact)

    lines = text.splitlines()
    assert lines[0] == f"answer: {CANNED}"
    assert lines[2] == "evidence:" and lines[3].startswith("- [eiffel] Eiffel Tower: ")
    if method == "standard_rag":
        assert lines[1] == "stop_reason: answered"
    else:  # the fake endpoint never states an answer: IRCoT runs to its bound
        assert lines[1] == "stop_reason: max_iterations"
        assert result.structured_content["iterations"] == 2


async def test_failed_run_is_a_tool_error_with_its_one_line(served: Served) -> None:
    """The server's MCP handler keeps only the exception's class name of a failed run;
    gaprag's middleware gives the tool error the run's one line."""
    async with mcp_client(served) as client:
        result = await client.call_tool("standard_rag", {"question": "   "})
    assert result.is_error
    [content] = result.content
    assert content.text.startswith("InputError: the question is empty"), content.text
    assert "\n" not in content.text
    assert result.structured_content is None
