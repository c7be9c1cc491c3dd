"""RAG-EF in its paper configuration, judged at the model boundary: the public
``build_graph("rag_ef", profile="paper")`` with a scripted model over a pair store whose
similarities are set exactly (an embedder with fixed vectors).

Each test is named after the paper step it proves (Sec. 3, Eq. 2, Appendix A and B): Eq. 2
scores every stored (question, answer, chunk) pair by sim(q, q_i)^gamma * sim(q, c_i)^(1 - gamma)
with gamma = 0.5 and keeps the top K = 5; the answer prompt lists the K Q&A lines first, then
the pairs' unique chunks (N <= K) as Context1..N, whole, then the instruction and the question
last; one LLM call answers. No judge, no short-answer step, no fallback to document retrieval
when the store is empty."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gaprag import build_graph
from gaprag.stores.embeddings import Vectors
from gaprag.stores.pairs import PairStore, normalize_text
from gaprag.testing import ScriptedChatModel
from tests.methods.rag_ef import ANSWER_MARK

QUESTION = "Which pair does the store rank first?"
LONG = " ".join(f"word{i}" for i in range(300))  # longer than the shipped 150-word cut
REPLY = "the answer as the model wrote it, in nine words"

# (name, sim(q, q_i), sim(q, c_i), chunk): the chunk of P5 is P2's, so N < K.
# Eq. 2 at gamma = 0.5 ranks P2 .450, P3 .431, P4 .412, P5 .335, P1 .300 | P7 .280, P6 .138;
# the arithmetic mean would rank P4, P1, P6, P3, P2 and gamma = 1.0 P6, P1, P3, P2, P7.
PAIRS: list[tuple[str, float, float, str]] = [
    ("P1", 0.90, 0.10, "Chunk one."),
    ("P2", 0.45, 0.45, "Chunk two, shared by two pairs."),
    ("P3", 0.62, 0.30, f"Chunk three. {LONG}"),
    ("P4", 0.20, 0.85, "Chunk four."),
    ("P5", 0.25, 0.45, "Chunk two, shared by two pairs."),
    ("P6", 0.95, 0.02, "Chunk six."),
    ("P7", 0.28, 0.28, "Chunk seven."),
]
EQ2_TOP5 = ["P2", "P3", "P4", "P5", "P1"]


def vector(first: float, axis: int) -> list[float]:
    """A unit vector whose dot product with the query's (1, 0, 0, 0) is ``first``."""
    v = [first, 0.0, 0.0, 0.0]
    v[axis] = math.sqrt(1.0 - first * first)
    return v


class FixedEmbedder:
    """Vectors set per text: the query on axis 0, each pair's question and chunk at the cosine
    the table above gives it; any other text is orthogonal to the query."""

    name = "fixed-test-4"
    dim = 4

    def __init__(self) -> None:
        self.table: dict[str, list[float]] = {QUESTION: [1.0, 0.0, 0.0, 0.0]}
        for name, sim_q, sim_c, chunk in PAIRS:
            self.table[f"Question of {name}?"] = vector(sim_q, 1)
            self.table[normalize_text(chunk)] = vector(sim_c, 2)

    def embed(
        self, texts: Sequence[str], *, batch_size: int = 64, progress: bool = False
    ) -> Vectors:
        rows = [self.table.get(normalize_text(t), [0.0, 0.0, 0.0, 1.0]) for t in texts]
        return np.asarray(rows, dtype=np.float32)


@pytest.fixture
def pairs(tmp_path: Path) -> PairStore:
    store = PairStore.open(tmp_path / "pairs.sqlite", embedder=FixedEmbedder())
    for name, _, _, chunk in PAIRS:
        store.add(f"Question of {name}?", f"Answer of {name}", chunk)
    return store


def model() -> ScriptedChatModel:
    return ScriptedChatModel(default=REPLY)


def run(store: PairStore, chat: ScriptedChatModel, **kw: Any) -> dict[str, Any]:
    graph = build_graph("rag_ef", pair_store=store, llm=chat, profile="paper", **kw)
    return dict(graph.invoke({"question": QUESTION}))


def qa_lines(prompt: str) -> list[str]:
    return re.findall(r"^Question: Question of (P\d)\? Answer: Answer of \1$", prompt, re.M)


def test_eq2_geometric_mean_at_gamma_half_picks_and_orders_the_top_5_pairs(
    pairs: PairStore,
) -> None:
    chat = model()
    out = run(pairs, chat)
    (prompt,) = chat.prompts()
    assert qa_lines(prompt) == EQ2_TOP5  # neither the arithmetic mean's nor gamma = 1's
    expected = {n: math.sqrt(sq * sc) for n, sq, sc, _ in PAIRS}
    scores = [p["score"] for p in out["retrieved_pairs"]]
    assert scores == pytest.approx([expected[n] for n in EQ2_TOP5], abs=1e-5)


def test_eq2_gamma_weighs_the_question_similarity(pairs: PairStore) -> None:
    chat = model()
    run(pairs, chat, gamma=1.0)  # the question factor alone
    assert qa_lines(chat.prompts()[0]) == ["P6", "P1", "P3", "P2", "P7"]


def test_the_prompt_lists_the_qa_lines_then_the_unique_chunks_then_the_question_last(
    pairs: PairStore,
) -> None:
    chat = model()
    run(pairs, chat)
    lines = chat.prompts()[0].splitlines()
    contexts = [ln for ln in lines if ln.startswith("Context")]
    assert contexts[0].startswith("Context1: Chunk two")  # the best pair's chunk first
    assert [c.split(": ", 1)[1][:11] for c in contexts] == [
        "Chunk two, ",
        "Chunk three",
        "Chunk four.",
        "Chunk one.",
    ]  # P5's chunk is P2's: shown once, N = 4 < K
    last_qa = max(i for i, ln in enumerate(lines) if ln.startswith("Question: Question of"))
    first_context = lines.index(contexts[0])
    instruction = next(i for i, ln in enumerate(lines) if ANSWER_MARK in ln)
    assert last_qa < first_context < instruction
    assert lines[-1] == f"Question: {QUESTION}"
    assert not any(ln.startswith("Context") for ln in lines[:last_qa])


def test_chunks_are_shown_whole(pairs: PairStore) -> None:
    chat = model()
    run(pairs, chat)
    three = next(ln for ln in chat.prompts()[0].splitlines() if "Chunk three" in ln)
    assert three.endswith("word299")


def test_one_llm_call_answers_and_its_reply_is_the_answer(pairs: PairStore) -> None:
    chat = model()
    out = run(pairs, chat)
    assert len(chat.calls) == 1 and out["usage"]["llm_calls"] == 1  # no judge, no rewrite
    assert out["answer"] == REPLY and out["stop_reason"] == "answered"


def test_an_empty_store_answers_from_no_context_without_the_document_retriever(
    tmp_path: Path, tiny_docs: list[dict[str, str]]
) -> None:
    from gaprag.stores import HashingEmbedder
    from gaprag.stores.store import Store

    docs = Store.build(tmp_path / "docs", tiny_docs, embedder=HashingEmbedder(), progress=False)
    empty = PairStore.open(tmp_path / "empty.sqlite", embedder=FixedEmbedder())
    chat = model()
    out = run(empty, chat, retriever=docs)
    (prompt,) = chat.prompts()
    assert "Context" not in prompt and "Answer:" not in prompt
    assert prompt.splitlines()[-1] == f"Question: {QUESTION}"
    assert out["evidence"] == [] and out["usage"]["retrieval_calls"] <= 1


def test_set_s_with_the_paper_prompt_sends_the_appendix_a_instruction_alone(
    tmp_path: Path,
) -> None:
    from gaprag.graphs.rag_ef.synth import synthesize
    from gaprag.llm.client import LLM
    from gaprag.stores import HashingEmbedder

    chat = ScriptedChatModel(default="Q: Who built the tower? A: Eiffel")
    store = PairStore.open(tmp_path / "pairs.sqlite", embedder=HashingEmbedder())
    docs = [{"id": "t", "title": "Tower", "text": "The tower was built by Eiffel."}]
    report = synthesize(store, docs, LLM(chat), source="paper_s", progress=False, prompt="paper")
    prompt = chat.prompts()[0]
    assert prompt.startswith("Write question-and-answer pairs that test whether a reader")
    assert "answerable from the passage alone" not in prompt and "short phrase" not in prompt
    assert prompt.endswith("Passage:\nTower: The tower was built by Eiffel.")
    assert report.pairs == 1 and store.count(source="paper_s") == 1
