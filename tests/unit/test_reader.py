"""The shared reader: rank what a method gathered, keep a budget, strongest next to the
question, answer in the short format."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from gaprag import build_graph
from gaprag.deps import Deps
from gaprag.errors import InputError
from gaprag.graphs import ITERATIVE
from gaprag.llm.client import LLM
from gaprag.nodes.reader import Gathered, choose, gathered_evidence, pack, rank, read, unique
from gaprag.stores.embeddings import HashingEmbedder
from gaprag.stores.store import Store
from gaprag.testing import ScriptedChatModel

Q = "Who built the tower in the capital of France?"
READER = "The passages are ordered from least to most relevant"  # the reader's prompt


def item(id_: str, text: str, title: str = "") -> dict[str, Any]:
    return {"id": id_, "title": title, "text": text, "source": "bm25", "score": 0.0, "round": 1}


POOL = [
    item("de", "Berlin is the capital of Germany and its largest city.", "Germany"),
    item("hamlet", "Hamlet is a tragedy written by William Shakespeare.", "Hamlet"),
    item("eiffel", "The Eiffel Tower in Paris was built by Gustave Eiffel.", "Eiffel Tower"),
    item("fr", "Paris is the capital and largest city of France.", "France"),
]


def ids(items: Any) -> list[str]:
    return [i["id"] for i in items]


def test_the_budget_keeps_the_strongest_and_puts_the_strongest_last() -> None:
    ranked = [(POOL[2], 3.0), (POOL[3], 2.0), (POOL[0], 1.0), (POOL[1], 0.5)]
    assert ids(pack(ranked, 2)) == ["fr", "eiffel"]
    assert ids(pack(ranked, 10)) == ["hamlet", "de", "fr", "eiffel"]


def test_bm25_ranks_the_gathered_set_against_the_question() -> None:
    ranked = asyncio.run(rank(POOL, "Who built the Eiffel Tower?", ranker="bm25"))
    assert ids(item for item, _ in ranked)[0] == "eiffel"
    assert ranked[-1][1] == 0.0  # a passage sharing no term scores nothing


def test_the_methods_own_text_takes_part_in_the_ranking() -> None:
    plain = asyncio.run(rank(POOL, "Which city?", ranker="bm25"))
    noted = asyncio.run(rank(POOL, "Which city?", ["Shakespeare wrote a tragedy"], ranker="bm25"))
    assert ids(i for i, _ in plain)[0] != "hamlet" and ids(i for i, _ in noted)[0] == "hamlet"


def test_retrieval_order_keeps_the_gathered_order_each_id_once() -> None:
    ranked = asyncio.run(rank([*POOL, POOL[0], item("x", "  ")], Q, ranker="retrieval"))
    assert ids(i for i, _ in ranked) == ["de", "hamlet", "eiffel", "fr"]
    assert ids(unique([POOL[1], POOL[1]])) == ["hamlet"]


def test_dense_ranks_by_embedding_similarity() -> None:
    question = "The Eiffel Tower in Paris was built by Gustave Eiffel."
    ranked = asyncio.run(rank(POOL, question, ranker="dense", embedder=HashingEmbedder()))
    assert ids(i for i, _ in ranked)[0] == "eiffel"
    assert ranked[0][1] > ranked[-1][1]


def test_llm_relevance_ranks_by_the_models_probability_of_yes() -> None:
    chat = ScriptedChatModel(
        rules=[("Germany", "Yes"), ("France", "No")],
        default="No",
        reply_logprobs={
            "Yes": [[("Yes", -0.1), ("No", -2.4)]],
            "No": [[("No", -0.3), ("Yes", -1.4)]],
        },
    )
    llm = LLM(chat, supports_logprobs=True)
    ranked = asyncio.run(rank(POOL, "Which country?", ranker="llm", llm=llm))
    assert ids(i for i, _ in ranked)[0] == "de" and len(chat.calls) == len(POOL)
    assert ranked[0][1] == pytest.approx(0.909, abs=1e-3)


def test_read_shows_the_budget_in_order_before_the_question() -> None:
    chat = ScriptedChatModel(default="Answer: Gustave Eiffel.")
    answer, shown = asyncio.run(
        read(LLM(chat), "Who built the Eiffel Tower?", Gathered(POOL), budget=2)
    )
    assert answer == "Gustave Eiffel" and len(shown) == 2 and shown[-1]["id"] == "eiffel"
    prompt = chat.prompts()[0]
    assert prompt.index("[2] Eiffel Tower") < prompt.index("Question: Who built")
    assert "[1] " in prompt and "[3] " not in prompt


def test_choose_gives_what_read_shows_without_a_call() -> None:
    question = "Who built the Eiffel Tower?"
    shown, ranked = asyncio.run(choose(question, Gathered(POOL), budget=2))
    assert len(shown) == 2 and shown[-1]["id"] == ids(i for i, _ in ranked)[0] == "eiffel"
    assert len(ranked) == len(POOL)
    chat = ScriptedChatModel(default="x")
    _, read_shown = asyncio.run(read(LLM(chat), question, Gathered(POOL), budget=2))
    assert ids(read_shown) == ids(shown)


def test_read_cuts_passages_to_the_word_budget() -> None:
    chat = ScriptedChatModel(default="x")
    long = item("long", " ".join(["tower"] * 50))
    asyncio.run(read(LLM(chat), "tower?", Gathered([long]), max_words=5))
    assert "tower tower tower tower tower ..." in chat.prompts()[0]


def test_the_default_gathering_reads_evidence_gate_passages_and_queries() -> None:
    state = SimpleNamespace(
        question=Q, evidence=[POOL[0]], gate_passages=[POOL[1]], queries=[Q, "capital of France"]
    )
    got = gathered_evidence(state)
    assert ids(got.passages) == ["de", "hamlet"] and list(got.notes) == ["capital of France"]


def ircot(store: Store, **options: Any) -> tuple[dict[str, Any], ScriptedChatModel]:
    chat = ScriptedChatModel(
        replies=["The capital of France is Paris.", "The tower is in Paris."],
        rules=[(READER, "Gustave Eiffel")],
        default="Unknown",
    )
    graph = build_graph("ircot", llm=chat, retriever=store, top_k=2, max_steps=2, **options)
    return dict(graph.invoke({"question": Q})), chat


def test_the_ranked_reader_answers_from_everything_the_method_gathered(store: Store) -> None:
    out, chat = ircot(store, reader="ranked", reader_budget=2)
    assert out["answer"] == "Gustave Eiffel" and out["stop_reason"] == "max_iterations"
    reader_prompt = chat.prompts()[-1]
    # two thoughts and the reader: the method's own answer call is left to the reader
    assert READER in reader_prompt and len(chat.calls) == 3
    assert len(out["evidence"]) == 2 and set(out["shown_ids"]) >= set(ids(out["evidence"]))
    record = next(t for t in out["trace"] if t.get("call") == "reader")
    assert record["ranker"] == "bm25" and record["ids"] == ids(out["evidence"])
    assert record["gathered"] == len(out["retrieved_ids"]) == 3  # the pool of both steps
    assert record["scores"] == sorted(record["scores"])
    # the strongest passage is the last one, just before the question
    last = out["evidence"][-1]["title"]
    assert reader_prompt.index(f"[2] {last}") < reader_prompt.index("Question:")


def test_by_default_the_method_keeps_its_own_answer_step(store: Store) -> None:
    out, chat = ircot(store)
    assert all(READER not in p for p in chat.prompts())
    assert not any(t.get("call") == "reader" for t in out["trace"])


def test_the_removed_answer_style_setting_is_refused_naming_reader(store: Store) -> None:
    with pytest.raises(InputError, match="answer_style") as refused:
        build_graph("ircot", llm=ScriptedChatModel(), retriever=store, answer_style="paper")
    assert "reader" in str(refused.value)


@pytest.mark.parametrize("method", ITERATIVE)
def test_every_iterative_method_can_end_with_the_reader(method: str, store: Store) -> None:
    graph = build_graph(method, llm=ScriptedChatModel(), retriever=store)
    assert "reader" in graph.nodes
    edges = {(e.source, e.target) for e in graph.get_graph().edges}
    # the reader's answer goes to the short-answer step through answer selection
    assert ("reader", "select") in edges
    assert ("select", "short_answer") in edges


def test_after_an_unsure_gate_the_reader_also_reads_plain_rags_passages(store: Store) -> None:
    chat = ScriptedChatModel(
        rules=[
            (READER, "Gustave Eiffel"),  # (the reader's prompt opens like plain RAG's)
            ("Use the passages below to answer the question.", "Paris"),
        ],
        replies=["The capital of France is Paris.", "The tower is in Paris."],
        reply_logprobs={"Paris": [[("Paris", -3.0), ("Lyon", -3.1)]]},
        default="Unknown",
    )
    graph = build_graph(
        "ircot", llm=LLM(chat, supports_logprobs=True), retriever=store, top_k=1, max_steps=2,
        gate="logprob_mean", reader="ranked", reader_budget=5,
    )  # fmt: skip
    out = graph.invoke({"question": Q})
    assert out["answer"] == "Gustave Eiffel" and out["decisions"][0]["decision"] == "continue"
    record = next(t for t in out["trace"] if t.get("call") == "reader")
    assert record["gathered"] == 5  # the gate's five passages (the loop's two among them)


@pytest.mark.parametrize("method", ["missing_knowledge", "rfm_rag", "migres"])
def test_the_reader_replaces_the_methods_final_answer_call(method: str, store: Store) -> None:
    from gaprag.graphs.migres.nodes import generate_answer as migres_answer
    from gaprag.graphs.missing_knowledge.nodes import generate_answer as mk_answer
    from gaprag.graphs.rfm_rag.nodes import generate_answer as rfm_answer

    node = {"missing_knowledge": mk_answer, "rfm_rag": rfm_answer, "migres": migres_answer}
    graph = build_graph(method, llm=ScriptedChatModel(), retriever=store, reader="ranked")
    context = graph.builder.context_schema
    assert context is not None
    state = graph.builder.state_schema(question=Q)
    chat = ScriptedChatModel(default="never asked")
    update = asyncio.run(
        node[method](state, SimpleNamespace(context=context()), Deps.of(llm=chat))  # type: ignore[arg-type]
    )
    assert chat.calls == [] and update["stop_reason"]


def test_plain_rag_with_the_reader_reorders_its_passages_strongest_last(store: Store) -> None:
    chat = ScriptedChatModel(rules=[(READER, "Paris")], default="never asked")
    graph = build_graph("standard_rag", llm=chat, retriever=store, reader="ranked", top_k=3)
    out = graph.invoke({"question": "What is the capital of France?"})
    assert out["answer"] == "Paris" and len(chat.calls) == 1  # one call: the reader's
    assert set(out["shown_ids"]) == set(out["retrieved_ids"])
    assert out["evidence"][-1]["id"] == "fr"  # the strongest, next to the question
