"""Every method package follows one layout (docs/architecture.md, "Method convention").

The methods come from the registry, so a new method is held to the same convention:
its package exports ``State``, ``OutputState``, ``Context`` and ``build``; each router is
``route_after_<node>`` for the node it follows, defined in ``graph.py`` with a docstring; a
parser module is ``parsing.py``; the graph is compiled by :func:`gaprag.nodes.compile_graph`.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import re
from types import ModuleType
from typing import Any, Literal, get_origin, get_type_hints

import pytest

import gaprag.nodes
from gaprag import build_graph
from gaprag.graphs import METHODS, context_class, list_methods
from gaprag.stores import HashingEmbedder, Store
from gaprag.stores.documents import Document
from gaprag.testing import ScriptedChatModel

AVAILABLE = list_methods()
EXPORTS = ("State", "OutputState", "Context", "build")
#: nodes the shared wiring adds together with their router (gaprag.nodes.wiring.add_nodes)
SHARED_SOURCES = {"gate"}
PARSER = re.compile(r"^pars(e|er|ers|ing)$")
DOCS: list[Document] = [
    {"id": "fr", "title": "France", "text": "Paris is the capital and largest city of France."},
    {"id": "de", "title": "Germany", "text": "Berlin is the capital of Germany."},
]


def graph_module(method: str) -> ModuleType:
    return METHODS[method]()


def package(method: str) -> ModuleType:
    return importlib.import_module(graph_module(method).__name__.rpartition(".")[0])


def keys(schema: type[Any]) -> set[str]:
    """The fields of a state schema (a dataclass or a TypedDict)."""
    if dataclasses.is_dataclass(schema):
        return {f.name for f in dataclasses.fields(schema)}
    return set(get_type_hints(schema))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    root = tmp_path_factory.mktemp("convention-store")
    return Store.build(root / "store", DOCS, embedder=HashingEmbedder(), progress=False)


def compiled(method: str, store: Store) -> Any:
    return build_graph(method, llm=ScriptedChatModel(default="Paris"), retriever=store)


def test_the_registry_lists_methods() -> None:
    assert AVAILABLE and set(AVAILABLE) == set(METHODS)


@pytest.mark.parametrize("method", AVAILABLE)
def test_package_exports_state_output_context_and_build(method: str) -> None:
    pkg, module = package(method), graph_module(method)
    assert set(EXPORTS) <= set(pkg.__all__), pkg.__name__
    assert pkg.Context is context_class(method) is module.Context
    assert pkg.build is module.build
    assert list(inspect.signature(pkg.build).parameters) == ["deps", "context", "checkpointer"]
    assert keys(pkg.OutputState) <= keys(pkg.State)


@pytest.mark.parametrize("method", AVAILABLE)
def test_graph_uses_the_exported_schemas(method: str, store: Store) -> None:
    pkg, graph = package(method), compiled(method, store)
    assert graph.builder.state_schema is pkg.State
    assert graph.builder.output_schema is pkg.OutputState
    assert issubclass(graph.builder.context_schema, pkg.Context)  # with the build's defaults


@pytest.mark.parametrize("method", AVAILABLE)
def test_routers_are_named_after_the_node_they_follow(method: str, store: Store) -> None:
    module, graph = graph_module(method), compiled(method, store)
    for source, branches in graph.builder.branches.items():
        for name in branches:
            assert name == f"route_after_{source}", (method, source, name)
            if source in SHARED_SOURCES:
                continue
            router = getattr(module, name, None)
            assert inspect.isfunction(router), f"{method}: {name} is not defined in graph.py"
            assert router.__module__ == module.__name__, (method, name)
            assert inspect.getdoc(router), f"{method}: {name} has no docstring"
            assert get_origin(get_type_hints(router)["return"]) is Literal, (method, name)


@pytest.mark.parametrize("method", AVAILABLE)
def test_a_parser_module_is_named_parsing(method: str) -> None:
    pkg = package(method)
    modules = [i.name for i in pkgutil.walk_packages(pkg.__path__, prefix=f"{pkg.__name__}.")]
    others = [
        m for m in modules if PARSER.match(m.rpartition(".")[2]) and not m.endswith(".parsing")
    ]
    assert not others, f"{method}: parser modules are named parsing.py"


@pytest.mark.parametrize("method", AVAILABLE)
def test_graph_is_compiled_by_compile_graph(
    method: str, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = graph_module(method)
    assert module.compile_graph is gaprag.nodes.compile_graph, method
    names: list[str] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        names.append(kwargs["name"])
        return gaprag.nodes.compile_graph(*args, **kwargs)

    monkeypatch.setattr(module, "compile_graph", spy)
    graph = compiled(method, store)
    assert names == [method]
    assert graph.name == method and graph.config["recursion_limit"] > 0
