"""The shared graph core: settings precedence, a fresh state per question, async all the way,
shown/retrieved ids and decisions recorded by the shared layers."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from gaprag import build_graph
from gaprag.context import with_defaults
from gaprag.errors import InputError
from gaprag.graphs import METHODS, context_class, deps_class
from gaprag.graphs.standard_rag.context import Context
from gaprag.stores.store import Store
from gaprag.testing import ScriptedChatModel


def rag(store: Store, model: ScriptedChatModel, **options: object) -> object:
    return build_graph("standard_rag", llm=model, retriever=store, **options)


@pytest.mark.parametrize(("build", "run", "expected"), [(2, 5, 5), (2, 4, 4), (2, None, 2)])
def test_run_time_setting_wins_whatever_it_equals(
    store: Store, build: int, run: int | None, expected: int
) -> None:
    graph = build_graph(
        "standard_rag", llm=ScriptedChatModel(default="x"), retriever=store, top_k=build
    )
    context = {"top_k": run, "retrieval_mode": "dense"} if run else {"retrieval_mode": "dense"}
    out = graph.invoke({"question": "capital of France"}, context=context)
    assert len(out["evidence"]) == expected


def test_build_time_setting_wins_over_the_class_default(store: Store) -> None:
    graph = build_graph(
        "standard_rag", llm=ScriptedChatModel(default="x"), retriever=store, top_k=1
    )
    assert len(graph.invoke({"question": "capital of France"})["evidence"]) == 1
    assert graph.context_schema is not None and graph.context_schema().top_k == 1
    assert Context().top_k == 5  # the class itself is untouched


def test_settings_are_validated_once_with_a_hint() -> None:
    with pytest.raises(InputError, match="retrieval_mode='fuzzy' is not valid"):
        with_defaults(Context, {"retrieval_mode": "fuzzy"})
    with pytest.raises(InputError, match="top_k must be at least 1"):
        Context(top_k=0)
    with pytest.raises(InputError, match="unknown option"):
        with_defaults(Context, {"topk": 3})


def test_injectable_names_never_shadow_a_setting() -> None:
    for method in METHODS:
        settings = {f.name for f in dataclasses.fields(context_class(method))}
        assert not settings & deps_class(method).names(), method


def test_a_second_question_on_a_thread_starts_clean(store: Store) -> None:
    model = ScriptedChatModel(
        rules=[("Question: capital of France", "Paris"), ("Question: Who wrote", "Shakespeare")]
    )
    graph = build_graph("standard_rag", llm=model, retriever=store, checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t1"}}
    first = graph.invoke({"question": "capital of France"}, config)
    second = graph.invoke({"question": "Who wrote Hamlet?"}, config)
    assert first["answer"] == "Paris" and second["answer"] == "Shakespeare"
    assert second["queries"] == ["Who wrote Hamlet?"]
    assert second["usage"]["llm_calls"] == 1 and second["usage"]["retrieval_calls"] == 1
    assert second["iterations"] == 1 and second["stop_reason"] == "answered"
    assert {e["round"] for e in second["evidence"]} == {1}


@pytest.mark.parametrize("question", ["", "   ", None, 7])
def test_a_missing_question_is_refused_before_any_call(store: Store, question: object) -> None:
    model = ScriptedChatModel(default="x")
    with pytest.raises(InputError):
        rag(store, model).invoke({"question": question})  # type: ignore[attr-defined]
    assert model.calls == []


def test_shown_and_retrieved_ids_and_tokens_by_part(store: Store) -> None:
    out = rag(store, ScriptedChatModel(default="Paris"), top_k=2, retrieval_mode="bm25").invoke(  # type: ignore[attr-defined]
        {"question": "capital of France"}
    )
    ids = [e["id"] for e in out["evidence"]]
    assert out["retrieved_ids"] == ids and out["shown_ids"] == ids
    usage = out["usage"]
    assert 0 < usage["passage_tokens"] < usage["prompt_tokens"]
    assert 0 < usage["instruction_tokens"] < usage["prompt_tokens"]
    assert usage["instruction_tokens"] + usage["passage_tokens"] <= usage["prompt_tokens"]


def test_a_follow_up_turn_adds_its_parts_to_the_token_split() -> None:
    from gaprag.prompts import Passages, Prompt, follow_up

    first = Prompt("first", system="Answer.", user="{passages}\nQ: {question}")
    rendered = first.render(passages=Passages("P1 P2", ["a"]), question="Q?")
    ask = Prompt("ask", system="", user="Enough? Yes or No.").render()
    follow = follow_up(rendered, '{"thought": "T"}', ask, reply_fixed_chars=len('{"thought": }'))
    assert follow == [*rendered, ("assistant", '{"thought": "T"}'), ("user", "Enough? Yes or No.")]
    instructions, passages, total = rendered.parts
    assert follow.parts == (
        instructions + len('{"thought": }') + len("Enough? Yes or No."),
        passages,
        total + len('{"thought": "T"}') + len("Enough? Yes or No."),
    )
    assert follow_up(rendered, "raw", ask).parts[0] == instructions + len("Enough? Yes or No.")


CONCURRENCY_PROBE = """
import asyncio, json, sys, time
from gaprag import build_graph
from gaprag.stores.embeddings import HashingEmbedder
from gaprag.stores.store import Store
from gaprag.testing import ScriptedChatModel

docs = json.loads(sys.argv[2])
store = Store.build(sys.argv[1], docs, embedder=HashingEmbedder(), progress=False)

def rag(model):
    return build_graph("standard_rag", llm=model, retriever=store, retrieval_mode="bm25")

async def many(graph, n):
    start = time.perf_counter()
    await asyncio.gather(*(graph.ainvoke({"question": "capital of France"}) for _ in range(n)))
    return time.perf_counter() - start

slow = ScriptedChatModel(default="Paris", latency=0.5)
cpu = asyncio.run(many(rag(ScriptedChatModel(default="Paris")), 40))
graph = rag(slow)
single = asyncio.run(many(graph, 1))
forty = asyncio.run(many(graph, 40))
print(json.dumps({"cpu": cpu, "single": single, "forty": forty, "calls": len(slow.calls)}))
"""


def test_forty_concurrent_ainvoke_calls_overlap(
    tmp_path: Path, tiny_docs: list[dict[str, str]]
) -> None:
    """40 questions against a model that takes 0.5 s a call finish in about one call's time:
    the model calls overlap on the event loop (no thread per question). The graph's own CPU
    time for 40 runs (measured with a zero-latency model) is allowed on top, since the test
    machine may be busy (twice that: the measurement itself is noisy under load). Measured in
    a fresh interpreter, so threads left behind by earlier tests do not take part."""
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", CONCURRENCY_PROBE, str(tmp_path / "s"), json.dumps(tiny_docs)],
        capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    m = json.loads(out.stdout.strip().splitlines()[-1])
    single, forty, cpu = m["single"], m["forty"], m["cpu"]
    assert m["calls"] == 41
    assert forty <= 1.5 * single + 2 * cpu, (single, forty, cpu)
    assert forty < 0.1 * 40 * 0.5  # far from 40 calls one after another


def test_sync_and_async_runs_give_the_same_output(store: Store) -> None:
    graph = rag(store, ScriptedChatModel(default="Paris"), retrieval_mode="bm25")
    sync = graph.invoke({"question": "capital of France"})  # type: ignore[attr-defined]
    asyn = asyncio.run(graph.ainvoke({"question": "capital of France"}))  # type: ignore[attr-defined]
    for out in (sync, asyn):
        out["usage"].pop("wall_s")
    assert sync == asyn


@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_resolves_settings_with_the_same_precedence(method: str) -> None:
    """build-time value over the class default; a run-time value wins whatever it equals.
    (LangGraph builds the graph's context class from the run-time dict, so the class is what
    the nodes see; standard_rag's end-to-end test above shows the retrieval obeying it.)"""
    from gaprag.context import resolve_context

    cls = context_class(method)
    default = cls().max_passage_words
    graph = build_graph(method, llm=ScriptedChatModel(default="x"), max_passage_words=default + 7)
    schema = graph.context_schema
    assert schema is not None
    assert resolve_context(schema, None).max_passage_words == default + 7
    assert resolve_context(schema, {}).max_passage_words == default + 7
    assert resolve_context(schema, {"max_passage_words": default}).max_passage_words == default
    assert schema(max_passage_words=default).max_passage_words == default
    assert cls().max_passage_words == default


def test_importing_gaprag_leaves_the_environment_alone() -> None:
    import os
    import subprocess
    import sys

    code = (
        "import os, json; before = dict(os.environ); import gaprag, gaprag.graphs, gaprag.stores;"
        " print(json.dumps(sorted(k for k in os.environ if os.environ.get(k) != before.get(k))))"
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HF_", "TRANSFORMERS_", "ANONYMIZED"))
    }
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
