"""How many runs one client keeps in flight on a served gaprag (``gaprag.auth.InFlight``):
over the limit a new run is refused with HTTP 429 and one line naming the setting; runs that
ended count no more; concurrent requests cannot slip past the count together; the caller of a
server without client tokens is not limited. No server: the server's runs are a dict here."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
from langgraph_sdk import Auth

from gaprag import auth
from gaprag.errors import GapragError
from tests.guard import Credentials, Recorder, User, guarded


@dataclass
class Server:
    """The runs LangGraph's server holds, by owner, and a clock the test moves."""

    runs: dict[str, dict[str, str]]
    now: float = 0.0

    async def runs_of(self, identity: str) -> dict[str, str]:
        await asyncio.sleep(0)  # another request may run meanwhile, as in the server
        return dict(self.runs.get(identity, {}))


def limited(server: Server, limit: int | None) -> auth.InFlight:
    return auth.InFlight(lambda: limit, runs_of=server.runs_of, clock=lambda: server.now)


async def refused(in_flight: auth.InFlight, identity: str, run_id: str) -> str | None:
    try:
        await in_flight.admit(identity, run_id)
    except Auth.exceptions.HTTPException as err:
        assert err.status_code == 429
        return str(err.detail)
    return None


async def test_a_client_over_its_limit_is_refused_with_one_line() -> None:
    server = Server({"alice": {"a1": "running", "a2": "pending", "a0": "success"}})
    in_flight = limited(server, 2)
    detail = await refused(in_flight, "alice", "a3")
    assert detail is not None and "\n" not in detail
    assert "alice has 2 runs in flight" in detail and "GAPRAG_CLIENT_MAX_INFLIGHT=2" in detail
    assert await refused(in_flight, "bob", "b1") is None  # another client's own count
    server.runs["alice"]["a1"] = "success"
    assert await refused(in_flight, "alice", "a3") is None  # an ended run counts no more


async def test_concurrent_requests_cannot_slip_past_the_limit_together() -> None:
    server = Server({})
    in_flight = limited(server, 3)
    answers = await asyncio.gather(*(refused(in_flight, "alice", f"a{i}") for i in range(8)))
    assert sum(a is None for a in answers) == 3
    server.runs["alice"] = {"a0": "running", "a1": "running", "a2": "success"}  # now stored
    assert await refused(in_flight, "alice", "a9") is None  # a2 ended: one slot is free
    assert await refused(in_flight, "alice", "a10") is not None


async def test_an_admitted_run_the_server_never_stored_counts_only_briefly() -> None:
    server = Server({})
    in_flight = limited(server, 1)
    assert await refused(in_flight, "alice", "a1") is None
    assert await refused(in_flight, "alice", "a2") is not None
    server.now += auth.ADMIT_GRACE_S  # the server refused a1 after the check, say
    assert await refused(in_flight, "alice", "a2") is None


async def test_no_limit_admits_every_run() -> None:
    server = Server({"alice": {f"a{i}": "running" for i in range(50)}})
    assert await refused(limited(server, None), "alice", "new") is None


def ctx(identity: str, permissions: list[str]) -> Auth.types.AuthContext:
    user: Any = type("User", (), {"identity": identity, "is_authenticated": True})()
    return Auth.types.AuthContext(
        permissions=permissions, user=user, resource="threads", action="create_run"
    )


async def test_clients_runs_count_and_the_one_machines_do_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = Server({"alice": {"a1": "running"}, auth.LOCAL: {"l1": "running"}})
    monkeypatch.setattr(auth, "in_flight", limited(server, 1))
    own_threads: Any = auth.own_threads  # the handler as the server calls it
    with pytest.raises(Auth.exceptions.HTTPException) as err:
        await own_threads(ctx("alice", [auth.CLIENT]), {"run_id": "a2", "metadata": {}})
    assert err.value.status_code == 429
    filters = await own_threads(ctx(auth.LOCAL, []), {"run_id": "l2", "metadata": {}})
    assert filters == {auth.OWNER: auth.LOCAL}


@pytest.mark.parametrize(
    ("raw", "limit"), [("", auth.SERVED_CLIENT_MAX_INFLIGHT), ("4", 4), (" 4 ", 4), ("0", None)]
)
def test_the_limit_comes_from_the_operators_environment(raw: str, limit: int | None) -> None:
    assert auth.load_max_inflight({"GAPRAG_CLIENT_MAX_INFLIGHT": raw}) == limit


@pytest.mark.parametrize("raw", ["-1", "ten", "2.5"])
def test_a_bad_limit_is_one_line_with_a_hint(raw: str) -> None:
    with pytest.raises(GapragError, match="GAPRAG_CLIENT_MAX_INFLIGHT") as err:
        auth.load_max_inflight({"GAPRAG_CLIENT_MAX_INFLIGHT": raw})
    assert err.value.hint and "\n" not in str(err.value)


async def test_an_mcp_call_at_the_limit_is_a_429_with_a_json_rpc_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = Server({"alice": {"a1": "running"}})
    monkeypatch.setattr(auth, "in_flight", limited(server, 1))
    inner = Recorder()
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "standard_rag", "arguments": {"question": "x"}}}  # fmt: skip
    alice = {"auth": Credentials([auth.CLIENT]), "user": User()}
    async with guarded(inner, alice) as http:
        busy = await http.post("/mcp", json=call)
        listed = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 8, "method": "tools/list"})
        server.runs["alice"]["a1"] = "success"
        freed = await http.post("/mcp", json=call)
    assert busy.status_code == 429
    error = busy.json()
    assert error["id"] == 7 and "GAPRAG_CLIENT_MAX_INFLIGHT=1" in error["error"]["message"]
    assert listed.status_code == freed.status_code == 200
    assert [path for _, path, _ in inner.requests] == ["/mcp", "/mcp"]
