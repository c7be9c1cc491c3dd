"""Load a repository script (``scripts/``, ``benchmarks/``) as a module, for tests of its
functions; the script's ``main`` still runs only when a test calls it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str) -> ModuleType:
    """``relative``: the script's path from the repository root, e.g. ``scripts/x.py``."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
