"""`langgraph dev` serves every method graph: a real server, a fake OpenAI endpoint, a real store.

The server is started exactly as docs/studio.md says (offline, no browser, no reload) from a
copy of the repository's langgraph.json that keeps the methods importable today (all six once
they exist) with absolute paths, so the server's ``.langgraph_api/`` lands in a temp dir.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import gaprag
from gaprag.stores import HashingEmbedder, Store
from tests.fake_openai import FakeOpenAI
from tests.integration.conftest import free_port, wait_http_ok

pytestmark = pytest.mark.integration

langgraph_sdk = pytest.importorskip("langgraph_sdk", reason="needs the studio extra")
pytest.importorskip("langgraph_api", reason="needs the studio extra: langgraph-cli[inmem]")

ROOT = Path(__file__).resolve().parents[2]
LANGGRAPH = Path(sys.executable).with_name("langgraph")
CANNED = "Gustave Eiffel"
STARTUP_S = 120.0  # shared 2-core CI machines can be slow to import everything

DOCS = [
    {"id": "eiffel", "title": "Eiffel Tower", "text": "The Eiffel Tower in Paris was built by the engineer Gustave Eiffel."},
    {"id": "fr", "title": "France", "text": "Paris is the capital and largest city of France."},
    {"id": "hamlet", "title": "Hamlet", "text": "Hamlet is a tragedy written by William Shakespeare."},
]  # fmt: skip


@dataclass
class Served:
    url: str
    llm: FakeOpenAI
    store: Path
    methods: list[str]
    log: Path
    home: Path


def served_config(tmp: Path, methods: list[str]) -> Path:
    """The repository's langgraph.json, limited to ``methods``, with absolute paths."""
    config = json.loads((ROOT / "langgraph.json").read_text())
    graphs = {}
    for name in methods:
        spec = dict(config["graphs"][name])
        rel, _, attr = spec["path"].partition(":")
        spec["path"] = f"{(ROOT / rel).resolve()}:{attr}"
        graphs[name] = spec
    config["graphs"] = graphs
    config["dependencies"] = [str(ROOT)]
    path = tmp / "langgraph.json"
    path.write_text(json.dumps(config, indent=2))
    return path


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    if not LANGGRAPH.exists():
        pytest.skip(f"{LANGGRAPH} not found: pip install -e '.[studio]'")
    tmp = tmp_path_factory.mktemp("studio")
    store = tmp / "store"
    Store.build(store, DOCS, embedder=HashingEmbedder(), progress=False)  # type: ignore[arg-type]
    methods = gaprag.list_methods()
    config = served_config(tmp, methods)
    port = free_port()
    log = tmp / "langgraph-dev.log"
    with FakeOpenAI(reply=CANNED) as llm:
        env = {
            **os.environ,
            "GAPRAG_BASE_URL": llm.base_url,
            "GAPRAG_HOME": str(tmp / "home"),
            "LANGGRAPH_CLI_NO_ANALYTICS": "1",
            "LANGGRAPH_NO_VERSION_CHECK": "1",
            "HF_HUB_OFFLINE": "1",
        }
        env.pop("OPENAI_BASE_URL", None)
        with log.open("w") as out:
            proc = subprocess.Popen(
                [str(LANGGRAPH), "dev", "--no-browser", "--no-reload", "--port", str(port),
                 "--config", str(config)],
                cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}"
            try:
                wait_http_ok(f"{url}/ok", STARTUP_S, alive=lambda: proc.poll() is None)
            except (TimeoutError, RuntimeError) as exc:
                raise AssertionError(
                    f"{exc}\n--- server log ---\n{log.read_text()[-4000:]}"
                ) from None
            yield Served(url=url, llm=llm, store=store, methods=methods, log=log, home=tmp / "home")
        finally:
            os.killpg(proc.pid, signal.SIGTERM)  # the server and its workers, nothing else
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
    assert proc.returncode is not None


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
    assert [next(iter(u)) for u in updates] == ["retrieve", "generate_answer", "short_answer"]
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


@pytest.mark.parametrize("method", gaprag.list_methods())
def test_run_on_the_default_demo_store_without_allow_blocking(
    client: Any, served: Served, method: str
) -> None:
    """The default setup, as docs/studio.md starts it (no ``--allow-blocking``, so any blocking
    call on the server's event loop fails the run): no store in the context, so the first run
    builds the bundled demo store into GAPRAG_HOME, and every method answers from it."""
    out = client.runs.wait(
        None, method, input={"question": "Who built the Eiffel Tower?"}, raise_error=False
    )
    log = served.log.read_text()
    assert "Blocking call" not in log, log[-3000:]
    assert "__error__" not in out, f"{out}\n{log[-3000:]}"
    assert out["answer"] and out["stop_reason"]
    assert sorted(p.name.split("-")[0] for p in (served.home / "stores").iterdir()) == ["demo"]
