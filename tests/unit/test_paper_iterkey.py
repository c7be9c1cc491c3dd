"""IterKey in its paper configuration, judged at the model boundary: the public
``build_graph("iterkey", profile="paper")`` with a scripted model (the role fake of
tests/methods/iterkey.py: replies by prompt type, first-token logprobs on the validation call).

Each test is named after the paper step it proves (arXiv 2505.08450, Sec. 2, Table 1, Table 14):
P1 writes keywords for the query; BM25 retrieves the top 3 chunks for q + K_i; P2 answers the
query from them; P3 judges the answer against the same documents by a forced True/False choice,
the more probable option winning; True ends the run; False makes P4 rewrite the keywords from
the query and the previous keywords alone, and the round repeats, up to N = 5 rounds; with no
True the last answer is returned. Output caps: 50 tokens for keywords and answers, 30 for the
validation."""

from __future__ import annotations

import math
from typing import Any

import pytest

from gaprag import build_graph
from gaprag.llm.client import LLM
from gaprag.stores import HashingEmbedder, Store
from gaprag.stores.documents import Document
from tests.methods.iterkey import CORPUS, Q_NO_HITS, TEXT, Q, RoleFake, kind_of, kinds, role_fake

LONG_WORDS = [f"w{i}" for i in range(400)]
# a chunk longer than the paper's 256-token chunks, found only by the keyword "Selene"
LONG: Document = {"id": "long", "title": "Selene", "text": "Selene " + " ".join(LONG_WORDS)}


@pytest.fixture(scope="module")
def module_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    root = tmp_path_factory.mktemp("iterkey-paper") / "s"
    return Store.build(root, [*CORPUS, LONG], embedder=HashingEmbedder(), progress=False)


def run(
    store: Store, fake: RoleFake, question: str = Q, *, logprobs: bool = True
) -> dict[str, Any]:
    llm = LLM(fake, supports_logprobs=logprobs)
    graph = build_graph("iterkey", llm=llm, retriever=store, profile="paper")
    return dict(graph.invoke({"question": question}))


def calls_of(fake: RoleFake, kind: str) -> list[dict[str, Any]]:
    return [c for c in fake.calls if kind_of(c) == kind]


def prompt(call: dict[str, Any]) -> str:
    return "\n".join(text for _, text in call["messages"])


def shown_titles(text: str) -> list[str]:
    """The ``[n] title`` headers of the documents block, in order."""
    return [ln.split("] ", 1)[1] for ln in text.splitlines() if ln[:1] == "[" and "] " in ln]


def test_p1_asks_once_for_keywords_naming_the_query_with_the_list_format_last(
    module_store: Store,
) -> None:
    fake = role_fake(verdicts=("True",))
    run(module_store, fake)
    (p1,) = calls_of(fake, "keywords")
    text = prompt(p1)
    assert f"keywords for Query: {Q}." in text  # the query inside the request
    assert text.rstrip().endswith("with nothing else.")  # the output format last
    assert "Documents" not in text and "[1]" not in text  # the query alone, no passages
    assert p1["kwargs"]["max_tokens"] == 50 and "logprobs" not in p1["kwargs"]  # Table 14


def test_bm25_retrieves_for_the_query_and_its_keywords_and_p2_sees_the_top_3_in_rank_order(
    module_store: Store,
) -> None:
    fake = role_fake(keywords=('["Moon"]',), verdicts=("True",))
    out = run(module_store, fake, Q_NO_HITS)
    assert out["queries"] == [f"{Q_NO_HITS} Moon"]  # q + K_1
    ranked = [h["title"] for h in module_store.search(f"{Q_NO_HITS} Moon", k=4, mode="bm25")]
    assert len(ranked) == 4  # four chunks match: the fourth must not be shown
    (p2,) = calls_of(fake, "answer")
    assert shown_titles(prompt(p2)) == ranked[:3]


def test_p2_answers_the_query_from_the_round_documents_with_the_instruction_last(
    module_store: Store,
) -> None:
    fake = role_fake(keywords=('["Moon"]',), verdicts=("True",))
    run(module_store, fake, Q_NO_HITS)
    (p2,) = calls_of(fake, "answer")
    text = prompt(p2)
    assert text.index(f"Query: {Q_NO_HITS}") < text.index("Documents:")  # question first
    assert TEXT["moon"] in text and TEXT["landing"] in text  # the documents, whole
    assert text.rstrip().endswith("Give a clear, concise answer and nothing else.")
    assert p2["kwargs"]["max_tokens"] == 50 and "logprobs" not in p2["kwargs"]  # Table 14


def test_chunks_reach_the_prompts_cut_to_the_papers_256(module_store: Store) -> None:
    fake = role_fake(keywords=('["Selene"]',), verdicts=("True",))
    run(module_store, fake, Q_NO_HITS)
    text = prompt(calls_of(fake, "answer")[0])
    shown = text.split("Selene\n", 1)[1].split()
    assert shown[:2] == ["Selene", "w0"] and "w254" in shown and "w255" not in shown


def test_p3_judges_query_answer_and_the_same_documents_by_a_forced_choice_within_30_tokens(
    module_store: Store,
) -> None:
    fake = role_fake(keywords=('["Moon"]',), answers=("Eagle",), verdicts=("True",))
    run(module_store, fake, Q_NO_HITS)
    p2 = prompt(calls_of(fake, "answer")[0])
    (p3,) = calls_of(fake, "validate")
    text = prompt(p3)
    documents = p2.split("Documents:\n", 1)[1].split("\n\nGive a clear", 1)[0]
    order = [
        f"Query: {Q_NO_HITS}",
        "Answer: Eagle",
        "Previous Retrieval Documents:",
        "True or False",
    ]
    assert [text.index(part) for part in order] == sorted(text.index(part) for part in order)
    assert documents in text  # the documents P2 answered from
    assert p3["kwargs"]["logprobs"] is True and p3["kwargs"]["top_logprobs"] >= 2
    assert p3["kwargs"]["max_tokens"] <= 30  # Table 14


def test_p3_true_in_round_one_ends_the_run_after_three_calls_with_that_answer(
    module_store: Store,
) -> None:
    answer = "The lunar module Eagle, which landed in July 1969 with Armstrong and Aldrin"
    fake = role_fake(verdicts=("True",), answers=(answer,))
    out = run(module_store, fake)
    assert kinds(fake) == ["keywords", "answer", "validate"]  # no gate before, no rewrite after
    assert out["answer"] == answer and out["stop_reason"] == "validated"  # as P2 wrote it
    assert out["iterations"] == 1 and out["usage"]["llm_calls"] == 3


def test_p3_the_more_probable_option_wins_and_a_tie_is_no_true(module_store: Store) -> None:
    fake = role_fake(verdicts=(0.5, 0.49, 0.51), answers=("a1", "a2", "Eagle"))
    out = run(module_store, fake)
    decisions = [d for d in out["decisions"] if d["node"] == "validate_answer"]
    assert [(d["p"], d["decision"]) for d in decisions] == [
        (0.5, "reject"),
        (0.49, "reject"),
        (0.51, "accept"),
    ]
    assert out["answer"] == "Eagle" and out["iterations"] == 3


def test_p3_p_true_is_read_from_the_two_options_alone(module_store: Store) -> None:
    other = {"True": math.log(0.4), "False": math.log(0.2), "Maybe": math.log(0.4)}
    out = run(module_store, role_fake(logprobs=other))
    decision = out["decisions"][0]
    assert decision["p"] == pytest.approx(2 / 3) and decision["decision"] == "accept"

    no_true = {"False": math.log(0.5), "Maybe": math.log(0.5)}
    out = run(module_store, role_fake(logprobs=no_true))
    assert [d["p"] for d in out["decisions"]] == [0.0] * 5  # True absent: P(True) = 0
    assert out["stop_reason"] == "max_iterations"


def test_p4_rewrites_the_keywords_from_the_query_and_the_previous_keywords_alone(
    module_store: Store,
) -> None:
    fake = role_fake(keywords=('["Moon"]',), verdicts=("False", "True"), answers=("a1", "a2"))
    run(module_store, fake, Q_NO_HITS)
    assert kinds(fake) == ["keywords", "answer", "validate", "regenerate", "answer", "validate"]
    (p4,) = calls_of(fake, "regenerate")
    text = prompt(p4)
    assert text.index(f"Query: {Q_NO_HITS}") < text.index('Previous Keywords: ["Moon"]')
    assert text.index("Previous Keywords:") < text.index("Reply only with")  # the format last
    assert TEXT["moon"] not in text and "a1" not in text  # no documents, no answer
    assert p4["kwargs"]["max_tokens"] == 50


def test_the_next_round_retrieves_with_the_new_keywords_alone_and_shows_only_its_documents(
    module_store: Store,
) -> None:
    fake = role_fake(
        keywords=('["Eiffel", "Paris"]',),
        regen=('["Shakespeare", "Hamlet"]',),
        verdicts=("False", "True"),
    )
    out = run(module_store, fake, Q_NO_HITS)
    assert out["queries"] == [f"{Q_NO_HITS} Eiffel Paris", f"{Q_NO_HITS} Shakespeare Hamlet"]
    first, second = (prompt(c) for c in calls_of(fake, "answer"))
    assert shown_titles(first) == ["Eiffel Tower", "France"]
    assert shown_titles(second) == ["Hamlet", "William Shakespeare", "Globe Theatre"]
    assert shown_titles(prompt(calls_of(fake, "validate")[1])) == shown_titles(second)
    assert out["answer"] == "a2" and out["stop_reason"] == "validated"


def test_no_true_in_five_rounds_returns_the_last_answer_after_fifteen_calls(
    module_store: Store,
) -> None:
    fake = role_fake(verdicts=("False",))
    out = run(module_store, fake)
    assert (
        kinds(fake)
        == ["keywords", "answer", "validate"]
        + [
            "regenerate",
            "answer",
            "validate",
        ]
        * 4
    )
    assert out["iterations"] == 5 and out["stop_reason"] == "max_iterations"
    assert out["answer"] == "a5" and len(out["queries"]) == 5


def test_an_endpoint_without_logprobs_takes_the_validators_forced_choice(
    module_store: Store,
) -> None:
    fake = role_fake(verdicts=("True",), answers=("Eagle",))
    out = run(module_store, fake, logprobs=False)
    assert kinds(fake) == ["keywords", "answer", "validate"]  # its True ends the run
    assert out["answer"] == "Eagle" and out["stop_reason"] == "validated"
    (p3,) = calls_of(fake, "validate")
    assert "logprobs" not in p3["kwargs"] and p3["kwargs"]["max_tokens"] <= 30

    fake = role_fake(verdicts=("False", "True"), answers=("a1", "Eagle"))
    out = run(module_store, fake, logprobs=False)
    assert kinds(fake).count("validate") == 2 and out["answer"] == "Eagle"  # its False goes on
