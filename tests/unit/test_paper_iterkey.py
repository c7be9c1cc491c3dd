"""IterKey in its paper configuration, step by step, with a scripted model (the role fake of
tests/methods/iterkey.py: replies by prompt type).

Paper steps: P1 writes keywords for the question; BM25 retrieves with the question and the
keywords, the top 3 chunks; P2 answers from them; P3 validates the answer True/False; True ends
the loop; False makes P4 regenerate the keywords from the question and the earlier ones, and the
round repeats, up to N = 5 rounds; with no True the last round's answer is returned."""

from __future__ import annotations

from typing import Any

import pytest

from gaprag import build_graph
from gaprag.llm.client import LLM
from gaprag.stores import HashingEmbedder, Store
from tests.methods.iterkey import CORPUS, Q, RoleFake, kinds, prompts_of, role_fake


@pytest.fixture(scope="module")
def module_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    root = tmp_path_factory.mktemp("iterkey-paper") / "s"
    return Store.build(root, CORPUS, embedder=HashingEmbedder(), progress=False)


def run(store: Store, fake: RoleFake) -> dict[str, Any]:
    graph = build_graph(
        "iterkey", llm=LLM(fake, supports_logprobs=True), retriever=store, profile="paper"
    )
    return dict(graph.invoke({"question": Q}))


def test_paper_settings() -> None:
    from gaprag.context import effective_settings

    graph = build_graph("iterkey", llm=role_fake(), profile="paper")
    s = {k: v["value"] for k, v in effective_settings(graph.builder.context_schema).items()}
    assert s["top_k"] == 3 and s["retrieval_mode"] == "bm25" and s["max_iterations"] == 5
    assert s["validation_threshold"] == 0.5 and s["fallback_policy"] == "last"
    assert s["max_passage_words"] == 256 and s["reader"] == "paper" and s["gate"] == "off"


def test_a_true_verdict_in_round_one_ends_after_p1_p2_p3(module_store: Store) -> None:
    fake = role_fake(verdicts=("True",), answers=("Eagle",))
    out = run(module_store, fake)
    assert kinds(fake) == ["keywords", "answer", "validate"]  # no gate before, no rewrite after
    assert out["answer"] == "Eagle" and out["iterations"] == 1
    assert out["queries"][0].startswith(Q) and "Moon" in out["queries"][0]  # question + keywords
    assert len(out["shown_ids"]) == 3  # the top 3 chunks


def test_a_false_verdict_regenerates_keywords_and_retrieves_again(module_store: Store) -> None:
    fake = role_fake(verdicts=("False", "True"), answers=("a1", "Eagle"))
    out = run(module_store, fake)
    assert kinds(fake) == ["keywords", "answer", "validate", "regenerate", "answer", "validate"]
    assert out["answer"] == "Eagle" and out["iterations"] == 2
    assert "zeta2" in out["queries"][1]  # the regenerated keywords form the second query
    regenerate = prompts_of(fake, "regenerate")[0]
    assert "Moon" in regenerate and Q in regenerate  # from the question and the earlier keywords


def test_no_true_verdict_runs_five_rounds_and_returns_the_last_answer(module_store: Store) -> None:
    fake = role_fake(verdicts=("False",))
    out = run(module_store, fake)
    assert out["iterations"] == 5 and out["stop_reason"] == "max_iterations"
    assert kinds(fake).count("validate") == 5 and kinds(fake).count("regenerate") == 4
    assert out["answer"] == "a5"


def test_p1_and_p4_follow_the_papers_order(module_store: Store) -> None:
    fake = role_fake(verdicts=("False", "True"), answers=("a1", "Eagle"))
    run(module_store, fake)
    p1 = prompts_of(fake, "keywords")[0]
    assert f"keywords for Query: {Q}." in p1  # the query inside the request
    assert p1.rstrip().endswith("with nothing else.")  # the format last
    p4 = prompts_of(fake, "regenerate")[0]
    assert p4.index("Query:") < p4.index("Previous Keywords:") < p4.index("Reply only with")


def test_a_tie_between_true_and_false_does_not_accept(module_store: Store) -> None:
    fake = role_fake(verdicts=(0.5, 0.6), answers=("a1", "Eagle"))
    out = run(module_store, fake)
    assert [d["decision"] for d in out["decisions"] if d["node"] == "validate_answer"] == [
        "reject",
        "accept",
    ]  # P(True) = 0.5 is no majority for True; 0.6 is
    assert out["answer"] == "Eagle"
