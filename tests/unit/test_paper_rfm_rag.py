"""RFM-RAG in its paper configuration (arXiv 2508.17862), judged at the model boundary with a
scripted model over the Polish-Russian War store of tests/methods/rfm_rag.py: what each call is
sent (which passages, which facts, which query), how many calls a question takes, what the
R-Feedback model is given and what it decides, what the run returns and why it stopped.

Paper steps: once per question the LLM writes the question's entities and relational triples
with placeholders (Prompt 2, its Appendix C, missing from the paper's source); each round
retrieves passages K_i for the query q_i (the question first), skipping those already retrieved,
and Prompt 1 condenses them into evidence E_i = LLM(q_i, K_i) (Eq. 1) that joins the pool
E = {E_0, ..., E_i} (Eq. 2); the R-Feedback model judges the pool: sufficient -> the answer from
the whole pool; not -> the knowledge-gap list G' is the entities whose coverage is below theta
plus the entities Prompt 3 (Fig. 4) reads for the placeholders, and the next query is G'; at
most 3 retrievals."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from gaprag import build_graph
from gaprag.graphs.rfm_rag.feedback_model.model import FeedbackResult
from gaprag.llm.client import LLM
from gaprag.stores.documents import Document
from gaprag.stores.store import Store
from gaprag.testing import ScriptedChatModel
from tests.methods.rfm_rag import (
    DOCS,
    FACT_FILM,
    FACT_MOTHER,
    KINDS,
    QUESTION,
    SeqJudge,
    call_counts,
    fake_llm,
)

FILLER = " ".join(["The Polish-Russian War film director."] * 40) + " The end."  # 162 words
# "mother" is named by the question and absent from round 1's evidence: a knowledge gap
STRUCTURE = (
    '{"entities": ["Polish-Russian War", "mother"], '
    '"triples": [["Polish-Russian War", "director", "<X1>"], ["<X1>", "mother", "end"]]}'
)
FILL = "Xawery Żuławski"
LONG_ANSWER = "Małgorzata Braunek, the Polish actress who was the mother of Xawery Żuławski"
ANSWER = f"Żuławski's mother is Małgorzata Braunek. So the answer is {LONG_ANSWER}."


@pytest.fixture
def store_docs() -> list[Document]:
    # the film's passage is long: paper mode shows passages whole
    return [{**d, "text": f"{d['text']} {FILLER}"} if d["id"] == "prw" else d for d in DOCS]


class ProbJudge:
    """An R-Feedback model that gives the pool the scripted probabilities of sufficiency."""

    def __init__(self, *probs: float) -> None:
        self.probs = list(probs)
        self.calls: list[list[str]] = []

    def judge(
        self, question: str, entities: list[str], sentences: list[str], s_f: float
    ) -> FeedbackResult:
        self.calls.append(list(sentences))
        p = self.probs[min(len(self.calls) - 1, len(self.probs) - 1)]
        return FeedbackResult(p >= 0.5, p)


def run(
    store: Store, judge: Any, *, answer: str = ANSWER, **options: Any
) -> tuple[dict[str, Any], ScriptedChatModel]:
    fake = fake_llm(structure=STRUCTURE, fills=f'{{"fills": ["{FILL}", "<X2>"]}}', answer=answer)
    graph = build_graph(
        "rfm_rag", llm=LLM(fake, supports_logprobs=True), retriever=store, profile="paper",
        top_k=2, sufficiency_model=judge, **options,
    )  # fmt: skip
    return dict(graph.invoke({"question": QUESTION})), fake


def users(fake: ScriptedChatModel, kind: str) -> list[str]:
    """The user turns of the calls of ``kind``."""
    return [
        c["messages"][-1][1] for c in fake.calls if any(KINDS[kind] in t for _, t in c["messages"])
    ]


def paragraphs(prompt: str) -> str:
    return prompt.split("Paragraphs:\n", 1)[1].split("\n\nQuestion:", 1)[0]


def test_step_1_prompt_2_writes_the_structure_once_from_the_question(store: Store) -> None:
    out, fake = run(store, SeqJudge(False))
    (structure,) = users(fake, "structure")
    assert structure.rstrip().endswith(f"Question: {QUESTION}")
    assert out["entities"] == ["Polish-Russian War", "mother"] and len(out["triples"]) == 2
    assert out["queries"][0] == QUESTION


def test_step_2_prompt_1_condenses_the_rounds_passages_for_its_query(store: Store) -> None:
    out, fake = run(store, SeqJudge(False, True))
    first, second = users(fake, "extract")
    top = store.search(QUESTION, 2, mode="bm25")
    assert paragraphs(first) == "\n".join(
        f"[{n}] {d['title']}: {d['text']}" for n, d in enumerate(top, 1)
    )  # the question's top k, whole (the film's passage is 176 words long)
    assert "The end." in first
    assert first.rstrip().endswith(f"Question: {QUESTION}")
    # Eq. 1, E_i = LLM(q_i, K_i): a later round is asked about its own query alone
    q2 = out["queries"][1]
    assert second.rstrip().endswith(f"Question: {q2}") and QUESTION not in second


def test_step_2_a_round_retrieves_only_passages_not_retrieved_before(store: Store) -> None:
    out, fake = run(store, SeqJudge(False))
    rounds = users(fake, "extract")
    q = out["queries"][2]
    assert q == out["queries"][1]  # the same gaps and fills: the same query again
    seen = [p["id"] for p in out["retrieved_passages"][:4]]
    unseen = store.search(q, 2, mode="bm25", exclude=seen)
    assert [d["id"] for d in store.search(q, 2, mode="bm25")] == seen[2:]
    assert paragraphs(rounds[2]) == "\n".join(
        f"[{n}] {d['title']}: {d['text']}" for n, d in enumerate(unseen, 1)
    )


def test_step_3_the_pool_gathers_every_rounds_evidence_and_the_r_feedback_model_judges_it(
    store: Store,
) -> None:
    judge = SeqJudge(False, True)
    out, _ = run(store, judge)
    assert judge.calls == [[FACT_FILM], [FACT_FILM, FACT_MOTHER]]
    assert [e["text"] for e in out["evidence_pool"]] == [FACT_FILM, FACT_MOTHER]
    assert [d["path"] for d in out["decisions"]] == ["model", "model"]


def test_step_4_a_probability_of_sufficiency_from_one_half_stops_the_loop(store: Store) -> None:
    out, fake = run(store, ProbJudge(0.45, 0.55))
    assert out["iterations"] == 2 and out["stop_reason"] == "sufficient"
    assert [(d["decision"], d["p"]) for d in out["decisions"]] == [
        ("continue", 0.45), ("stop", 0.55),
    ]  # fmt: skip
    assert call_counts(fake)["answer"] == 1


def test_step_4_a_sufficient_pool_is_answered_from_the_whole_pool(store: Store) -> None:
    out, fake = run(store, SeqJudge(False, True))
    (answer,) = users(fake, "answer")
    assert answer == f"Context:\n{FACT_FILM}\n{FACT_MOTHER}\nQuestion: {QUESTION}"
    # the answer step's own answer, not rewritten by a short-answer step, no other call
    assert out["answer"] == LONG_ANSWER and out["stop_reason"] == "sufficient"
    assert len(fake.calls) == sum(call_counts(fake).values())
    assert call_counts(fake) == {"structure": 1, "extract": 2, "fills": 1, "judge": 0, "answer": 1}
    assert not any(c["kwargs"].get("logprobs") for c in fake.calls)


def test_step_5_an_insufficient_pool_queries_the_gap_entities_and_the_placeholder_fills(
    store: Store,
) -> None:
    out, fake = run(store, SeqJudge(False, True))
    (fills,) = users(fake, "fills")
    assert "1. (Polish-Russian War, director, <X1>)\n2. (<X1>, mother, end)" in fills
    assert FACT_FILM in fills  # Prompt 3 reads the pool
    # G' = G (the entities below theta: no pool sentence names "mother"), then the fills
    assert out["queries"] == [QUESTION, f"mother {FILL}"]


def test_step_6_at_most_three_retrievals_and_no_judgement_at_the_cap(store: Store) -> None:
    judge = SeqJudge(False)
    out, fake = run(store, judge)
    assert out["iterations"] == 3 and out["stop_reason"] == "max_iterations"
    assert len(judge.calls) == 2 and call_counts(fake)["fills"] == 2
    assert call_counts(fake)["extract"] == 3 and call_counts(fake)["answer"] == 1
    assert len({p["id"] for p in out["retrieved_passages"]}) == 6  # 3 rounds x 2, all new


def test_every_question_starts_from_an_empty_pool(store: Store) -> None:
    config = {"configurable": {"thread_id": "t"}}
    fake = fake_llm(structure=STRUCTURE)
    graph = build_graph(
        "rfm_rag", llm=fake, retriever=store, profile="paper", top_k=2,
        sufficiency_model=SeqJudge(True), checkpointer=InMemorySaver(),
    )  # fmt: skip
    graph.invoke({"question": QUESTION}, config)
    out = graph.invoke({"question": "Who directed the 1926 film Mother?"}, config)
    assert FACT_FILM not in users(fake, "answer")[-1]
    assert FACT_FILM not in [e["text"] for e in out["evidence_pool"]]
