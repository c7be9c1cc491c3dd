"""What LangGraph Studio reads from the served graphs: langgraph.json, schemas, drawn edges."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, Literal, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph

import gaprag
import gaprag.studio as studio
from gaprag.context import field_range

ROOT = Path(__file__).resolve().parents[2]
AVAILABLE = gaprag.list_methods()
OUTPUT_FIELDS = ("answer", "stop_reason", "iterations", "queries", "evidence", "usage")


def conditional_edges(graph: Any) -> list[tuple[str, str]]:
    """(source, target) of every router-driven edge, from the builder's declared ends.

    Raises if a router declares no ends (no ``Literal`` return type and no path map): Studio
    cannot draw such an edge.
    """
    out: list[tuple[str, str]] = []
    for source, branches in graph.builder.branches.items():
        for name, spec in branches.items():
            if spec.ends is None:
                raise AssertionError(f"router {name!r} after {source!r} declares no targets")
            out += [(source, target) for target in spec.ends.values()]
    for source, node_spec in graph.builder.nodes.items():  # Command[Literal[...]] nodes
        out += [(source, target) for target in node_spec.ends or ()]
    return out


def drawn_conditional(mermaid: str) -> set[tuple[str, str]]:
    """Dotted edges in a mermaid drawing: ``a -.-> b;`` or ``a -. label .-> b;``."""
    pattern = re.compile(r"^\s*(\S+) -\.(?: .*? \.)?-> (\S+);$", re.MULTILINE)
    return set(pattern.findall(mermaid))


# -- langgraph.json ------------------------------------------------------------------------
def test_langgraph_json_lists_every_method_in_studio_module() -> None:
    config = json.loads((ROOT / "langgraph.json").read_text())
    assert config["dependencies"] == ["."]
    # every registered method in registry order, then each paper configuration
    served = [*AVAILABLE, *(f"{m}_paper" for m in studio.PAPER_METHODS)]
    assert list(config["graphs"]) == served
    for name, spec in config["graphs"].items():
        assert spec["path"] == f"./gaprag/studio.py:{name}"
        assert spec["description"].strip()
    assert (ROOT / "gaprag" / "studio.py").is_file()
    assert list(studio.GRAPH_NAMES) == served


def test_paper_graphs_are_served_in_the_paper_configuration() -> None:
    from gaprag.context import effective_settings

    assert set(studio.PAPER_METHODS) == {
        "missing_knowledge", "iterkey", "rag_ef", "migres", "rfm_rag", "ircot",
    }  # fmt: skip
    for method in studio.PAPER_METHODS:
        graph = studio.GRAPHS[f"{method}_paper"]
        settings = effective_settings(graph.builder.context_schema)
        assert settings["reader"] == {"value": "paper", "source": "profile paper"}
        assert settings["gate"] == {"value": "off", "source": "profile paper"}
        assert vars(studio)[f"{method}_paper"] is graph
        assert graph.name == f"{method}_paper"  # its assistant's and MCP tool's name


def test_served_config_serves_the_chosen_graphs_from_any_folder(tmp_path: Path) -> None:
    from gaprag.testing import served_config

    path = served_config(ROOT / "langgraph.json", ["ircot", "migres"], tmp_path)
    config = json.loads(path.read_text())
    assert path == tmp_path / "langgraph.json" and list(config["graphs"]) == ["ircot", "migres"]
    assert config["dependencies"] == [str(ROOT)]
    assert config["graphs"]["ircot"]["path"] == f"{ROOT / 'gaprag' / 'studio.py'}:ircot"
    assert config["http"] == json.loads((ROOT / "langgraph.json").read_text())["http"]


def test_langgraph_api_dir_is_git_ignored() -> None:
    ignored = (ROOT / ".gitignore").read_text().split()
    assert ".langgraph_api/" in ignored


@pytest.mark.parametrize("method", AVAILABLE)
def test_served_graph_is_a_module_global_without_checkpointer(method: str) -> None:
    # the server looks graphs up in the module __dict__, not via getattr
    graph = vars(studio)[method]
    assert graph is studio.GRAPHS[method]
    assert graph.checkpointer is None and graph.store is None
    assert graph.name == method


def test_unknown_graph_attribute_is_an_attribute_error() -> None:
    name = "not_a_method"
    with pytest.raises(AttributeError):
        getattr(studio, name)


# -- schemas (Studio's forms) ---------------------------------------------------------------
@pytest.mark.parametrize("method", AVAILABLE)
def test_every_context_field_has_a_description(method: str) -> None:
    schema = studio.GRAPHS[method].get_context_jsonschema()
    assert schema is not None
    props = schema["properties"]
    assert {"base_url", "model", "store"} <= set(props)
    undescribed = [name for name, p in props.items() if not str(p.get("description", "")).strip()]
    assert undescribed == []
    no_default = [name for name, p in props.items() if "default" not in p]
    assert no_default == []  # every setting has the paper's default, so the form is complete


@pytest.mark.parametrize("method", AVAILABLE)
def test_input_schema_asks_for_a_described_question(method: str) -> None:
    schema = studio.GRAPHS[method].get_input_jsonschema()
    assert schema["required"] == ["question"]
    assert schema["properties"]["question"]["description"]


@pytest.mark.parametrize("method", AVAILABLE)
def test_output_schema_builds_and_describes_the_common_fields(method: str) -> None:
    schema = studio.GRAPHS[method].get_output_jsonschema()
    props = schema["properties"]
    assert set(OUTPUT_FIELDS) <= set(props)
    undescribed = [f for f in OUTPUT_FIELDS if not str(props[f].get("description", "")).strip()]
    assert undescribed == []


# -- drawn graph ----------------------------------------------------------------------------
@pytest.mark.parametrize("method", AVAILABLE)
def test_every_conditional_edge_is_drawn(method: str) -> None:
    graph = studio.GRAPHS[method]
    expected = set(conditional_edges(graph))
    mermaid = graph.get_graph().draw_mermaid()
    assert expected <= drawn_conditional(mermaid)
    for node in graph.builder.nodes:
        assert re.search(rf"^\s*{re.escape(node)}\(", mermaid, re.MULTILINE), node


def test_standard_rag_draws_a_straight_line() -> None:
    mermaid = studio.GRAPHS["standard_rag"].get_graph().draw_mermaid()
    assert "__start__ --> retrieve;" in mermaid
    assert "retrieve --> generate_answer;" in mermaid
    assert "generate_answer --> reader;" in mermaid
    assert "reader --> short_answer;" in mermaid
    assert "short_answer --> __end__;" in mermaid
    assert drawn_conditional(mermaid) == set()


class _S(TypedDict):
    n: int


def _loop_graph(typed: bool) -> Any:
    def typed_router(state: _S) -> Literal["work", "__end__"]:
        return "work" if state["n"] < 2 else "__end__"

    def untyped_router(state: _S):  # type: ignore[no-untyped-def]
        return "work" if state["n"] < 2 else END

    builder = StateGraph(_S)
    builder.add_node("work", lambda s: {"n": s["n"] + 1})
    builder.add_edge(START, "work")
    builder.add_conditional_edges("work", typed_router if typed else untyped_router)
    return builder.compile()


def test_edge_checker_sees_typed_routers_and_rejects_untyped_ones() -> None:
    typed = _loop_graph(typed=True)
    assert set(conditional_edges(typed)) == {("work", "work"), ("work", "__end__")}
    assert drawn_conditional(typed.get_graph().draw_mermaid()) == {
        ("work", "work"),
        ("work", "__end__"),
    }
    with pytest.raises(AssertionError, match="declares no targets"):
        conditional_edges(_loop_graph(typed=False))


def _schema_bound(prop: dict[str, Any], key: str) -> Any:
    """A JSON-schema bound of a property, also inside ``anyOf`` (an optional number)."""
    if key in prop:
        return prop[key]
    return next((p[key] for p in prop.get("anyOf", []) if key in p), None)


@pytest.mark.parametrize("method", AVAILABLE)
def test_form_shows_each_settings_minimum_and_maximum(method: str) -> None:
    graph = studio.GRAPHS[method]
    schema = graph.get_context_jsonschema()
    assert schema is not None and graph.builder.context_schema is not None
    props = schema["properties"]
    bounded = 0
    for f in dataclasses.fields(graph.builder.context_schema):
        minimum, maximum = field_range(f)
        assert _schema_bound(props[f.name], "minimum") == minimum, f.name
        assert _schema_bound(props[f.name], "maximum") == maximum, f.name
        bounded += maximum is not None
    assert bounded >= (0 if method == "standard_rag" else 1)  # every loop bound has a maximum
