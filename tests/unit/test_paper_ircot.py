"""IRCoT in its paper configuration, judged at the model boundary: what each call sends (the
demonstrations, the paragraphs and their order, the question's framing, the reasoning so far,
the output cap), how many calls a question takes, what it returns and why it stopped. Paper:
arXiv 2212.10509; the released code: StonyBrookNLP/ircot (``commaqa/inference/ircot.py`` and the
``ircot_qa_codex_*`` configurations).

Paper steps: retrieve the top K paragraphs for the question (BM25); generate one chain-of-thought
sentence over N demonstrations and every paragraph so far; stop when it says "answer is", when a
step writes no sentence, or after the step limit; else query with the last sentence that states a
fact and add the paragraphs of its top K not gathered yet; a reader answers over the gathered
paragraphs (at most 15): the direct reader (the released direct-answer demonstrations), chosen
as the paper chooses the reader for a model, or with ``reader_style="cot"`` the
chain-of-thought reader of the GPT3 configuration, its answer read after "answer is"."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from gaprag import build_graph
from gaprag.graphs.ircot.demonstrations import count, demonstrations, fact_query, is_reasoning
from gaprag.llm.client import LLM
from gaprag.stores.embeddings import HashingEmbedder
from gaprag.stores.store import Store
from gaprag.testing import ScriptedChatModel

Q = "Who designed the tower in the capital of France?"
SEARCHED = "designed the tower in the capital of France?"  # the released code drops wh-words
REASON_Q = f"Q: Answer the following question by reasoning step-by-step.\n{Q}\nA: "
EIFFEL = "The tower in Paris was designed by Eiffel."
TOWNS = [f"{a}{b}ville" for a in "bdfkmpst" for b in "aeiou"][:30]  # one word each


@pytest.fixture
def store_docs() -> list[dict[str, str]]:
    docs = [
        {"id": "fr", "title": "France", "text": "Paris is the capital of France."},
        {"id": "eiffel", "title": "Eiffel Tower", "text": EIFFEL},
        # the same paragraph under another id: the released code gathers it once
        {"id": "eiffel_copy", "title": "Eiffel Tower", "text": EIFFEL},
    ]
    docs += [
        {"id": f"d{i}", "title": f"Town {w}", "text": f"Town {w} has a tower and a river."}
        for i, w in enumerate(TOWNS)
    ]
    return docs


def run(store: Store, *replies: str, **options: Any) -> tuple[dict[str, Any], ScriptedChatModel]:
    model = ScriptedChatModel(replies=list(replies), default="So the answer is: Eiffel.")
    llm = LLM(model, supports_logprobs=True)  # an endpoint with logprobs: none is asked for
    graph = build_graph("ircot", llm=llm, retriever=store, profile="paper", **options)
    return dict(graph.invoke({"question": Q})), model


def titles_in(prompt: str, after: str = "") -> list[str]:
    """The paragraph titles a prompt shows after its demonstrations (``after``)."""
    return re.findall(r"Wikipedia Title: (.+)", prompt[len(after) :] if after else prompt)


def shown(prompt: str, demos: str) -> list[str]:
    assert prompt.startswith(demos)
    return titles_in(prompt, demos)


def user(model: ScriptedChatModel, n: int) -> str:
    """The user turn of call ``n``."""
    return str(model.calls[n]["messages"][-1][1])


def test_step_1_the_top_k_bm25_paragraphs_for_the_question_reach_the_first_step(
    store: Store,
) -> None:
    out, model = run(store, "So the answer is: Eiffel.", "So the answer is: Eiffel.")
    top = store.search(SEARCHED, 4, mode="bm25")
    assert [d["id"] for d in top] != [d["id"] for d in store.search(SEARCHED, 4, mode="dense")]
    first = user(model, 0)
    expected = [d["title"] for d in top if d["id"] != "eiffel"]  # its copy ranks above it
    assert shown(first, demonstrations("hotpotqa", "cot", 3)) == expected
    assert out["queries"] == [SEARCHED]


def test_step_2_each_step_continues_the_chain_over_the_demonstrations_and_the_paragraphs(
    store: Store,
) -> None:
    _, model = run(store, "Paris is the capital of France.", "So the answer is: Eiffel.", "X")
    demos = demonstrations("hotpotqa", "cot", 3)
    assert count("hotpotqa") > 3 and demonstrations("hotpotqa", "cot", 4) not in model.prompts()[0]
    for n, call in enumerate(model.calls[:2]):
        (_, system), (_, user) = call["messages"]
        assert 'after "A:"' in system
        assert user.startswith(demos + "\n\n\nWikipedia Title: ")
        assert "# METADATA" not in user
        assert f"Wikipedia Title: Eiffel Tower\n{EIFFEL}" in user  # whole paragraphs
        assert user.endswith(REASON_Q + ("" if n == 0 else "Paris is the capital of France."))
        assert call["kwargs"]["max_tokens"] == 64  # one sentence a step
        assert not call["kwargs"].get("logprobs")


def test_step_2_a_paragraph_over_150_words_is_shown_whole(tmp_path: Path) -> None:
    long_text = EIFFEL + " " + " ".join(f"word{i}" for i in range(200))
    docs = [{"id": "eiffel", "title": "Eiffel Tower", "text": long_text}]
    store = Store.build(tmp_path / "store", docs, embedder=HashingEmbedder(), progress=False)
    _, model = run(store, "So the answer is: Eiffel.", "So the answer is: Eiffel.")
    assert f"Wikipedia Title: Eiffel Tower\n{long_text}\n\nQ: " in user(model, 0)  # no "..."


def test_step_2_only_the_first_sentence_of_a_reply_joins_the_chain(store: Store) -> None:
    out, model = run(
        store,
        "Paris is the capital of France. The tower there was designed by Eiffel.",
        "So the answer is: Eiffel.",
        "So the answer is: Eiffel.",
    )
    assert out["thoughts"] == ["Paris is the capital of France.", "So the answer is: Eiffel."]
    assert model.prompts()[1].endswith(REASON_Q + "Paris is the capital of France.")
    assert out["queries"][1] == "Paris the capital of France."  # "is" dropped


def test_step_3_a_sentence_stating_the_answer_ends_the_reasoning(store: Store) -> None:
    out, model = run(store, "So the answer is: Eiffel.", "So the answer is: Gustave Eiffel.")
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
        f"{EIFFEL} So the answer is: Eiffel.",  # one sentence a step: not yet the answer
        "So the answer is: Eiffel.",
        "So the answer is: Eiffel.",
    )
    # the "So ..." sentence is a reasoning step: the third query repeats the fact before it
    assert out["queries"] == [
        SEARCHED, "Paris has a tower by a river.", "Paris has a tower by a river.", EIFFEL,
    ]  # fmt: skip
    assert model.prompts()[2].endswith(
        REASON_Q + "Paris has a tower by a river. So the tower to look for is in Paris."
    )
    assert out["iterations"] == 4 and out["stop_reason"] == "answered"


def test_step_3_a_chain_of_reasoning_steps_alone_queries_with_the_question(store: Store) -> None:
    out, _ = run(store, "So the tower is in Paris.", "So the answer is: Eiffel.", "X")
    assert out["queries"] == [SEARCHED, SEARCHED]


def test_step_3_a_step_adds_the_paragraphs_of_its_top_k_not_gathered_yet(store: Store) -> None:
    fact = f"Paris and Town {TOWNS[5]} were designed by Eiffel."
    out, model = run(store, fact, "So the answer is: Eiffel.", "So the answer is: Eiffel.")
    demos = demonstrations("hotpotqa", "cot", 3)
    first = shown(user(model, 0), demos)
    gathered = {(d["title"], d["text"]) for d in store.search(SEARCHED, 4, mode="bm25")}
    top = store.search(fact, 4, mode="bm25")
    new = [d for d in top if (d["title"], d["text"]) not in gathered]
    assert 0 < len(new) < 4  # its top 4 hold gathered paragraphs (one a copy under another id)
    assert [e["round"] for e in out["evidence"]] == [1] * len(first) + [2] * len(new)
    assert shown(user(model, 1), demos) == first + [d["title"] for d in new]
    assert out["queries"] == [SEARCHED, fact]


def test_step_4_a_step_that_writes_no_sentence_ends_the_reasoning(store: Store) -> None:
    out, model = run(store, "Paris is the capital of France.", "  \n", "So the answer is: Eiffel.")
    assert out["iterations"] == 2 and out["stop_reason"] == "empty_step"
    rule = {"node": "reason", "p": None, "path": "rule", "threshold": None}
    assert out["decisions"] == [
        {**rule, "round": 1, "decision": "retrieve"},
        {**rule, "round": 2, "decision": "answer"},
    ]
    assert out["thoughts"] == ["Paris is the capital of France."]
    assert len(model.calls) == 3  # two steps, then the reader
    assert out["answer"] == "Eiffel"


def test_step_4_an_empty_first_step_goes_to_the_reader_with_no_reasoning(store: Store) -> None:
    out, model = run(store, "\n", "So the answer is: Eiffel.")
    assert out["stop_reason"] == "empty_step" and out["thoughts"] == []
    assert len(model.calls) == 2 and out["answer"] == "Eiffel"


def test_step_4_the_step_limit_of_ten_sentences_bounds_the_reasoning(store: Store) -> None:
    out, model = run(store, *[f"Town {w} has a tower." for w in TOWNS[:12]])
    assert out["iterations"] == 10 and out["stop_reason"] == "max_iterations"
    assert [d["decision"] for d in out["decisions"]] == ["retrieve"] * 9 + ["answer"]
    assert len(model.calls) == 11  # 10 sentences, then the reader
    assert model.calls[-1]["kwargs"]["max_tokens"] == 300


def test_step_5_the_direct_reader_answers_over_at_most_15_gathered_paragraphs(
    store: Store,
) -> None:
    steps = [" ".join(TOWNS[i : i + 4]) + " are towns." for i in range(0, 28, 4)]
    out, model = run(store, *steps, "So the answer is: Paris.", "Gustave Eiffel\nQ: more")
    (_, system), (_, reader) = model.calls[-1]["messages"]
    assert "answer only" in system
    demos = demonstrations("hotpotqa", "direct", 3)  # the released direct-answer files
    assert demonstrations("hotpotqa", "cot", 1) not in reader
    assert reader.endswith(f"Q: Answer the following question.\n{Q}\nA:")
    assert "are towns" not in reader  # the reasoning is not shown to the reader
    assert len(out["evidence"]) > 15
    assert shown(reader, demos) == [e["title"] for e in out["evidence"][:15]]
    assert model.calls[-1]["kwargs"]["max_tokens"] == 300
    # the reader's first line is the answer; the chain's "Paris" is not it
    assert out["answer"] == "Gustave Eiffel" and out["stop_reason"] == "answered"


def test_step_5_with_reader_style_cot_a_chain_of_thought_reader_answers_over_15_paragraphs(
    store: Store,
) -> None:
    steps = [" ".join(TOWNS[i : i + 4]) + " are towns." for i in range(0, 28, 4)]
    out, model = run(
        store, *steps, "So the answer is: Paris.",
        "Eiffel designed it. So the answer is: Gustave Eiffel.\nQ: more",
        reader_style="cot",
    )  # fmt: skip
    (_, system), (_, reader) = model.calls[-1]["messages"]
    assert 'after "A:"' in system
    demos = demonstrations("hotpotqa", "cot", 3)  # the released configuration for GPT3
    assert demonstrations("hotpotqa", "direct", 1) not in reader
    assert reader.endswith(REASON_Q)  # a chain written afresh: no reasoning so far
    assert "are towns" not in reader
    assert len(out["evidence"]) > 15
    assert shown(reader, demos) == [e["title"] for e in out["evidence"][:15]]
    assert model.calls[-1]["kwargs"]["max_tokens"] == 300
    # the answer read after "answer is", its full stop dropped; the chain's "Paris" is not it
    assert out["answer"] == "Gustave Eiffel" and out["stop_reason"] == "answered"


def test_step_5_a_reader_reply_without_answer_is_gives_its_whole_first_line(
    store: Store,
) -> None:
    out, _ = run(store, "So the answer is: Paris.", "Gustave Eiffel designed it.\nMore text")
    assert out["answer"] == "Gustave Eiffel designed it"


def test_step_5_the_readers_answer_loses_its_last_full_stop_even_after_an_initial(
    store: Store,
) -> None:
    out, _ = run(store, "So the answer is: Paris.", "So the answer is: Washington D.C.")
    assert out["answer"] == "Washington D.C"


def test_step_5_an_empty_reader_reply_gives_an_empty_answer(store: Store) -> None:
    out, _ = run(store, "So the answer is: Paris.", "")
    assert out["answer"] == "" and out["stop_reason"] == "answered"


def test_nothing_else_runs_no_gate_selection_or_short_answer_step(store: Store) -> None:
    out, model = run(
        store, "So the answer is: Eiffel.", "The engineer who designed it was Gustave Eiffel"
    )
    assert len(model.calls) == 2  # no plain-RAG gate call before, no short-answer call after
    assert out["answer"] == "The engineer who designed it was Gustave Eiffel"
    assert not any(c["kwargs"].get("logprobs") for c in model.calls)


def test_the_demonstrations_of_each_set_are_the_released_files() -> None:
    assert (count("hotpotqa"), count("2wikimultihopqa"), count("musique")) == (29, 20, 20)
    assert count("musique", "direct") == 20
    assert demonstrations("musique", "cot", 1).startswith("Wikipedia Title:")
    # two blank lines between demonstrations, as the released prompts have them
    two = demonstrations("hotpotqa", "cot", 2)
    assert two.startswith(demonstrations("hotpotqa", "cot", 1) + "\n\n\nWikipedia Title: ")


def test_reasoning_sentences_are_not_queries() -> None:
    assert is_reasoning("So the answer is: Paris.") and is_reasoning("Thus, both are French.")
    assert is_reasoning("That is, 1990 + 5 = 1995") and not is_reasoning("Paris is in France.")
    assert is_reasoning("It opened in 1990 + 5 = 1995.")  # arithmetic, whatever its start
    assert fact_query(["So it is Paris."], "the question") == "the question"
