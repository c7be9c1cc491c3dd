"""Every loop and fan-out bound a method's settings allow works when a run sets it, and every
numeric setting is typed and bounded.

The bounds are collected from the registry (every context field that bounds how often a step
runs: ``describe(..., repeats=True)``, each with a ``maximum``), so a new method's bounds are
covered or :func:`test_every_bound_has_a_scripted_run` fails. Each bound is
set at RUN time (``context=``) to three times its default and to its maximum, with scripted
models that never let the loop stop early; the run must reach the bound and finish (no
``GraphRecursionError``). A value above the maximum is refused with a one-line InputError.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NotRequired

import pytest
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.types import Command
from typing_extensions import TypedDict

from gaprag import build_graph, list_methods
from gaprag.context import (
    BaseContext,
    describe,
    field_range,
    numeric_kind,
    repeat_bounds,
    resolve_context,
)
from gaprag.errors import InputError
from gaprag.graphs import METHODS, context_class
from gaprag.nodes.wiring import STEP_MARGIN, compile_graph
from gaprag.operator import OperatorPolicy, with_policy
from gaprag.stores import HashingEmbedder, Store
from gaprag.stores.documents import Document
from gaprag.stores.pairs import PairStore
from gaprag.testing import ScriptedChatModel

QUESTION = "Which river flows through the city of Cairo?"
DOCS: list[Document] = [
    {
        "id": f"d{i}",
        "title": f"Cairo {i}",
        "text": f"Record {i}: the river near the city of Cairo is discussed in this passage.",
    }
    for i in range(60)
]


def counted(make: Callable[[int], str]) -> Callable[[list[BaseMessage]], str]:
    """A reply that differs on every call (``make(n)`` for the n-th call)."""
    counter = itertools.count()
    return lambda _messages: make(next(counter))


def many_lines(n: int) -> str:
    return "\n".join(f"where exactly does fact {n}-{i} about Cairo come from" for i in range(40))


@dataclass
class Case:
    """How one bound is forced to its value: the graph's objects and the run's other settings,
    and what in the output counts up to the bound."""

    llm: Callable[[], ScriptedChatModel]
    reached: Callable[[dict[str, Any], ScriptedChatModel], int]
    context: dict[str, Any] = field(default_factory=dict)
    default: int | None = None  # the effective default when the field's default means "auto"
    objects: Callable[[Path], dict[str, Any]] = lambda _root: {}
    resume: bool = False  # the loop pauses for a reviewer each round (RAG-EF)


class OneScorer:
    """MIGRES's knowledge filter keeping every passage (no embedder or cross-encoder)."""

    name = "fake"
    default_delta = 0.5

    def score(self, query: str, docs: Any) -> list[float]:
        return [1.0 for _ in docs]


def _pairs(root: Path) -> dict[str, Any]:
    store = PairStore.open(root / "pairs.sqlite", embedder=HashingEmbedder())
    store.add("Which river flows through Cairo?", "Nile", DOCS[0]["text"], source="synthetic")
    return {"pair_store": store}


def _mk_judge(_messages: list[BaseMessage]) -> str:
    body = {
        "thought": "the context lacks it",
        "judge": False,
        "missing_knowledge": ["the river"],
        "query": [f"which river is record {i} about" for i in range(40)],
    }
    return "```json\n" + json.dumps(body) + "\n```"


CASES: dict[tuple[str, str], Case] = {
    # the chain never states its answer, so every step retrieves again
    ("ircot", "max_steps"): Case(
        llm=lambda: ScriptedChatModel(default="The passages mention Cairo."),
        reached=lambda out, _: out["iterations"],
    ),
    # the validator always says False
    ("iterkey", "max_iterations"): Case(
        llm=lambda: ScriptedChatModel(default="False"),
        reached=lambda out, _: out["iterations"],
    ),
    # doc_by_doc regeneration: one keyword call per passage shown in the round
    ("iterkey", "top_k"): Case(
        llm=lambda: ScriptedChatModel(default="False"),
        context={"regeneration_mode": "doc_by_doc", "max_iterations": 2},
        reached=lambda _, llm: sum("the document below was retrieved" in p for p in llm.prompts()),
    ),
    # no reply ever makes the known information enough: T judge rounds
    ("migres", "max_iterations"): Case(
        llm=lambda: ScriptedChatModel(default=""),
        context={"verifier": "off"},
        default=5,  # 0 = the task's T (multihop: 5)
        objects=lambda _root: {"scorer": OneScorer()},
        reached=lambda out, _: out["judge_rounds"],
    ),
    # the query call offers many new queries; one judge round, then one retrieval round
    ("migres", "max_queries"): Case(
        llm=lambda: ScriptedChatModel(
            rules=[("You write short search queries.", counted(many_lines))], default=""
        ),
        context={"verifier": "off", "max_iterations": 1},
        objects=lambda _root: {"scorer": OneScorer()},
        reached=lambda out, _: len(out["query_history"]) - 1,
    ),
    # the LLM judge gives no probability, so the pool is never judged sufficient
    ("rfm_rag", "max_iterations"): Case(
        llm=lambda: ScriptedChatModel(default="No"),
        context={"feedback_mode": "llm_judge"},
        reached=lambda out, _: out["iterations"],
    ),
    # a reviewer answers every pause
    ("rag_ef", "max_feedback_rounds"): Case(
        llm=lambda: ScriptedChatModel(default="Nile"),
        context={"review": True},
        objects=_pairs,
        resume=True,
        reached=lambda out, _: out["feedback_rounds"],
    ),
    # the judge names many queries; without logprobs it always retrieves
    ("missing_knowledge", "max_mk_queries"): Case(
        llm=lambda: ScriptedChatModel(rules=[("## First Round Answer", _mk_judge)], default="No"),
        reached=lambda out, _: len(out["queries"]) - 1,
    ),
}


def bounds() -> list[tuple[str, str, int, int]]:
    """(method, field, default, maximum) of every setting of every method that bounds how
    often a step runs."""
    out = []
    for method in METHODS:
        cls = context_class(method)
        repeats = repeat_bounds(cls)
        for f in dataclasses.fields(cls):
            if f.name in repeats:
                out.append((method, f.name, int(f.default), repeats[f.name]))  # type: ignore[arg-type]
    return out


BOUNDS = bounds()
IDS = [f"{m}.{name}" for m, name, _, _ in BOUNDS]


def values(method: str, name: str, default: int, maximum: int) -> list[int]:
    """Three times the (effective) default, and the maximum."""
    paper = CASES[(method, name)].default or default or 1
    return sorted({min(3 * paper, maximum), maximum})


@pytest.fixture(scope="module")
def module_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """A store of ``DOCS``, built once and shared by the module (no test writes to it)."""
    root = tmp_path_factory.mktemp("bounds-store")
    return Store.build(root / "store", DOCS, embedder=HashingEmbedder(), progress=False)


def graph_for(case: Case, method: str, store: Store, root: Path) -> tuple[Any, ScriptedChatModel]:
    llm = case.llm()
    graph = build_graph(
        method, llm=llm, retriever=store, checkpointer=InMemorySaver() if case.resume else None,
        **case.objects(root),
    )  # fmt: skip
    return graph, llm


CONFIG: Any = {"configurable": {"thread_id": "t"}}


def final(graph: Any, out: dict[str, Any]) -> dict[str, Any]:
    """The output, with the whole state when the graph keeps one (RAG-EF's round count)."""
    if graph.checkpointer is None:
        return out
    return {**graph.get_state(CONFIG).values, **out}


def run(graph: Any, case: Case, context: dict[str, Any], bound: int) -> dict[str, Any]:
    config = CONFIG
    out: dict[str, Any] = graph.invoke({"question": QUESTION}, config, context=context)
    for i in range(bound + 1):  # one pause a feedback round
        if "__interrupt__" not in out:
            break
        answer = {"answer": f"Nile {i}", "chunk": f"The Nile flows through Cairo ({i})."}
        out = graph.invoke(Command(resume=answer), config, context=context)
    return final(graph, out)


async def arun(graph: Any, case: Case, context: dict[str, Any], bound: int) -> dict[str, Any]:
    config = CONFIG
    out: dict[str, Any] = await graph.ainvoke({"question": QUESTION}, config, context=context)
    for i in range(bound + 1):
        if "__interrupt__" not in out:
            break
        answer = {"answer": f"Nile {i}", "chunk": f"The Nile flows through Cairo ({i})."}
        out = await graph.ainvoke(Command(resume=answer), config, context=context)
    return final(graph, out)


def test_every_bound_has_a_scripted_run() -> None:
    assert {(m, name) for m, name, _, _ in BOUNDS} == set(CASES)
    loops = {"ircot": "max_steps", "iterkey": "max_iterations", "migres": "max_iterations",
             "rfm_rag": "max_iterations", "rag_ef": "max_feedback_rounds",
             "missing_knowledge": "max_mk_queries"}  # fmt: skip
    assert set(loops.items()) <= set(CASES)  # every loop bound has a maximum


@pytest.mark.parametrize(("method", "name", "default", "maximum"), BOUNDS, ids=IDS)
def test_bound_set_at_run_time_is_reached_up_to_its_maximum(
    method: str, name: str, default: int, maximum: int, module_store: Store, tmp_path: Path
) -> None:
    case = CASES[(method, name)]
    for value in values(method, name, default, maximum):
        graph, llm = graph_for(case, method, module_store, tmp_path / str(value))
        out = run(graph, case, {**case.context, name: value}, value)
        assert out["stop_reason"] and "__interrupt__" not in out
        assert case.reached(out, llm) == value, (name, value)


@pytest.mark.parametrize(("method", "name", "default", "maximum"), BOUNDS, ids=IDS)
def test_bound_above_its_maximum_is_refused(
    method: str, name: str, default: int, maximum: int, module_store: Store, tmp_path: Path
) -> None:
    case = CASES[(method, name)]
    graph, llm = graph_for(case, method, module_store, tmp_path)
    with pytest.raises(InputError) as err:
        graph.invoke({"question": QUESTION}, CONFIG, context={name: maximum + 1})
    assert str(err.value) == (
        f"{method}: {name} must be at most {maximum} (got {maximum + 1}) "
        f"(hint: set {name}={maximum} or less)"
    )
    assert llm.calls == []  # refused before anything ran
    with pytest.raises(InputError, match=f"{name} must be at most {maximum}"):
        options: dict[str, Any] = {name: maximum + 1}
        build_graph(method, llm=llm, retriever=module_store, **options)


ASYNC = [b for b in BOUNDS if b[0] in ("ircot", "migres", "rag_ef")]


@pytest.mark.parametrize(
    ("method", "name", "default", "maximum"), ASYNC, ids=[f"{m}.{n}" for m, n, _, _ in ASYNC]
)
def test_bound_at_its_maximum_is_reached_under_ainvoke(
    method: str, name: str, default: int, maximum: int, module_store: Store, tmp_path: Path
) -> None:
    case = CASES[(method, name)]
    graph, llm = graph_for(case, method, module_store, tmp_path)
    out = asyncio.run(arun(graph, case, {**case.context, name: maximum}, maximum))
    assert case.reached(out, llm) == maximum


def test_bound_at_its_maximum_is_reached_in_stream_and_as_a_subgraph(
    module_store: Store, tmp_path: Path
) -> None:
    case = CASES[("ircot", "max_steps")]
    context = {"max_steps": 25}
    graph, _ = graph_for(case, "ircot", module_store, tmp_path)
    last = list(graph.stream({"question": QUESTION}, context=context, stream_mode="values"))[-1]
    assert last["iterations"] == 25

    class Parent(TypedDict):
        question: str
        iterations: NotRequired[int]

    graph, _ = graph_for(case, "ircot", module_store, tmp_path)
    parent = StateGraph(Parent, context_schema=context_class("ircot"))
    parent.add_node("ircot", graph)
    parent.add_edge(START, "ircot")
    out = parent.compile().invoke({"question": QUESTION}, context=context)
    assert out["iterations"] == 25


@dataclass(kw_only=True)
class _Looping(BaseContext):
    rounds: int = describe(3, "Rounds.", minimum=1, maximum=7)
    unbounded: int = describe(3, "Rounds without a maximum.", minimum=1)


class _Plain(TypedDict):
    question: str


def test_compiled_limit_fits_each_loop_at_its_maximum_and_needs_one() -> None:
    builder = StateGraph(_Plain, context_schema=_Looping)
    builder.add_node("work", lambda state: {})
    builder.add_edge(START, "work")
    graph = compile_graph(builder, None, name="looping", loops={"rounds": 3})
    assert graph.config is not None
    assert graph.config["recursion_limit"] == 1 + 3 * 7 + STEP_MARGIN  # nodes + rounds + margin
    with pytest.raises(TypeError, match="'unbounded' must be a context field with a maximum"):
        compile_graph(builder, None, name="looping", loops={"unbounded": 3})


# -- every numeric setting is typed and bounded ------------------------------------------------
#: settings whose sign is part of their meaning: a log-probability (or its margin), a
#: cross-encoder logit, a difference of probabilities
SIGNED = {"gate_threshold", "delta", "choice_margin"}


def numeric_settings() -> list[tuple[str, str]]:
    """(method, field) of every numeric setting of every method in the registry."""
    out = []
    for method in list_methods():
        hints = typing.get_type_hints(context_class(method))
        out += [(method, n) for n, h in hints.items() if numeric_kind(h)[0] is not None]
    return out


NUMERIC = numeric_settings()


@pytest.fixture(scope="module")
def schemas(module_store: Store) -> dict[str, tuple[Any, ScriptedChatModel, dict[str, Any]]]:
    """Each method's graph, its scripted model and its settings' JSON schema (Studio's form)."""
    out = {}
    for method in list_methods():
        llm = ScriptedChatModel(default="Nile")
        graph = build_graph(method, llm=llm, retriever=module_store)
        out[method] = (graph, llm, graph.get_context_jsonschema()["properties"])
    return out


def bound(prop: dict[str, Any], key: str) -> Any:
    """A JSON-schema bound of a property, also inside ``anyOf`` (an optional number)."""
    return prop.get(key, next((p[key] for p in prop.get("anyOf", []) if key in p), None))


def trials(kind: type, text: bool, minimum: float, maximum: float) -> list[tuple[Any, Any]]:
    """(value, what the setting holds, or None when refused) for a float, a whole number, a
    bool, a negative, a huge value, a string and NaN."""
    inside = (max(minimum, 0) + maximum) / 2
    signed = minimum < 0
    if kind is int:
        return [(float(int(inside)), None), (True, None), (-1, None), (10**12, None),
                (str(int(inside)), None), (int(inside), int(inside))]  # fmt: skip
    return [
        (inside, inside), (int(inside), float(int(inside))), (True, None),
        (-1, -1.0 if signed else None), (10**12, None), (1e12, None),
        (str(inside), inside if text else None), (float("nan"), None),
    ]  # fmt: skip


@pytest.mark.parametrize(("method", "name"), NUMERIC, ids=[f"{m}.{n}" for m, n in NUMERIC])
def test_numeric_setting_is_typed_and_bounded(
    method: str, name: str, schemas: dict[str, tuple[Any, ScriptedChatModel, dict[str, Any]]]
) -> None:
    graph, llm, props = schemas[method]
    cls = context_class(method)
    kind, _, text = numeric_kind(typing.get_type_hints(cls)[name])
    assert kind is not None
    minimum, maximum = bound(props[name], "minimum"), bound(props[name], "maximum")
    assert maximum is not None, f"{name} has no maximum in the form"
    assert minimum is not None and (minimum < 0) == (name in SIGNED), name
    for value, held in trials(kind, text, minimum, maximum):
        if held is not None:
            ctx = resolve_context(cls, {name: value})
            assert getattr(ctx, name) == held and type(getattr(ctx, name)) is kind, value
            continue
        with pytest.raises(InputError) as err:
            graph.invoke({"question": QUESTION}, context={name: value})
        assert str(err.value).startswith(f"{method}: {name}") and "\n" not in str(err.value)
        assert llm.calls == [], "refused before anything ran"


@pytest.mark.parametrize(("method", "name"), NUMERIC, ids=[f"{m}.{n}" for m, n in NUMERIC])
def test_operator_cap_applies_to_every_numeric_setting(method: str, name: str) -> None:
    cls = context_class(method)
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    minimum, maximum = field_range(f)
    assert minimum is not None and maximum is not None
    cap = max(minimum, 0)
    kind = int if numeric_kind(typing.get_type_hints(cls)[name])[0] is int else float
    above = next(
        v
        for v in (kind((cap + maximum) / 2), kind(cap + 1), kind(cap + 2))
        if v != f.default and cap < v <= maximum
    )
    capped = with_policy(cls, OperatorPolicy(max_bounds={name: cap}))
    with pytest.raises(InputError, match=rf"^{method}: {name}=\S+ is above the operator's cap"):
        resolve_context(capped, {name: above})
    assert getattr(resolve_context(capped, {name: cap}), name) == cap
