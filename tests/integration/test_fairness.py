"""Two clients of one served gaprag under load: one client's heavy runs leave the other's fast.

``langgraph dev --n-jobs-per-worker 32`` (as ``docs/studio.md`` recommends) serves the
shipped ``langgraph.json`` with client tokens for ``alice`` and ``bob``; a fake endpoint in its
own process answers every chat call after 0.5 s. Bob's ``standard_rag`` run is timed alone;
then Alice starts background runs of ``migres`` and ``ircot`` (tens of LLM calls each) with
every numeric setting at its maximum, two more than her in-flight limit. The server holds the
first 10 and refuses the rest with HTTP 429; each of Bob's runs, timed again meanwhile, takes
at most 3x his median time alone. Once Alice cancels hers, she may start runs again.

On an endpoint that serves one request at a time (the fake endpoint with ``--slots 1``, 0.3 s a
call; the server told so by ``GAPRAG_ENDPOINT_SLOTS=1``), the calls waiting for the slot take
turns across clients: Bob's plain run beside Alice's 10 ``missing_knowledge`` runs at their
maximum settings still takes at most 3x his time alone, and her runs all finish.
"""

from __future__ import annotations

import contextlib
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gaprag.auth import SERVED_CLIENT_MAX_INFLIGHT
from gaprag.server_app import NAMESPACE_GRAPH
from tests.integration.conftest import CANNED, ROOT, Served, free_port, serve, wait_http_ok

pytestmark = pytest.mark.integration

pytest.importorskip("langgraph_api", reason="needs the studio extra: langgraph-cli[inmem]")

ALICE, BOB = "alice-token-0123456789abcdef", "bob-token-0123456789abcdef"
QUESTION = {"question": "Who built the Eiffel Tower?"}
LATENCY_S = 0.5
HEAVY = ("migres", "ircot")  # with the endpoint's reply: 26-45 LLM calls each
ALICE_RUNS = SERVED_CLIENT_MAX_INFLIGHT + 2
TIMED = 3  # Bob's runs timed alone (their median counts), and again under load (the slowest)
MAX_SLOWDOWN = 3.0
ONE_SLOT_LATENCY_S = 0.3
ONE_SLOT_HEAVY = "missing_knowledge"
ONE_SLOT_RUNS = SERVED_CLIENT_MAX_INFLIGHT  # all held: none refused
FINISH_S = 150.0  # for Alice's runs to end, each call after the slot's others


@contextlib.contextmanager
def slow_endpoint(latency: float, slots: int | None = None) -> Iterator[str]:
    """``tests/fake_openai.py`` as its own process, answering ``CANNED`` after ``latency``;
    ``slots``: requests it serves at once (None: all)."""
    port = free_port()
    limit = ("--slots", str(slots)) if slots is not None else ()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fake_openai", "--port", str(port),
         "--latency", str(latency), "--reply", CANNED, *limit],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/v1/models", 30, alive=lambda: proc.poll() is None)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def served_busy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with slow_endpoint(LATENCY_S) as url:
        operator = {
            "GAPRAG_STORE": "STORE",
            "GAPRAG_BASE_URL": url,
            "GAPRAG_CLIENT_TOKENS": f"alice={ALICE},bob={BOB}",
        }
        args = ("--n-jobs-per-worker", "32")
        with serve(tmp_path_factory.mktemp("fairness"), operator, args) as server:
            yield server


@pytest.fixture(scope="module")
def served_one_slot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The endpoint serves one request at a time, and the operator says so."""
    with slow_endpoint(ONE_SLOT_LATENCY_S, slots=1) as url:
        operator = {
            "GAPRAG_STORE": "STORE",
            "GAPRAG_BASE_URL": url,
            "GAPRAG_ENDPOINT_SLOTS": "1",
            "GAPRAG_CLIENT_TOKENS": f"alice={ALICE},bob={BOB}",
        }
        args = ("--n-jobs-per-worker", "32")
        with serve(tmp_path_factory.mktemp("fairness-one-slot"), operator, args) as server:
            yield server


def client(served: Served, token: str) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.Client(base_url=served.url, headers=headers, timeout=120)


def ok(reply: httpx.Response) -> Any:
    assert reply.status_code == 200, reply.text
    return reply.json()


def timed_run(http: httpx.Client) -> float:
    start = time.perf_counter()
    out = ok(http.post("/runs/wait", json={"assistant_id": "standard_rag", "input": QUESTION}))
    assert out["answer"] == CANNED, out
    return time.perf_counter() - start


def maxima(http: httpx.Client, graph: str) -> dict[str, Any]:
    """Every numeric run setting of ``graph`` at the maximum its served schema allows."""
    assistant = str(uuid.uuid5(NAMESPACE_GRAPH, graph))
    schema = ok(http.get(f"/assistants/{assistant}/schemas"))["context_schema"]
    return {
        name: prop["maximum"]
        for name, prop in schema["properties"].items()
        if prop.get("type") in ("integer", "number") and "maximum" in prop
    }


def start_heavy(alice: httpx.Client, graph: str, settings: dict[str, Any]) -> httpx.Response:
    thread = ok(alice.post("/threads", json={}))["thread_id"]
    body = {"assistant_id": graph, "input": QUESTION, "context": settings}
    return alice.post(f"/threads/{thread}/runs", json=body)


def admitted_within(alice: httpx.Client, runs: int, timeout_s: float) -> int:
    """How many of ``runs`` new runs the server admits within ``timeout_s`` (a cancelled run
    stops counting once its worker has stopped it)."""
    admitted, deadline = 0, time.monotonic() + timeout_s
    while admitted < runs and time.monotonic() < deadline:
        reply = start_heavy(alice, "standard_rag", {})
        if reply.status_code == 429:
            time.sleep(0.5)
            continue
        ok(reply)
        admitted += 1
    return admitted


def test_one_clients_heavy_runs_leave_anothers_run_fast(served_busy: Served) -> None:
    with client(served_busy, ALICE) as alice, client(served_busy, BOB) as bob:
        timed_run(bob)  # the first run loads what every run uses
        alone = statistics.median(timed_run(bob) for _ in range(TIMED))
        held: list[dict[str, Any]] = []
        refused: list[httpx.Response] = []
        settings = {graph: maxima(alice, graph) for graph in HEAVY}
        try:
            for i in range(ALICE_RUNS):
                graph = HEAVY[i % len(HEAVY)]
                reply = start_heavy(alice, graph, settings[graph])
                if reply.status_code == 429:
                    refused.append(reply)
                else:
                    held.append(ok(reply))
            time.sleep(2 * LATENCY_S)  # her runs are under way
            statuses = [
                ok(alice.get(f"/threads/{r['thread_id']}/runs/{r['run_id']}"))["status"]
                for r in held
            ]
            busy = [timed_run(bob) for _ in range(TIMED)]
        finally:
            for run in held:
                alice.post(f"/threads/{run['thread_id']}/runs/{run['run_id']}/cancel")
        again = admitted_within(alice, 3, timeout_s=30)
    under_load = max(busy)
    print(f"\nbob's standard_rag alone {alone:.2f} s, beside alice's {len(held)} runs at most "
          f"{under_load:.2f} s ({', '.join(f'{t:.2f}' for t in busy)}); her runs: {statuses}")  # fmt: skip
    assert len(held) == SERVED_CLIENT_MAX_INFLIGHT and len(refused) == 2
    assert set(statuses) <= {"pending", "running"}, statuses  # all in flight as Bob starts
    for reply in refused:
        detail = reply.json()["detail"]
        assert "\n" not in detail and "GAPRAG_CLIENT_MAX_INFLIGHT" in detail, detail
    assert under_load <= MAX_SLOWDOWN * alone, (alone, busy)
    assert again == 3  # cancelled runs count no more


def wait_ended(http: httpx.Client, runs: list[dict[str, Any]], timeout_s: float) -> list[str]:
    """The status of each run once none is pending or running (or ``timeout_s`` passed)."""
    deadline = time.monotonic() + timeout_s
    while True:
        statuses = [
            ok(http.get(f"/threads/{r['thread_id']}/runs/{r['run_id']}"))["status"] for r in runs
        ]
        if not {"pending", "running"} & set(statuses) or time.monotonic() > deadline:
            return statuses
        time.sleep(1.0)


def test_on_a_one_slot_endpoint_clients_take_turns_at_the_model(served_one_slot: Served) -> None:
    with client(served_one_slot, ALICE) as alice, client(served_one_slot, BOB) as bob:
        timed_run(bob)  # the first run loads what every run uses
        alone = statistics.median(timed_run(bob) for _ in range(TIMED))
        settings = maxima(alice, ONE_SLOT_HEAVY)
        started = time.monotonic()
        held = [ok(start_heavy(alice, ONE_SLOT_HEAVY, settings)) for _ in range(ONE_SLOT_RUNS)]
        try:
            time.sleep(4 * ONE_SLOT_LATENCY_S)  # her calls queue for the slot
            busy = [timed_run(bob) for _ in range(TIMED)]
            statuses = wait_ended(alice, held, FINISH_S)
        finally:
            for run in held:
                alice.post(f"/threads/{run['thread_id']}/runs/{run['run_id']}/cancel")
        finished = time.monotonic() - started
    under_load = max(busy)
    print(f"\none slot: bob's standard_rag alone {alone:.2f} s, beside alice's {len(held)} "
          f"{ONE_SLOT_HEAVY} runs at most {under_load:.2f} s ({under_load / alone:.1f}x; "
          f"{', '.join(f'{t:.2f}' for t in busy)}); her runs ended in {finished:.0f} s: {statuses}")  # fmt: skip
    assert under_load <= MAX_SLOWDOWN * alone, (alone, busy)
    assert statuses == ["success"] * ONE_SLOT_RUNS, statuses
