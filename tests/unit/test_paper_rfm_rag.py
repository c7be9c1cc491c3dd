"""RFM-RAG in its paper configuration, step by step, with a scripted model over the
Polish-Russian War store of tests/methods/rfm_rag.py.

Paper steps: once per question the LLM writes the question's entities and relational triples
with placeholders; each round retrieves unseen passages (the question first), Prompt 1
condenses them into evidence sentences in the pool, and the R-Feedback model judges the pool:
sufficient -> the answer from the whole pool; not -> Prompt 2 fills the placeholders and the next
query is the low-coverage entities plus the fills; at most 3 retrievals. (The paper's Prompt 2
text is missing from its source; gaprag's follows its description.)"""

from __future__ import annotations

from typing import Any

import pytest

from gaprag import build_graph
from gaprag.graphs.rfm_rag.feedback_model.model import MLPJudge
from gaprag.graphs.rfm_rag.judges import choose_judge
from gaprag.stores.documents import Document
from gaprag.stores.store import Store
from tests.methods.rfm_rag import (
    DOCS,
    FACT_FILM,
    FACT_MOTHER,
    QUESTION,
    SeqJudge,
    call_counts,
    fake_llm,
    kind_of,
)


@pytest.fixture
def store_docs() -> list[Document]:
    return DOCS


def run(store: Store, *verdicts: bool) -> tuple[dict[str, Any], Any]:
    fake = fake_llm()
    graph = build_graph(
        "rfm_rag", llm=fake, retriever=store, profile="paper", top_k=2,
        sufficiency_model=SeqJudge(*verdicts),
    )  # fmt: skip
    return dict(graph.invoke({"question": QUESTION})), fake


def test_paper_settings_use_the_r_feedback_model() -> None:
    from gaprag.context import effective_settings
    from gaprag.deps import Deps
    from gaprag.graphs.rfm_rag.deps import RfmRagDeps

    graph = build_graph("rfm_rag", llm=fake_llm(), profile="paper")
    cls = graph.builder.context_schema
    s = {k: v["value"] for k, v in effective_settings(cls).items()}
    assert s["feedback_mode"] == "mlp" and s["max_iterations"] == 3
    assert s["retrieval_mode"] == "bm25" and s["pool_scope"] == "question"
    assert s["reader"] == "paper" and s["gate"] == "off" and s["max_passage_words"] == 1000
    deps = RfmRagDeps.of(llm=fake_llm())
    assert isinstance(deps, Deps)
    assert isinstance(choose_judge(cls(), deps), MLPJudge)


def test_step_1_the_structure_is_written_once_and_round_one_queries_the_question(
    store: Store,
) -> None:
    out, fake = run(store, True)
    assert call_counts(fake) == {
        "structure": 1, "extract": 1, "fills": 0, "judge": 0, "answer": 1,
    }  # fmt: skip
    assert out["queries"] == [QUESTION]


def test_steps_2_to_4_a_sufficient_pool_is_answered_after_one_round(store: Store) -> None:
    out, fake = run(store, True)
    assert out["stop_reason"] == "sufficient" and out["iterations"] == 1
    assert [e["text"] for e in out["evidence_pool"]] == [FACT_FILM]
    answer = next(p for p in fake.prompts() if kind_of(p) == "answer")
    assert FACT_FILM in answer and answer.rstrip().endswith(f"Question: {QUESTION}")


def test_step_5_an_insufficient_pool_fills_placeholders_and_queries_again(store: Store) -> None:
    out, fake = run(store, False, True)
    assert out["queries"] == [QUESTION, "Xawery Żuławski"]  # low coverage + the fill
    assert call_counts(fake)["fills"] == 1 and call_counts(fake)["extract"] == 2
    assert [e["text"] for e in out["evidence_pool"]] == [FACT_FILM, FACT_MOTHER]
    # the answer step's own answer, not rewritten by a short-answer step
    assert out["answer"] == "Małgorzata Braunek" and out["stop_reason"] == "sufficient"


def test_step_6_at_most_three_retrievals(store: Store) -> None:
    out, fake = run(store, False)
    assert out["iterations"] == 3 and out["stop_reason"] == "max_iterations"
    assert call_counts(fake)["answer"] == 1 and len(fake.calls) == sum(call_counts(fake).values())
