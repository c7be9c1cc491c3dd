"""Every node of every method says what it reads from the state and what it writes, and every
state field has a description (the JSON schemas Studio shows carry it).

A node's docstring is one summary line, then ``Reads: `a`, `b`; writes: `c`.`` naming fields
of the method's state. The methods come from the registry, so a new method is held to it.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from collections.abc import Callable
from typing import Any, get_type_hints

import pytest

from gaprag import build_graph
from gaprag.graphs import METHODS, list_methods
from gaprag.nodes.gate import gate
from gaprag.nodes.reader import reader_node
from gaprag.nodes.select import select
from gaprag.nodes.short_answer import short_answer
from gaprag.stores import HashingEmbedder, Store
from gaprag.testing import ScriptedChatModel

AVAILABLE = list_methods()
#: the nodes the shared wiring adds (gaprag.nodes.wiring.add_nodes, add_short_answer)
SHARED: dict[str, Callable[..., Any]] = {
    "gate": gate,
    "reader": reader_node(),
    "select": select,
    "short_answer": short_answer,
}
#: nodes whose steps are documented where they are defined, not in one Reads/writes line
STEPWISE: set[tuple[str, str]] = set()
READS_WRITES = re.compile(r"^Reads:\s+(?P<reads>.+?);\s+writes:\s+(?P<writes>.+?)\.?$", re.DOTALL)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    docs = [{"id": "fr", "title": "France", "text": "Paris is the capital of France."}]
    root = tmp_path_factory.mktemp("node-docs")
    return Store.build(root / "store", docs, embedder=HashingEmbedder(), progress=False)


def package(method: str) -> Any:
    return importlib.import_module(METHODS[method]().__name__.rpartition(".")[0])


def node_functions(method: str, store: Store) -> dict[str, Callable[..., Any]]:
    """Each node of the method's graph: the function of that name in its ``nodes`` module, or
    the shared node."""
    graph = build_graph(method, llm=ScriptedChatModel(default="Paris"), retriever=store)
    own = importlib.import_module(f"{package(method).__name__}.nodes")
    found: dict[str, Callable[..., Any]] = {}
    for name in graph.builder.nodes:
        fn = SHARED.get(name) or getattr(own, name, None)
        assert callable(fn), f"{method}: no function for node {name!r}"
        found[name] = fn
    return found


def state_fields(method: str) -> set[str]:
    return {f.name for f in dataclasses.fields(package(method).State)}


def reads_and_writes(doc: str) -> tuple[list[str], list[str]] | None:
    for paragraph in doc.split("\n\n"):
        match = READS_WRITES.match(paragraph.strip())
        if match:
            return (
                re.findall(r"`(\w+)`", match["reads"]),
                re.findall(r"`(\w+)`", match["writes"]),
            )
    return None


@pytest.mark.parametrize("method", AVAILABLE)
def test_every_node_says_what_it_reads_and_writes(method: str, store: Store) -> None:
    fields = state_fields(method)
    for name, fn in node_functions(method, store).items():
        doc = inspect.getdoc(fn)
        assert doc, f"{method}: node {name} has no docstring"
        summary = doc.splitlines()[0]
        assert summary.strip() and (len(doc.splitlines()) == 1 or not doc.splitlines()[1]), (
            f"{method}: node {name}: one summary line, then a blank line"
        )
        if (method, name) in STEPWISE:
            continue
        found = reads_and_writes(doc)
        assert found, f"{method}: node {name}: no 'Reads: ...; writes: ...' paragraph"
        reads, writes = found
        assert reads and writes, f"{method}: node {name} names no field it reads or writes"
        unknown = sorted(set(reads + writes) - fields)
        assert unknown == [], f"{method}: node {name} names fields its state lacks"


def description(annotation: Any) -> str:
    for meta in getattr(annotation, "__metadata__", ()):
        text = getattr(meta, "description", None)
        if isinstance(text, str) and text.strip():
            return text
    return ""


@pytest.mark.parametrize("method", AVAILABLE)
def test_every_state_field_has_a_description(method: str) -> None:
    state = package(method).State
    hints = get_type_hints(state, include_extras=True)
    undescribed = [f.name for f in dataclasses.fields(state) if not description(hints[f.name])]
    assert undescribed == [], f"{method}: Annotated[..., Field(description=...)] missing"


@pytest.mark.parametrize("method", AVAILABLE)
def test_the_output_schema_describes_every_field(method: str, store: Store) -> None:
    graph = build_graph(method, llm=ScriptedChatModel(default="Paris"), retriever=store)
    for schema in (graph.get_input_jsonschema(), graph.get_output_jsonschema()):
        props = schema["properties"]
        assert [k for k, v in props.items() if not str(v.get("description", "")).strip()] == []


def test_the_reads_writes_line_is_parsed() -> None:
    doc = "Summary.\n\nReads: `question`, `evidence`; writes: `answer`\n(only when asked)."
    assert reads_and_writes(doc) == (["question", "evidence"], ["answer"])
    assert reads_and_writes("Summary.\n\nReads the question and writes the answer.") is None
