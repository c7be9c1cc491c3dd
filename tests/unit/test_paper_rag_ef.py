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
from gaprag.stores.pairs import PairStore, default_chunk_id, normalize_text, pair_id
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
    the table above (or ``rows``) gives it; any other text is orthogonal to the query."""

    name = "fixed-test-4"
    dim = 4

    def __init__(self, rows: Sequence[tuple[str, float, float, str]] = PAIRS) -> None:
        self.table: dict[str, list[float]] = {QUESTION: [1.0, 0.0, 0.0, 0.0]}
        for name, sim_q, sim_c, chunk in rows:
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


def context_lines(prompt: str) -> list[str]:
    return [ln for ln in prompt.splitlines() if ln.startswith("Context")]


def add_pairs(store: PairStore, names: Sequence[str], source: str = "expert") -> None:
    for name, _, _, chunk in PAIRS:
        if name in names:
            store.add(f"Question of {name}?", f"Answer of {name}", chunk, source=source)


def test_eq2_geometric_mean_at_gamma_half_picks_and_orders_the_top_5_pairs(
    pairs: PairStore,
) -> None:
    chat = model()
    out = run(pairs, chat)
    (prompt,) = chat.prompts()
    assert qa_lines(prompt) == EQ2_TOP5  # neither the arithmetic mean's nor gamma = 1's
    expected = {n: math.sqrt(sq * sc) for n, sq, sc, _ in PAIRS}
    ranked = out["retrieved_pairs"]
    assert [p["score"] for p in ranked] == pytest.approx([expected[n] for n in EQ2_TOP5], abs=1e-5)
    factors = {n: (sq, sc) for n, sq, sc, _ in PAIRS}
    assert [(p["sim_q"], p["sim_c"]) for p in ranked] == [
        pytest.approx(factors[n], abs=1e-5) for n in EQ2_TOP5
    ]
    assert [p["rank"] for p in ranked] == [1, 2, 3, 4, 5]
    # the evidence and the ids the prompt showed: the five pairs, then the four unique chunks
    chunks = {n: c for n, _, _, c in PAIRS}
    pair_ids = [pair_id(f"Question of {n}?", f"Answer of {n}", chunks[n]) for n in EQ2_TOP5]
    chunk_ids = [default_chunk_id(chunks[n]) for n in ("P2", "P3", "P4", "P1")]
    assert [e["id"] for e in out["evidence"]] == pair_ids + chunk_ids
    assert out["shown_ids"] == pair_ids + chunk_ids
    assert {e["round"] for e in out["evidence"]} == {1}


def test_eq2_gamma_weighs_the_question_similarity(pairs: PairStore) -> None:
    chat = model()
    run(pairs, chat, gamma=1.0)  # the question factor alone
    assert qa_lines(chat.prompts()[0]) == ["P6", "P1", "P3", "P2", "P7"]


def test_eq2_gamma_zero_ranks_by_the_chunk_similarity_alone(pairs: PairStore) -> None:
    chat = model()
    run(pairs, chat, gamma=0.0)
    # P2 and P5 share a chunk, so they tie; the higher mean of the two factors (P2's) goes first
    assert qa_lines(chat.prompts()[0]) == ["P4", "P2", "P5", "P3", "P7"]


def test_eq2_ties_break_by_the_mean_of_the_factors_then_the_newer_pair(tmp_path: Path) -> None:
    rows = [("T", 0.6, 0.8, "Chunk near."), ("T", 0.6, 0.2, "Chunk far.")]
    store = PairStore.open(tmp_path / "ties.sqlite", embedder=FixedEmbedder(rows))
    store.add("Question of T?", "far", "Chunk far.")
    store.add("Question of T?", "old", "Chunk near.")
    store.add("Question of T?", "corrected", "Chunk near.")  # the same pair, answered anew
    chat = model()
    out = run(store, chat, gamma=1.0)  # one question, so three equal scores
    assert [p["answer"] for p in out["retrieved_pairs"]] == ["corrected", "old", "far"]
    answers = re.findall(r"^Question: Question of T\? Answer: (\w+)$", chat.prompts()[0], re.M)
    assert answers == ["corrected", "old", "far"]


def test_eq2_a_store_of_fewer_than_k_pairs_shows_every_pair(tmp_path: Path) -> None:
    store = PairStore.open(tmp_path / "one.sqlite", embedder=FixedEmbedder())
    add_pairs(store, ["P1"])
    chat = model()
    run(store, chat)
    (prompt,) = chat.prompts()
    assert qa_lines(prompt) == ["P1"]
    assert context_lines(prompt) == ["Context1: Chunk one."]


def test_eq2_scores_a_pair_added_since_the_last_question(tmp_path: Path) -> None:
    late = ("P0", 0.99, 0.99, "Chunk zero, written by the expert.")
    store = PairStore.open(tmp_path / "pairs.sqlite", embedder=FixedEmbedder([*PAIRS, late]))
    add_pairs(store, [n for n, *_ in PAIRS])
    chat = model()
    run(store, chat)
    store.add("Question of P0?", "Answer of P0", late[3])  # no reindexing, no rebuild
    run(store, chat)
    first, second = chat.prompts()
    assert qa_lines(first) == EQ2_TOP5
    assert qa_lines(second) == ["P0", *EQ2_TOP5[:4]]
    assert context_lines(second)[0] == f"Context1: {late[3]}"


def test_eq2_ranks_the_union_of_the_sets_named_in_sources(tmp_path: Path) -> None:
    oracle = ("P0", 0.99, 0.99, "Chunk zero, the oracle's.")
    store = PairStore.open(tmp_path / "sets.sqlite", embedder=FixedEmbedder([*PAIRS, oracle]))
    add_pairs(store, ["P1", "P2", "P4", "P5", "P6", "P7"], source="synthetic")
    add_pairs(store, ["P3"], source="expert")
    store.add("Question of P0?", "Answer of P0", oracle[3], source="oracle")
    both, synthetic, every = model(), model(), model()
    run(store, both, sources="synthetic+expert")  # S and E
    run(store, synthetic, sources="synthetic")  # S alone
    run(store, every)  # every set, O included
    assert qa_lines(both.prompts()[0]) == EQ2_TOP5
    assert qa_lines(synthetic.prompts()[0]) == ["P2", "P4", "P5", "P1", "P7"]
    assert qa_lines(every.prompts()[0]) == ["P0", *EQ2_TOP5[:4]]


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
    assert chat.calls[0]["kwargs"]["max_tokens"] == 32
    assert out["answer"] == REPLY and out["stop_reason"] == "answered"
    assert out["first_answer"] == REPLY
    # one retrieval with the question itself, one pass, no judge's decision
    assert out["queries"] == [QUESTION] and out["iterations"] == 1
    assert out["decisions"] == [] and out.get("verdict", "") == ""
    assert out["gated_out"] == []  # no score gate


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
    assert ANSWER_MARK in prompt  # RAG-EF's prompt with both blocks empty, not standard RAG's
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


def test_set_s_writes_pairs_for_every_chunk_of_the_corpus(tmp_path: Path) -> None:
    from gaprag.graphs.rag_ef.synth import synthesize
    from gaprag.llm.client import LLM
    from gaprag.stores import HashingEmbedder
    from gaprag.stores.documents import Document

    docs = [
        Document(id="d1", title="Tower", text="The tower was built by Eiffel."),
        Document(id="d2", title="", text="Paris is the capital of France."),
        Document(id="d3", title="River", text="The Seine flows through Paris."),
    ]
    chat = ScriptedChatModel(
        rules=[
            ("Eiffel", "Q: Who built the tower? A: Eiffel"),
            ("capital", "Q: What is the capital of France? A: Paris"),
            ("Seine", "Q: Which river flows through Paris? A: The Seine"),
        ]
    )
    store = PairStore.open(tmp_path / "pairs.sqlite", embedder=HashingEmbedder())
    report = synthesize(store, docs, LLM(chat), progress=False, prompt="paper")
    chunks = [
        "Tower: The tower was built by Eiffel.",
        "Paris is the capital of France.",  # a chunk without a title is its text
        "River: The Seine flows through Paris.",
    ]
    assert [p.rsplit("Passage:\n", 1)[1] for p in chat.prompts()] == chunks  # one call a chunk
    assert {c["kwargs"]["max_tokens"] for c in chat.calls} == {512}
    assert [(p["question"], p["answer"], p["chunk"], p["chunk_id"]) for p in store.list()] == [
        ("Who built the tower?", "Eiffel", chunks[0], "d1"),
        ("What is the capital of France?", "Paris", chunks[1], "d2"),
        ("Which river flows through Paris?", "The Seine", chunks[2], "d3"),
    ]
    assert store.count(source="synthetic") == 3  # S, the set the ladder's tiers name
    done = (report.chunks, report.skipped, report.processed, report.empty, report.pairs)
    assert done == (3, 0, 3, 0, 3)
    # each chunk once: a second run finds every chunk done and calls the model no more
    again = synthesize(store, docs, LLM(chat), progress=False, prompt="paper")
    assert len(chat.calls) == 3 and (again.skipped, again.processed, again.pairs) == (3, 0, 0)


def test_set_s_keeps_every_pair_the_reply_writes_in_the_q_a_form(tmp_path: Path) -> None:
    from gaprag.graphs.rag_ef.synth import synthesize
    from gaprag.llm.client import LLM
    from gaprag.stores import HashingEmbedder

    reply = "\n".join(
        [
            "**Q:** Who built the tower? **A:** Eiffel",
            '1. Q: When was it built? A: 1889 Q: Where is it? A: "Paris"',
            "2) Q: What is its height?",
            "A: 330 m",
            "Q: What does its sign say? A: Exit A: this way",
            "Q: who built the tower? A: eiffel",  # a repeat
            "Q: What is it made of? A:",  # no answer
            "A line that is no pair.",
        ]
    )
    chat = ScriptedChatModel(default=reply)
    store = PairStore.open(tmp_path / "pairs.sqlite", embedder=HashingEmbedder())
    docs = [{"id": "t", "title": "Tower", "text": "The tower was built by Eiffel."}]
    report = synthesize(store, docs, LLM(chat), progress=False, prompt="paper")
    assert [(p["question"], p["answer"]) for p in store.list()] == [
        ("Who built the tower?", "Eiffel"),
        ("When was it built?", "1889"),
        ("Where is it?", "Paris"),
        ("What is its height?", "330 m"),
        ("What does its sign say?", "Exit A: this way"),
    ]
    assert report.pairs == 5
