"""The contracts hold as written: the import contract sees every import (type-only ones
included), every public class's annotations resolve, and gaprag uses only LangGraph's and
LangChain's public, supported APIs."""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys
import tomllib
import typing
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import gaprag

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "gaprag"
FRAMEWORKS = ("langgraph", "langchain_core")


def modules() -> Iterator[ModuleType]:
    """Every module of gaprag, imported."""
    for info in pkgutil.walk_packages(gaprag.__path__, prefix="gaprag."):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            yield importlib.import_module(info.name)


def public_classes() -> list[type]:
    return [
        obj
        for module in modules()
        for name, obj in vars(module).items()
        if inspect.isclass(obj) and obj.__module__ == module.__name__ and not name.startswith("_")
    ]


def framework_imports() -> list[tuple[str, str, str]]:
    """``(file, module, name)`` for every ``from langgraph... import name`` (and
    langchain_core) in gaprag, and ``(file, module, "")`` for every ``import langgraph...``."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module.split(".")[0] in FRAMEWORKS:
                    found += [(where, node.module, alias.name) for alias in node.names]
            elif isinstance(node, ast.Import):
                found += [
                    (where, alias.name, "")
                    for alias in node.names
                    if alias.name.split(".")[0] in FRAMEWORKS
                ]
    return found


def marked_for_removal(module: ModuleType) -> set[str]:
    """Names a module still exports but says it will remove: those listed in its ``__all__``
    after a comment that says so (``langgraph.constants`` keeps ``CONFIG_KEY_CHECKPOINTER``
    there "for backwards compatibility, should be removed in v2")."""
    source = inspect.getsource(module)
    block = re.search(r"^__all__\s*=\s*[(\[](.*?)^[)\]]", source, re.S | re.M)
    out: set[str] = set()
    marked = False
    for line in (block.group(1) if block else "").splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            marked = "remove" in stripped.lower() or "deprecat" in stripped.lower()
        elif marked:
            out.update(re.findall(r"[\"'](\w+)[\"']", stripped))
    return out


# -- the import contract ------------------------------------------------------------------------
def test_the_import_contract_counts_type_checking_imports_and_holds() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert config["tool"]["importlinter"]["exclude_type_checking_imports"] is False
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    run = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


def test_no_module_imports_a_gaprag_module_by_name_at_run_time() -> None:
    """Every import of gaprag's own modules is an import statement, which the contract reads:
    none goes through ``importlib.import_module`` or ``__import__``."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = ast.unparse(node.func)
            if name.endswith("import_module") or name == "__import__":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, found


def test_every_public_class_has_annotations_that_resolve() -> None:
    classes = public_classes()
    assert len(classes) > 100
    failed = {}
    for cls in classes:
        try:
            typing.get_type_hints(cls)
        except Exception as exc:  # any failure is reported with its class
            failed[f"{cls.__module__}.{cls.__qualname__}"] = repr(exc)
    assert failed == {}


# -- only public LangGraph and LangChain APIs ---------------------------------------------------
def test_no_private_langgraph_or_langchain_module_is_named() -> None:
    private = re.compile(r"\b(?:langgraph|langchain_core)(?:\.\w+)*\._")
    hits = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if private.search(line)
    ]
    assert hits == []


def test_no_private_or_deprecated_framework_name_is_imported() -> None:
    imports = framework_imports()
    assert any(module.startswith("langgraph") for _, module, _ in imports)
    bad = []
    for where, module_name, name in imports:
        if any(part.startswith("_") for part in module_name.split(".")):
            bad.append(f"{where}: private module {module_name}")
            continue
        if not name:
            continue
        if name.startswith("_"):
            bad.append(f"{where}: private name {module_name}.{name}")
            continue
        module = importlib.import_module(module_name)
        if name in marked_for_removal(module):
            bad.append(f"{where}: {module_name}.{name} is marked for removal")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                obj = getattr(module, name, None)
            except Warning as warned:
                bad.append(f"{where}: {module_name}.{name} warns: {warned}")
                continue
        if getattr(obj, "__deprecated__", None):
            bad.append(f"{where}: {module_name}.{name} is deprecated: {obj.__deprecated__}")
    assert bad == []


def test_the_removal_marks_of_langgraph_are_read() -> None:
    """The check above reads the marks LangGraph writes (so it would catch the old import)."""
    constants = importlib.import_module("langgraph.constants")
    assert "CONFIG_KEY_CHECKPOINTER" in marked_for_removal(constants)
    assert "START" not in marked_for_removal(constants)
    with pytest.warns(DeprecationWarning):
        getattr(constants, "CONFIG_KEY_TASK_ID")  # noqa: B009  (a private constant, warns)
