"""The local model registry: assembly from parts, checksum verification, refusal on mismatch."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from gaprag.errors import GapragError
from gaprag.llm import registry
from gaprag.llm.registry import LocalModel, ensure_model


def _fake_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunks: list[bytes]
) -> tuple[tuple[str, str], ...]:
    parts = []
    for i, chunk in enumerate(chunks, 1):
        pkg = tmp_path / "site" / f"fakepart{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(chunk)
        parts.append((f"fakepart{i}", f"data/part{i:02d}.bin"))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    for name in list(sys.modules):
        if name.startswith("fakepart"):
            del sys.modules[name]
    return tuple(parts)


def _register(
    monkeypatch: pytest.MonkeyPatch,
    parts: tuple[tuple[str, str], ...],
    payload: bytes,
    sha: str | None = None,
) -> LocalModel:
    model = LocalModel(
        name="fake-model", description="test", packages=("fakepart1",), parts=parts, filename="fake.gguf",
        size=len(payload), sha256=sha or hashlib.sha256(payload).hexdigest(), chat_format="chatml",
    )  # fmt: skip
    monkeypatch.setitem(registry.MODELS, model.name, model)
    return model


def test_assembles_split_model_and_verifies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chunks = [b"GGUF" + b"a" * 100, b"b" * 50, b"c" * 7]
    _register(monkeypatch, _fake_parts(tmp_path, monkeypatch, chunks), b"".join(chunks))
    path = ensure_model("fake-model", quiet=True)
    assert path.read_bytes() == b"".join(chunks)
    assert path.parent.parent.name != "site"  # assembled under GAPRAG_HOME
    assert ensure_model("fake-model", quiet=True) == path  # reused


def test_refuses_checksum_mismatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chunks = [b"x" * 10, b"y" * 10]
    _register(
        monkeypatch, _fake_parts(tmp_path, monkeypatch, chunks), b"".join(chunks), sha="0" * 64
    )
    with pytest.raises(GapragError) as err:
        ensure_model("fake-model", quiet=True)
    assert "refusing" in str(err.value)
    assert not list((tmp_path).rglob("fake.gguf"))  # nothing half-written left behind


def test_tampered_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chunks = [b"x" * 10, b"y" * 10]
    _register(monkeypatch, _fake_parts(tmp_path, monkeypatch, chunks), b"".join(chunks))
    path = ensure_model("fake-model", quiet=True)
    path.write_bytes(b"z" * 20)  # same size, other bytes
    with pytest.raises(GapragError):
        ensure_model("fake-model", quiet=True)


def test_unknown_and_missing_models() -> None:
    with pytest.raises(GapragError) as err:
        ensure_model("gpt-17")
    assert "qwen2.5-coder-1.5b" in err.value.hint
    assert set(registry.MODELS) >= {"qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "smollm2-135m"}


def test_llama_cpp_without_server_extra_is_not_an_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from gaprag.llm import server

    real = importlib.util.find_spec

    def fake(name: str, *args: object) -> object:
        if name == "fastapi":
            return None
        if name in ("llama_cpp", "xllamacpp"):
            return object()
        return real(name)

    monkeypatch.setattr(server.importlib.util, "find_spec", fake)
    monkeypatch.setattr(server, "llama_server_binary", lambda: None)  # a native build may exist
    assert server.available_engines() == ["xllamacpp"]
