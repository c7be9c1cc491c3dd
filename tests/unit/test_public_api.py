"""The public API is what the user documents use, each name importable from the one module
``docs/api.md`` gives; the pre-release aliases are gone; the version is written once."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import json
import re
import tomllib
from pathlib import Path

import pytest

import gaprag
from gaprag.graphs import METHODS, list_methods

ROOT = Path(__file__).resolve().parents[2]
API_PAGE = ROOT / "docs" / "api.md"
#: the methods whose package is gaprag.graphs.<method> (composed graphs have their own rows)
PACKAGES = {m for m, load in METHODS.items() if load().__name__.startswith("gaprag.graphs.")}
ROW = re.compile(r"^\| `(gaprag[\w.<>]*)` \| ([^|]+) \|", re.MULTILINE)


def documented() -> dict[str, set[str]]:
    """``{module: names}`` from the table of docs/api.md (``<method>``: every method)."""
    api: dict[str, set[str]] = {}
    for module, names in ROW.findall(API_PAGE.read_text(encoding="utf-8")):
        found = set(re.findall(r"`(\w+)`", names))
        targets = (
            [module.replace("<method>", m) for m in list_methods() if m in PACKAGES]
            if "<method>" in module
            else [module]
        )
        for target in targets:
            api.setdefault(target, set()).update(found)
    return api


def user_documents() -> list[Path]:
    docs = [p for p in (ROOT / "docs").rglob("*.md") if "results" not in p.parts]
    return [ROOT / "README.md", *docs, *sorted((ROOT / "notebooks").glob("*.ipynb"))]


def python_of(path: Path) -> str:
    """The Python a user document shows: a notebook's code cells, a page's code blocks."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    blocks = re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.DOTALL)
    return "\n".join(blocks)


def gaprag_imports(source: str) -> list[tuple[str, str]]:
    """Every ``from gaprag... import name`` in ``source``, line by line (blocks may be partial)."""
    found: list[tuple[str, str]] = []
    for statement in re.findall(r"^\s*from gaprag[\w.]* import [^\n]+", source, re.MULTILINE):
        tree = ast.parse(statement.strip().rstrip("\\"))
        node = tree.body[0]
        assert isinstance(node, ast.ImportFrom) and node.module
        found += [(node.module, alias.name) for alias in node.names]
    return found


def test_the_api_page_lists_the_names_the_task_names() -> None:
    api = documented()
    for module, name in [
        ("gaprag.stores", "Store"), ("gaprag.deps", "Deps"), ("gaprag.operator", "OperatorPolicy"),
        ("gaprag.stores", "PairStore"), ("gaprag.persistence", "thread_config"),
        ("gaprag.stores", "GapragRetriever"), ("gaprag.nodes", "compile_graph"),
        ("gaprag", "build_graph"),
    ]:  # fmt: skip
        assert name in api.get(module, set()), (module, name)


def test_every_documented_name_imports_from_its_module() -> None:
    api = documented()
    assert len(api) > 10
    for module, names in api.items():
        imported = importlib.import_module(module)
        for name in names:
            assert hasattr(imported, name), f"docs/api.md: {module}.{name} does not exist"


def test_each_name_has_one_documented_place() -> None:
    places: dict[str, list[str]] = {}
    for module, names in documented().items():
        if module.startswith(("gaprag.graphs.", "gaprag.composed.")):
            continue  # every method exports its own State, OutputState, Context and build
        for name in names:
            places.setdefault(name, []).append(module)
    assert {n: m for n, m in places.items() if len(m) > 1} == {}


def test_user_documents_import_only_documented_names_from_their_place() -> None:
    api = documented()
    seen = 0
    for path in user_documents():
        for module, name in gaprag_imports(python_of(path)):
            seen += 1
            assert name in api.get(module, set()), (
                f"{path.relative_to(ROOT)} imports {name} from {module}: "
                f"not in docs/api.md (or documented elsewhere)"
            )
    assert seen > 10


def test_the_readme_links_the_api_page() -> None:
    assert "(docs/api.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "module",
    [
        "gaprag.graphs.iterkey.parse",
        "gaprag.graphs.rfm_rag.features",
        "gaprag.graphs.rfm_rag.model",
        "gaprag.graphs.rfm_rag.rescore",
        "gaprag.graphs.rfm_rag.train",
        "gaprag.llm.accounting",
        "gaprag.eval.datasets",
        "gaprag.eval.metrics",
    ],
)
def test_the_pre_release_alias_modules_are_gone(module: str) -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(module)


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("gaprag.graphs.iterkey.state", "IterKeyState"),
        ("gaprag.graphs.iterkey.state", "IterKeyOutput"),
        ("gaprag.graphs.ircot.state", "IRCoTState"),
        ("gaprag.graphs.ircot.state", "IRCoTOutput"),
        ("gaprag.graphs.migres.state", "Output"),
        ("gaprag.graphs.missing_knowledge.graph", "route_after_judge"),
        ("gaprag.graphs.migres.nodes", "SEED_FACTS"),
        ("gaprag.graphs.migres.nodes", "RETRY_PREFIX"),
        ("gaprag.errors", "deprecated_names"),
    ],
)
def test_the_pre_release_alias_names_are_gone(module: str, name: str) -> None:
    assert not hasattr(importlib.import_module(module), name)


def test_answer_style_is_no_setting() -> None:
    from gaprag.context import BaseContext

    assert "answer_style" not in BaseContext.__dataclass_fields__


def test_the_version_is_written_once_in_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert gaprag.__version__ == importlib.metadata.version("gaprag")
    literal = re.compile(rf"""["']{re.escape(project["version"])}["']""")
    written = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "gaprag").rglob("*.py")
        if literal.search(p.read_text(encoding="utf-8"))
    ]
    assert written == []
