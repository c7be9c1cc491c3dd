"""Between clients of one server: the operator's assistants stay as the operator made them,
no assistant shadows a graph, cancel-all needs clients told apart, and no route takes a body
over 1 MiB (``gaprag.server_app``, without a server); and who a caller is (``gaprag.auth``)."""

from __future__ import annotations

import importlib.util
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import Auth

from gaprag import auth
from gaprag.errors import GapragError
from gaprag.server_app import (
    CANCEL_ALL,
    MAX_BODY_BYTES,
    NAMESPACE_GRAPH,
    SYSTEM_ASSISTANT,
)
from tests.guard import Credentials, Recorder, User, guarded

GRAPHS = {"standard_rag": "x.py:a", "ircot": "x.py:b"}
SYSTEM_ID = str(uuid.uuid5(NAMESPACE_GRAPH, "standard_rag"))


@pytest.fixture(autouse=True)
def _graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    from gaprag import server_app

    monkeypatch.setenv("LANGSERVE_GRAPHS", json.dumps(GRAPHS))
    server_app.graph_ids.cache_clear()


def detail(reply: httpx.Response) -> str:
    assert reply.status_code == 403, reply.text
    text = reply.json()["detail"]
    assert isinstance(text, str) and "\n" not in text
    return str(text)


@pytest.mark.parametrize("target", [SYSTEM_ID, SYSTEM_ID.upper(), SYSTEM_ID.replace("-", ""),
                                    "standard_rag", "ircot"])  # fmt: skip
async def test_the_operators_assistants_cannot_be_edited_deleted_or_versioned(target: str) -> None:
    inner = Recorder()
    async with guarded(inner) as http:
        edit = await http.patch(f"/assistants/{target}", json={"context": {"top_k": 2.5}})
        gone = await http.delete(f"/assistants/{target}")
        latest = await http.post(f"/assistants/{target}/latest", json={"version": 1})
    assert detail(edit) == detail(gone) == detail(latest) == SYSTEM_ASSISTANT
    assert inner.requests == []


async def test_an_assistant_named_like_a_graph_is_refused_and_others_pass() -> None:
    inner = Recorder()
    mine = str(uuid.uuid4())
    async with guarded(inner) as http:
        shadow = await http.post("/assistants", json={"graph_id": "ircot", "name": "standard_rag"})
        rename = await http.patch(f"/assistants/{mine}", json={"name": " ircot "})
        other = await http.post("/assistants", json={"graph_id": "ircot", "name": "my ircot"})
        edit = await http.patch(f"/assistants/{mine}", json={"context": {"top_k": 3}})
    assert detail(shadow).startswith("the assistant name 'standard_rag' reads as the graph")
    assert detail(rename).startswith("the assistant name 'ircot' reads as the graph 'ircot'")
    assert other.status_code == edit.status_code == 200
    assert [r[:2] for r in inner.requests] == [("POST", "/assistants"),
                                               ("PATCH", f"/assistants/{mine}")]  # fmt: skip


LOOK_ALIKES = [
    "standard_rag\u200b",  # a zero-width space after it
    "ｓｔａｎｄａｒｄ_ｒａｇ",  # full-width letters
    "Standard_RAG",  # another case
    "\u202egar_dradnats",  # a right-to-left override
    "standard rag",  # a space where LangGraph's tool name has "_"
    "standard\trag",  # a tab
    "ſtandard_rag",  # a long s, folded to s
]


@pytest.mark.parametrize("name", LOOK_ALIKES)
async def test_a_name_that_passes_for_a_graphs_is_refused(name: str) -> None:
    inner = Recorder()
    async with guarded(inner) as http:
        made = await http.post("/assistants", json={"graph_id": "ircot", "name": name})
        renamed = await http.patch(f"/assistants/{uuid.uuid4()}", json={"name": name})
    assert detail(made) == detail(renamed)
    assert "reads as the graph 'standard_rag'" in detail(made) or "invisible" in detail(made)
    assert inner.requests == []


def test_hidden_characters_are_named_and_visible_names_pass() -> None:
    refused = auth.name_refusal("my\u2066rag", [], "the graph")
    assert refused is not None and "U+2066" in refused
    assert auth.name_refusal("Recherche en français", ["standard_rag"], "the graph") is None
    assert auth.name_refusal("mine", ["MINE"], "the assistant") == (
        "the assistant name 'mine' reads as the assistant 'MINE': choose another name"
    )


def test_gaprags_tool_names_are_langgraphs() -> None:
    langgraph_api = pytest.importorskip("langgraph_api", reason="needs the studio extra")
    spec = importlib.util.spec_from_file_location(
        "sanitizers", Path(langgraph_api.__file__).parent / "api/mcp/_sanitizers.py"
    )
    assert spec is not None and spec.loader is not None
    sanitizers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sanitizers)  # the module alone: the package needs a server's config
    for name in [*LOOK_ALIKES, " a  b\nc ", "x" * 200, "é-tude.v2", "", "\u3000"]:
        assert auth.mcp_tool_name(name) == sanitizers.normalize_name(name), name


async def test_cancel_by_status_needs_clients_told_apart() -> None:
    inner = Recorder()
    own = {"thread_id": str(uuid.uuid4()), "run_ids": [str(uuid.uuid4())]}
    async with guarded(inner) as http:
        everyone = await http.post("/runs/cancel", json={"status": "all"})
        pending = await http.post("/runs/cancel", json={"status": "pending"})
        mine = await http.post("/runs/cancel", json=own)
    assert detail(everyone) == detail(pending) == CANCEL_ALL
    assert mine.status_code == 200
    client = {"auth": Credentials([auth.CLIENT]), "user": User()}
    async with guarded(inner, client) as http:
        scoped = await http.post("/runs/cancel", json={"status": "all"})
    assert scoped.status_code == 200  # LangGraph's owner filter limits it to alice's runs
    local = {"auth": Credentials([]), "user": User()}
    async with guarded(inner, local) as http:
        assert detail(await http.post("/runs/cancel", json={"status": "all"})) == CANCEL_ALL


@pytest.mark.parametrize("path", ["/assistants", "/threads/search", "/assistants/x/versions"])
async def test_a_body_over_one_mib_is_refused_on_every_route(path: str) -> None:
    inner = Recorder()
    async with guarded(inner) as http:
        reply = await http.post(path, content=b"x" * (MAX_BODY_BYTES + 1))
    assert reply.status_code == 413 and "request body over" in reply.json()["detail"]
    assert inner.requests == []


async def test_an_oversized_mcp_call_is_a_413_with_a_json_rpc_error() -> None:
    inner = Recorder()
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "standard_rag", "arguments": {"question": "x" * 3_000_000}}}  # fmt: skip
    async with guarded(inner) as http:
        reply = await http.post("/mcp", json=call)
    assert reply.status_code == 413
    body = reply.json()
    assert body["jsonrpc"] == "2.0" and body["error"]["code"] == -32600
    assert "request body over" in body["error"]["message"] and inner.requests == []


# -- gaprag.auth ----------------------------------------------------------------------------
TOKEN_A, TOKEN_B = "a" * 24, "b" * 24


def test_clients_come_from_the_variable_and_the_file(tmp_path: Any) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# team\nbob {TOKEN_B}\n")
    clients = auth.load_clients(
        {"GAPRAG_CLIENT_TOKENS": f"alice={TOKEN_A}", "GAPRAG_CLIENT_TOKENS_FILE": str(tokens)}
    )
    assert clients.identify(TOKEN_A) == "alice" and clients.identify(TOKEN_B) == "bob"
    assert clients.identify("c" * 24) is None and clients.identify(None) is None
    assert not auth.load_clients({})


@pytest.mark.parametrize(
    ("text", "error"),
    [("alice=short", "shorter than 16"), (f"local={TOKEN_A}", "is not a client name"),
     (f"alice={TOKEN_A},bob={TOKEN_A}", "share a token"), (f"a b={TOKEN_A}", "has spaces")],
)  # fmt: skip
def test_bad_client_tokens_stop_the_server_with_one_line(text: str, error: str) -> None:
    with pytest.raises(GapragError, match=error) as err:
        auth.load_clients({"GAPRAG_CLIENT_TOKENS": text})
    assert "\n" not in err.value.message


def test_a_caller_is_identified_by_token_or_as_the_local_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    here, away = {"client": ("127.0.0.1", 5000)}, {"client": ("10.1.2.3", 5000)}
    monkeypatch.setattr(auth, "clients", lambda: auth.Clients({}))
    assert auth.identify(None, {}, here)["identity"] == auth.LOCAL
    with pytest.raises(Auth.exceptions.HTTPException) as refused:
        auth.identify(None, {}, away)
    assert refused.value.status_code == 403
    monkeypatch.setenv("GAPRAG_OPEN_SERVER", "yes please")
    with pytest.raises(GapragError, match="GAPRAG_OPEN_SERVER='yes please' is neither on nor"):
        auth.identify(None, {}, away)
    monkeypatch.setenv("GAPRAG_OPEN_SERVER", "1")
    assert auth.identify(None, {}, away)["identity"] == auth.LOCAL
    known = auth.load_clients({"GAPRAG_CLIENT_TOKENS": f"alice={TOKEN_A}"})
    monkeypatch.setattr(auth, "clients", lambda: known)
    assert auth.identify(f"Bearer {TOKEN_A}", {}, away) == {
        "identity": "alice", "permissions": [auth.CLIENT],
    }  # fmt: skip
    assert auth.identify(None, {b"x-api-key": TOKEN_A.encode()}, away)["identity"] == "alice"
    for authorization in (None, "Bearer wrong-token-0123456789", TOKEN_A):
        with pytest.raises(Auth.exceptions.HTTPException) as missing:
            auth.identify(authorization, {}, here)  # a token is needed on loopback too
        assert missing.value.status_code == 401
