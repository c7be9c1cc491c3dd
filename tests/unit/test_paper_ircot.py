"""IRCoT in its paper configuration, step by step against its paper (arXiv 2212.10509) and the
released code (StonyBrookNLP/ircot), with a scripted model over a small store.

Paper steps: retrieve K paragraphs for the question; generate one chain-of-thought sentence over
the few-shot demonstrations and every paragraph so far; stop when the sentence says "answer is",
when the reply holds no sentence, or after the step limit, else retrieve K more with the last sentence that states a fact; a
reader answers over the gathered paragraphs (at most 15)."""

from __future__ import annotations

from typing import Any

import pytest

from gaprag import build_graph
from gaprag.graphs.ircot.demonstrations import count, demonstrations, fact_query, is_reasoning
from gaprag.stores.store import Store
from gaprag.testing import ScriptedChatModel

Q = "Who designed the tower in the capital of France?"


@pytest.fixture
def store_docs() -> list[dict[str, str]]:
    docs = [
        {"id": "fr", "title": "France", "text": "Paris is the capital of France."},
        {
            "id": "eiffel",
            "title": "Eiffel Tower",
            "text": "The tower in Paris was designed by Eiffel.",
        },
    ]
    docs += [
        {"id": f"d{i}", "title": f"Town {i}", "text": f"Town {i} has a tower and a river {i}."}
        for i in range(30)
    ]
    return docs


def run(store: Store, *replies: str, **options: Any) -> tuple[dict[str, Any], ScriptedChatModel]:
    model = ScriptedChatModel(replies=list(replies), default="Eiffel.")
    graph = build_graph("ircot", llm=model, retriever=store, profile="paper", **options)
    return dict(graph.invoke({"question": Q})), model


def test_paper_settings_are_the_released_codes() -> None:
    from gaprag.context import effective_settings

    graph = build_graph("ircot", llm=ScriptedChatModel(), profile="paper")
    settings = {k: v["value"] for k, v in effective_settings(graph.builder.context_schema).items()}
    assert settings["top_k"] == 4 and settings["retrieval_mode"] == "bm25"  # K, BM25
    assert settings["max_steps"] == 10 and settings["max_passages"] == 15  # step and paragraph caps
    assert settings["demos"] == 3 and settings["query_from"] == "fact"
    assert settings["empty_step"] == "stop"
    assert settings["final_reader"] == "always" and settings["reader"] == "paper"
    assert settings["gate"] == "off" and settings["max_passage_words"] == 1000


def test_step_1_retrieves_k_paragraphs_for_the_question(store: Store) -> None:
    out, _ = run(store, "Eiffel designed it. So the answer is: Eiffel.", "Eiffel")
    assert out["queries"] == [Q]
    assert [e["round"] for e in out["evidence"]] == [1] * 4


def test_step_2_reasons_over_the_released_demonstrations_and_the_paragraphs(store: Store) -> None:
    _, model = run(store, "Eiffel designed it. So the answer is: Eiffel.", "Eiffel")
    prompt = model.prompts()[0]
    demos = demonstrations("hotpotqa", "cot", 3)
    assert demos in prompt and "# METADATA" not in prompt
    assert demonstrations("hotpotqa", "cot", 4) not in prompt  # N = 3 demonstrations
    assert "Wikipedia Title: Eiffel Tower\nThe tower in Paris was designed by Eiffel." in prompt
    assert prompt.endswith(
        f"Q: Answer the following question by reasoning step-by-step.\n{Q}\nA: "
    )  # the reasoning so far follows "A:" (none yet)
    assert prompt.index(demos) < prompt.index("Wikipedia Title: Eiffel Tower")


def test_step_3_a_sentence_stating_the_answer_ends_the_reasoning(store: Store) -> None:
    out, model = run(
        store, "Eiffel designed the tower. So the answer is: Eiffel.", "Gustave Eiffel."
    )
    assert len(model.calls) == 2  # one reasoning step, then the reader
    assert out["stop_reason"] == "answered" and out["iterations"] == 1
    assert [d["decision"] for d in out["decisions"]] == ["answer"]


def test_step_3_otherwise_it_queries_with_the_last_sentence_that_states_a_fact(
    store: Store,
) -> None:
    out, model = run(
        store,
        "Paris has a tower by a river.",
        "So the tower to look for is in Paris.",
        "The tower in Paris was designed by Eiffel. So the answer is: Eiffel.",
        "Eiffel",
    )
    # the "So ..." sentence is a reasoning step: the third query repeats the fact before it
    assert out["queries"] == [Q, "Paris has a tower by a river.", "Paris has a tower by a river."]
    assert (
        "A: Paris has a tower by a river. So the tower to look for is in Paris."
        in (model.prompts()[2])
    )
    assert [e["round"] for e in out["evidence"]] == [1] * 4 + [2] * 4 + [3] * 4  # K new each step


def test_step_4_the_step_limit_bounds_the_reasoning(store: Store) -> None:
    out, model = run(store, *[f"Fact number {i} about towers." for i in range(12)], max_steps=10)
    assert out["iterations"] == 10 and out["stop_reason"] == "max_iterations"
    assert len(model.calls) == 11  # 10 sentences, then the reader


def test_step_4_a_step_that_writes_no_sentence_ends_the_reasoning(store: Store) -> None:
    out, model = run(store, "Paris is the capital of France.", "  \n", "Gustave Eiffel.")
    assert out["iterations"] == 2 and out["stop_reason"] == "empty_step"
    assert out["thoughts"] == ["Paris is the capital of France."]
    assert len(model.calls) == 3  # two steps, then the reader
    assert model.prompts()[-1].endswith(f"Q: Answer the following question.\n{Q}\nA:")
    assert out["answer"] == "Gustave Eiffel"


def test_a_step_that_writes_no_sentence_retrieves_again_outside_paper_mode(store: Store) -> None:
    out, model = run(store, "Paris is the capital of France.", "", "", empty_step="continue",
                     max_steps=4)  # fmt: skip
    assert out["iterations"] == 4 and out["stop_reason"] == "max_iterations"
    assert len(model.calls) == 5


def test_step_5_the_reader_always_answers_over_the_gathered_paragraphs(store: Store) -> None:
    out, model = run(
        store,
        *[f"Fact number {i} about towers." for i in range(4)],
        "So the answer is: Paris.",
        "Gustave Eiffel.\nMore text",
    )
    reader = model.prompts()[-1]
    assert demonstrations("hotpotqa", "direct", 3) in reader
    assert reader.endswith(f"Q: Answer the following question.\n{Q}\nA:")
    assert "Fact number" not in reader  # the reader sees the paragraphs, not the reasoning
    assert (
        reader.count("Wikipedia Title:")
        - demonstrations("hotpotqa", "direct", 3).count("Wikipedia Title:")
        == 15
    )  # 5 steps x K = 20 gathered, the first 15 shown
    # the reader's first line, its full stop dropped, overrides the chain's "Paris"
    assert out["answer"] == "Gustave Eiffel" and out["stop_reason"] == "answered"


def test_no_gate_selection_or_short_answer_step_runs(store: Store) -> None:
    out, model = run(
        store, "So the answer is: Eiffel.", "The engineer who designed it was Gustave Eiffel"
    )
    assert len(model.calls) == 2  # no plain-RAG gate call before, no short-answer call after
    assert out["answer"] == "The engineer who designed it was Gustave Eiffel"


def test_the_demonstrations_of_each_set_are_the_released_files() -> None:
    assert (count("hotpotqa"), count("2wikimultihopqa"), count("musique")) == (29, 20, 20)
    assert count("musique", "direct") == 20
    assert demonstrations("musique", "cot", 1).startswith("Wikipedia Title:")


def test_the_readers_answer_is_read_as_the_released_code_reads_it() -> None:
    from gaprag.graphs.ircot.demonstrations import first_line

    assert first_line("Gustave Eiffel.\nMore") == "Gustave Eiffel"
    assert first_line("So the answer is: Gustave Eiffel.") == "Gustave Eiffel"
    assert first_line("The answer is 1889") == "1889"


def test_reasoning_sentences_are_not_queries() -> None:
    assert is_reasoning("So the answer is: Paris.") and is_reasoning("Thus, both are French.")
    assert is_reasoning("That is, 1990 + 5 = 1995") and not is_reasoning("Paris is in France.")
    assert fact_query(["So it is Paris."], "the question") == "the question"
