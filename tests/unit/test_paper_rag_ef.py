"""RAG-EF in its paper configuration, step by step, with a scripted model over a small pair
store (the helpers of tests/methods/rag_ef.py).

Paper steps: the feedback store holds (question, answer, chunk) triples; Eq. 2 scores each
pair by sim(q, q_i)^gamma * sim(q, c_i)^(1 - gamma) with gamma = 0.5; the top K = 5 pairs give
K Q&A lines and their unique chunks (N <= K), whole; one LLM call answers over them. No judge,
no fallback to plain retrieval when the store is empty (the paper has none)."""

from __future__ import annotations

import re
from pathlib import Path

from gaprag import build_graph
from gaprag.stores import HashingEmbedder
from gaprag.stores.pairs import PairStore
from tests.methods.rag_ef import fake, fill

LONG = " ".join(f"word{i}" for i in range(300))


def store(tmp_path: Path) -> PairStore:
    return PairStore.open(tmp_path / "pairs.sqlite", embedder=HashingEmbedder())


def test_paper_settings() -> None:
    from gaprag.context import effective_settings

    graph = build_graph("rag_ef", llm=fake(), profile="paper")
    s = {k: v["value"] for k, v in effective_settings(graph.builder.context_schema).items()}
    assert s["top_k"] == 5 and s["gamma"] == 0.5 and s["scoring"] == "geometric"
    assert s["retrieval_mode"] == "rag_ef" and s["qa_render_mode"] == "qa"
    assert s["judge"] == "off" and s["empty_store_fallback"] is False
    assert s["reader"] == "paper" and s["gate"] == "off" and s["max_passage_words"] == 1000


def test_eq2_ranks_pairs_and_one_call_answers_over_k_qa_lines_and_their_chunks(
    tmp_path: Path,
) -> None:
    pairs = store(tmp_path)
    fill(pairs)
    pairs.add("Who wrote the play Macbeth?", "William Shakespeare", f"Macbeth is a play. {LONG}")
    llm = fake()
    graph = build_graph("rag_ef", pair_store=pairs, llm=llm, profile="paper")
    out = graph.invoke({"question": "Who wrote Hamlet?"})
    assert len(llm.calls) == 1  # no judge, no short-answer step
    assert out["answer"] == "William Shakespeare"
    scores = [p["score"] for p in out["retrieved_pairs"]]
    assert len(scores) == 5 and scores == sorted(scores, reverse=True)  # top K by Eq. 2
    lines = llm.prompts()[0].splitlines()
    assert sum(bool(re.match(r"Question: .* Answer: ", ln)) for ln in lines) == 5
    contexts = [ln for ln in lines if ln.startswith("Context")]
    assert 1 <= len(contexts) <= 5
    assert any(p["question"] == "Who wrote the play Macbeth?" for p in out["retrieved_pairs"])
    assert any("Macbeth is a play." in c and c.endswith("word299") for c in contexts)  # whole


def test_an_empty_store_answers_from_no_context(
    tmp_path: Path, tiny_docs: list[dict[str, str]]
) -> None:
    from gaprag.stores.store import Store

    docs = Store.build(tmp_path / "docs", tiny_docs, embedder=HashingEmbedder(), progress=False)
    llm = fake()
    graph = build_graph(
        "rag_ef", pair_store=store(tmp_path), llm=llm, retriever=docs, profile="paper"
    )
    out = graph.invoke({"question": "Who wrote Hamlet?"})
    assert "Context1" not in llm.prompts()[0] and out["evidence"] == []


def test_set_s_with_the_paper_prompt_sends_the_appendix_a_instruction_alone(
    tmp_path: Path,
) -> None:
    from gaprag.graphs.rag_ef.synth import synthesize
    from gaprag.llm.client import LLM
    from gaprag.testing import ScriptedChatModel

    chat = ScriptedChatModel(default="Q: Who built the tower? A: Eiffel")
    pairs = store(tmp_path)
    docs = [{"id": "t", "title": "Tower", "text": "The tower was built by Eiffel."}]
    report = synthesize(pairs, docs, LLM(chat), source="paper_s", progress=False, prompt="paper")
    prompt = chat.prompts()[0]
    assert prompt.startswith("Write question-and-answer pairs that test whether a reader")
    assert "answerable from the passage alone" not in prompt and "short phrase" not in prompt
    assert prompt.endswith("Passage:\nTower: The tower was built by Eiffel.")
    assert report.pairs == 1 and pairs.count(source="paper_s") == 1
