"""The built wheel installs into a clean virtual environment and works from outside the source
tree: every package-data file is in it, and ``gaprag ask`` answers over the bundled demo corpus.

The new environment has no pip and no packages of its own but gaprag: its dependencies come from
the environment running the tests (a ``.pth`` line after its own site-packages), so nothing is
downloaded and the installed gaprag is the wheel's, not the source tree's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai import FakeOpenAI

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc")


def package_files(root: Path) -> set[str]:
    """Every file of the ``gaprag`` package under ``root``, relative to ``root``."""
    return {
        p.relative_to(root).as_posix()
        for p in (root / "gaprag").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def run(argv: list[str | Path], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=300, check=False, **kwargs
    )
    assert done.returncode == 0, f"{argv}: {done.stderr[-2000:]}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built from a copy of the sources (the checkout gets no build files)."""
    src, dist = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "gaprag", src / "gaprag", ignore=SKIP)
    pip = [sys.executable, "-m", "pip"]
    run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", dist, src])
    (built,) = dist.glob("gaprag-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = tmp_path_factory.mktemp("venv") / "env"
    run([sys.executable, "-m", "venv", "--without-pip", env])
    python = env / "bin" / "python"
    site = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    deps = sysconfig.get_paths()["purelib"]  # after the new environment's own packages
    (Path(site.stdout.strip()) / "test-dependencies.pth").write_text(deps + "\n")
    run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-q", wheel])
    return env


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", GAPRAG_QUIET="1", **extra)
    return env


def test_the_wheel_holds_every_package_file(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = sorted(package_files(ROOT) - names)
    assert missing == []
    for data in ("gaprag/py.typed", "gaprag/nodes/prompts.toml", "gaprag/eval/templates"):
        assert any(n.startswith(data) for n in names), data


def test_the_installed_wheel_imports_its_own_files_from_outside_the_tree(
    venv: Path, tmp_path: Path
) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    probe = (
        "import json, gaprag, pathlib\n"
        "from gaprag.graphs import METHODS\n"
        "for load in METHODS.values(): load()\n"
        "print(json.dumps({'file': gaprag.__file__, 'version': gaprag.__version__}))\n"
    )
    out = json.loads(
        run([venv / "bin" / "python", "-c", probe], cwd=tmp_path, env=clean_env()).stdout
    )
    installed = Path(out["file"]).parent.parent
    assert installed.is_relative_to(venv) and out["version"] == version
    assert package_files(ROOT) <= package_files(installed)
    settings = run(
        [venv / "bin" / "gaprag", "settings", "iterkey", "--json"], cwd=tmp_path, env=clean_env()
    )
    assert "validation_threshold" in json.loads(settings.stdout)


def test_the_installed_wheel_answers_with_gaprag_ask(venv: Path, tmp_path: Path) -> None:
    with FakeOpenAI(reply="East African Breweries") as server:
        env = clean_env(GAPRAG_BASE_URL=server.base_url, GAPRAG_HOME=str(tmp_path / "home"))
        done = run(
            [venv / "bin" / "gaprag", "ask", "Who owns the Tusker beer brand?", "--json"],
            cwd=tmp_path,
            env=env,
        )
    out = json.loads(done.stdout)
    assert out["answer"] == "East African Breweries" and out["stop_reason"] == "answered"
    assert any("Tusker" in e["title"] for e in out["evidence"])  # the bundled demo corpus
    assert server.requests
