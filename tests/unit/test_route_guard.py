"""The routes beside LangGraph's API answer only the callers the API answers
(``gaprag.route_guard``, without a server): health checks answer everyone; ``/internal/*`` and
``/deploy`` answer no client and, on one machine, only its loopback caller; ``/metrics`` only the
clients the operator names; ``/info``, ``/docs`` and ``/openapi.json`` a caller with a token."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gaprag import auth, route_guard
from gaprag.errors import GapragError
from gaprag.route_guard import METRICS_CLIENTS, NOT_FOR_CLIENTS, NOT_FOR_PROXIED, RouteGuard
from tests.guard import Credentials, Recorder, User

ALICE, BOB = "alice-token-0123456789abcdef", "bob-token-0123456789abcdef"
BESIDE_THE_API = ["/info", "/docs", "/openapi.json"]
MACHINE_ONLY = [("GET", "/internal/debug/thread/t1"), ("POST", "/internal/truncate"),
                ("GET", "/deploy"), ("POST", "/deploy"), ("GET", "/deploy/op1/stream")]  # fmt: skip


@pytest.fixture
def tokens(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    known = auth.load_clients({"GAPRAG_CLIENT_TOKENS": f"alice={ALICE},bob={BOB}"})
    monkeypatch.setattr(auth, "clients", lambda: known)
    route_guard.allowed_metrics_clients.cache_clear()
    yield
    route_guard.allowed_metrics_clients.cache_clear()


@pytest.fixture
def one_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auth, "clients", lambda: auth.Clients({}))
    monkeypatch.delenv("GAPRAG_OPEN_SERVER", raising=False)


def guarded(inner: Recorder, address: str = "127.0.0.1", **scope: Any) -> httpx.AsyncClient:
    """A client of ``RouteGuard(inner)`` calling from ``address``; ``scope``: what LangGraph's
    authentication adds on its API's routes."""
    guard = RouteGuard(inner)

    async def app(s: Any, receive: Any, send: Any) -> None:
        await guard({**s, "client": (address, 5000), **scope}, receive, send)

    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.usefixtures("tokens")
async def test_with_client_tokens_the_machines_own_routes_answer_no_caller() -> None:
    inner = Recorder()
    async with guarded(inner) as http:
        for method, path in MACHINE_ONLY:
            anonymous = await http.request(method, path)
            alice = await http.request(method, path, headers=bearer(ALICE))
            assert anonymous.status_code == 401, (path, anonymous.text)
            assert alice.status_code == 403 and alice.json() == {"detail": NOT_FOR_CLIENTS}
    assert inner.requests == []


@pytest.mark.usefixtures("tokens")
async def test_with_client_tokens_the_api_description_needs_a_token() -> None:
    inner = Recorder()
    async with guarded(inner) as http:
        for path in BESIDE_THE_API:
            anonymous = await http.get(path)
            wrong = await http.get(path, headers=bearer("wrong-token-0123456789"))
            assert anonymous.status_code == wrong.status_code == 401, path
            assert anonymous.headers["www-authenticate"] == "Bearer"
            assert (await http.get(path, headers={"x-api-key": BOB})).status_code == 200
    assert [p for _, p, _ in inner.requests] == BESIDE_THE_API


async def test_metrics_answer_only_the_clients_the_operator_names(
    tokens: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GAPRAG_METRICS_CLIENTS", "bob")
    inner = Recorder()
    async with guarded(inner) as http:
        anonymous = await http.get("/metrics")
        alice = await http.get("/metrics", headers=bearer(ALICE))
        bob = await http.get("/metrics", headers=bearer(BOB))
    assert anonymous.status_code == 401
    assert alice.status_code == 403 and alice.json() == {"detail": METRICS_CLIENTS}
    assert bob.status_code == 200 and len(inner.requests) == 1


def test_a_metrics_client_list_with_a_bad_name_is_a_one_line_error() -> None:
    with pytest.raises(GapragError, match="GAPRAG_METRICS_CLIENTS: 'a b' is not a client name"):
        route_guard.metrics_clients({"GAPRAG_METRICS_CLIENTS": "ops, a b"})
    assert route_guard.metrics_clients({"GAPRAG_METRICS_CLIENTS": " ops,bob "}) == {"ops", "bob"}


@pytest.mark.usefixtures("tokens")
async def test_health_checks_answer_every_caller() -> None:
    inner = Recorder()
    async with guarded(inner, address="203.0.113.9") as http:
        replies = [await http.get(path) for path in ("/ok", "/")]
    assert [r.status_code for r in replies] == [200, 200]


@pytest.mark.usefixtures("tokens")
async def test_the_api_checked_by_langgraph_passes_but_never_to_the_machines_routes() -> None:
    inner = Recorder()
    checked = {"auth": Credentials([auth.CLIENT]), "user": User()}
    async with guarded(inner, **checked) as http:
        api = await http.post("/threads/search", json={})
        internal = await http.post("/internal/truncate")
    assert api.status_code == 200 and internal.status_code == 401
    assert [p for _, p, _ in inner.requests] == ["/threads/search"]


@pytest.mark.usefixtures("tokens")
async def test_routes_under_a_mount_prefix_are_guarded_alike() -> None:
    inner = Recorder()
    async with guarded(inner, root_path="/gaprag") as http:
        internal = await http.post("/gaprag/internal/truncate", headers=bearer(ALICE))
        health = await http.get("/gaprag/ok")
    assert internal.status_code == 403 and health.status_code == 200


@pytest.mark.usefixtures("one_machine")
async def test_on_one_machine_its_own_routes_answer_the_loopback_caller_alone() -> None:
    inner = Recorder()
    async with guarded(inner) as local, guarded(inner, address="203.0.113.9") as remote:
        for method, path in MACHINE_ONLY + [("GET", p) for p in [*BESIDE_THE_API, "/metrics"]]:
            assert (await local.request(method, path)).status_code == 200, path
            assert (await remote.request(method, path)).status_code == 403, path
    assert len(inner.requests) == len(MACHINE_ONLY) + len(BESIDE_THE_API) + 1


async def test_behind_an_open_server_the_machines_routes_answer_no_one(
    one_machine: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GAPRAG_OPEN_SERVER", "1")
    inner = Recorder()
    async with guarded(inner, address="203.0.113.9") as http:
        truncate = await http.post("/internal/truncate")
        info = await http.get("/info")
    assert truncate.status_code == 403 and truncate.json() == {"detail": NOT_FOR_PROXIED}
    assert info.status_code == 200 and [p for _, p, _ in inner.requests] == ["/info"]
