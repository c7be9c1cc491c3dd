"""CPU threads: the embedder and cross-encoder (torch) leave an LLM server on the same machine
its cores in the processes gaprag owns; the embedded llama.cpp server's threads are a setting."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from gaprag import config
from gaprag.llm import server


@pytest.fixture(autouse=True)
def _unowned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts as a library user's process: not gaprag's, no LLM server started."""
    monkeypatch.setattr(config, "_torch", {"managed": False, "embedded_llm_threads": 0})
    for name in ("GAPRAG_TORCH_THREADS", "GAPRAG_LLAMA_THREADS", "GAPRAG_BASE_URL",
                 "OPENAI_BASE_URL"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(config, "cpu_cores", lambda: 8)


def test_a_library_users_torch_keeps_its_threads_unless_told() -> None:
    config.embedded_llm_started(8)
    assert config.torch_threads() is None


def test_the_setting_wins_in_any_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GAPRAG_TORCH_THREADS", "3")
    assert config.torch_threads() == 3
    config.manage_torch_threads()
    config.embedded_llm_started(8)
    assert config.torch_threads() == 3


def test_gaprags_own_process_leaves_the_llm_server_its_cores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config.manage_torch_threads()
    monkeypatch.setenv("GAPRAG_BASE_URL", "https://llm.example.org/v1")
    assert config.torch_threads() is None  # the LLM runs elsewhere: torch's own count
    monkeypatch.setenv("GAPRAG_BASE_URL", "http://127.0.0.1:8080/v1")
    assert config.torch_threads() == 1  # a server on this machine
    monkeypatch.setenv("GAPRAG_BASE_URL", "http://localhost:8080/v1")
    assert config.torch_threads() == 1
    monkeypatch.delenv("GAPRAG_BASE_URL")
    assert config.torch_threads() is None  # e.g. `gaprag index`: no LLM server running yet
    config.embedded_llm_started(8)
    assert config.torch_threads() == 1  # every core is the server's: torch keeps one
    config.embedded_llm_started(5)
    assert config.torch_threads() == 3


def test_the_embedded_server_takes_its_threads_from_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GAPRAG_LOCAL_ENGINE", "xllamacpp")
    monkeypatch.setenv("GAPRAG_LOCAL_MODEL", "smollm2-135m")
    assert server.local_server_config().threads == 8  # every core by default
    monkeypatch.setenv("GAPRAG_LLAMA_THREADS", "7")
    assert server.local_server_config().threads == 7
    monkeypatch.setenv("GAPRAG_LLAMA_THREADS", "zero")
    assert server.local_server_config().threads == 8


@pytest.fixture
def torch_threads_restored() -> Iterator[int]:
    torch = pytest.importorskip("torch")
    before = int(torch.get_num_threads())
    yield before
    torch.set_num_threads(before)


def test_the_count_reaches_a_worker_thread_that_computed_before(
    monkeypatch: pytest.MonkeyPatch, torch_threads_restored: int
) -> None:
    import torch

    if torch_threads_restored < 2:
        pytest.skip("needs a machine where torch uses 2 or more threads")
    a = torch.ones(64, 64)
    with ThreadPoolExecutor(1) as worker:  # like asyncio.to_thread's pool
        assert worker.submit(lambda: (a @ a, torch.get_num_threads())[1]).result() >= 2
        monkeypatch.setenv("GAPRAG_TORCH_THREADS", "1")
        torch.set_num_threads(1)  # in this thread only: the worker keeps its own count
        assert worker.submit(torch.get_num_threads).result() >= 2
        after = worker.submit(lambda: (config.apply_torch_threads(), torch.get_num_threads()))
        assert after.result()[1] == 1


def test_the_gaprag_command_and_the_served_graphs_are_gaprags_processes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import importlib

    from gaprag import cli, studio

    assert cli.main(["llm", "models"]) == 0
    capsys.readouterr()
    assert config._torch["managed"] is True
    config._torch["managed"] = False
    importlib.reload(studio)  # what `langgraph dev` does: import the graphs' module
    assert config._torch["managed"] is True
