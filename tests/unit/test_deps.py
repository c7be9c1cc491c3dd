"""Injected objects: the common ones in gaprag.deps.Deps, a method's own in its package (the
class its ``build`` takes), passed as keywords of build_graph or in one deps object."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from gaprag import build_graph
from gaprag.deps import Deps
from gaprag.errors import InputError
from gaprag.graphs import METHODS, deps_class
from gaprag.graphs.migres import MigresDeps
from gaprag.graphs.rfm_rag import RfmRagDeps
from gaprag.graphs.rfm_rag.feedback_model.model import FeedbackResult
from gaprag.stores.store import Store
from gaprag.testing import ScriptedChatModel

QUESTION = "What is the capital of France?"


class CountingJudge:
    """A sufficiency model that always finds the pool enough, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def judge(
        self, question: str, entities: list[str], sentences: list[str], s_f: float
    ) -> FeedbackResult:
        self.calls += 1
        return FeedbackResult(True, 1.0)


def test_the_shared_deps_name_no_methods_objects() -> None:
    assert not {"scorer", "fact_verifier", "sufficiency_model"} & Deps.names()
    assert deps_class("migres") is MigresDeps
    assert {"scorer", "fact_verifier"} <= MigresDeps.names()
    assert deps_class("rfm_rag") is RfmRagDeps
    assert "sufficiency_model" in RfmRagDeps.names()
    assert all(issubclass(deps_class(m), Deps) for m in METHODS)
    assert deps_class("iterkey") is Deps


@pytest.mark.parametrize("method", list(METHODS))
def test_a_methods_own_objects_class_is_exported_by_its_package(method: str) -> None:
    kind = deps_class(method)
    if kind is Deps:
        return
    package = importlib.import_module(METHODS[method]().__name__.rpartition(".")[0])
    assert kind.__module__.startswith(package.__name__ + ".")
    assert kind.__name__ in package.__all__ and getattr(package, kind.__name__) is kind


@pytest.mark.parametrize(
    "how",
    ["keyword", "its own deps", "plain deps and a keyword"],
)
def test_a_methods_own_object_reaches_it_however_it_is_passed(store: Store, how: str) -> None:
    judge = CountingJudge()
    chat = ScriptedChatModel(default="Paris")
    passed: dict[str, Any] = {
        "keyword": {"llm": chat, "sufficiency_model": judge},
        "its own deps": {"deps": RfmRagDeps.of(llm=chat, sufficiency_model=judge)},
        "plain deps and a keyword": {"deps": Deps.of(llm=chat), "sufficiency_model": judge},
    }[how]
    out = build_graph("rfm_rag", retriever=store, top_k=2, **passed).invoke({"question": QUESTION})
    assert judge.calls == 1 and out["stop_reason"] == "sufficient"


def test_a_plain_deps_gives_a_method_its_objects_and_its_cache(store: Store) -> None:
    given = Deps.of(llm=ScriptedChatModel(default="Paris"), retriever=store)
    graph = build_graph("migres", deps=given, verifier="off")
    assert graph.invoke({"question": QUESTION})["answer"]
    # the knowledge filter's default scorer, built in the run, is in the given object's cache
    built = given.cached(("migres.embedding_scorer", id(store)), lambda: None)
    assert built is not None and built.name.startswith("cosine:")


def test_an_object_a_method_does_not_take_is_refused_by_name() -> None:
    with pytest.raises(InputError, match=r"unknown option.*'scorer'"):
        build_graph("iterkey", llm=ScriptedChatModel(default="Paris"), scorer=object())
