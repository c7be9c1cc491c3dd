"""Load a repository script (``scripts/``, ``benchmarks/``) as a module, for tests of its
functions; the script's ``main`` still runs only when a test calls it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str) -> ModuleType:
    """``relative``: the script's path from the repository root, e.g. ``scripts/x.py``. The
    script's directory is put on ``sys.path`` as ``python <script>`` does, so a script can
    import its neighbours."""
    path = ROOT / relative
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    # registered under its own name (dataclasses look their module up in sys.modules)
    name = f"_script_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
