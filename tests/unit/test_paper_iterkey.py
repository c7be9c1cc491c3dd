"""IterKey in its paper configuration, judged at the model boundary: the public
``build_graph("iterkey", profile="paper")`` with a scripted model (the role fake of
tests/methods/iterkey.py: replies by prompt type, first-token logprobs on the validation call).

Each test is named after the paper step it proves (arXiv 2505.08450, Sec. 2, Table 1, Table 14):
P1 writes keywords for the query; BM25 retrieves the top 3 chunks for q + K_i; P2 answers the
query from them; P3 judges the answer against the same documents by a forced True/False choice,
the more probable option winning; True ends the run; False makes P4 rewrite the keywords from
the query and the previous keywords alone, and the round repeats, up to N = 5 rounds; with no
True the last answer is returned. Output caps: 50 tokens for keywords and answers, 30 for the
validation. Where the paper is silent, the tests hold the choices docs/methods/iterkey.md gives:
how a keyword list is read from a reply, an unreadable verdict counting as False, and what a run
records of each round (its keywords, documents, answer and verdict, the new keywords and
documents the paper counts per step in Tables 3-4), streams and returns."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from gaprag import build_graph
from gaprag.graphs.iterkey import OutputState
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


def paper_graph(store: Store, fake: RoleFake, *, logprobs: bool = True, **options: Any) -> Any:
    llm = LLM(fake, supports_logprobs=logprobs)
    return build_graph("iterkey", llm=llm, retriever=store, profile="paper", **options)


def run(
    store: Store, fake: RoleFake, question: str = Q, *, logprobs: bool = True
) -> dict[str, Any]:
    return dict(paper_graph(store, fake, logprobs=logprobs).invoke({"question": question}))


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


KEYWORD_REPLIES = [
    ('Keywords: ["Moon", "Eagle"] (not "Mars")', ["Moon", "Eagle"]),  # prose around the list
    ('Sure :] here: ["Moon", "Eagle"], not "Mars"', ["Moon", "Eagle"]),
    ('["Moon"] and then ["Mars"]', ["Moon"]),  # the first list
    ('["Apollo [11] Eagle", "Moon"] or "Mars"', ["Apollo [11] Eagle", "Moon"]),  # [] in quotes
    ('["V] Saturn", "Moon"] or "Mars"', ["V] Saturn", "Moon"]),
    ('["Armstrong\'s module", "Moon"] or "Mars"', ["Armstrong's module", "Moon"]),
    ('["", "Moon"] or "Mars"', ["Moon"]),  # an empty item dropped
    ('["the \\"Eagle\\" module", "Moon"] or "Mars"', ['the "Eagle" module', "Moon"]),  # \"
    ('["Eagle \\"[\\" Moon", "Luna"] or "Mars"', ['Eagle "[" Moon', "Luna"]),
    ('He said "go: ["Moon", "Eagle"] or "Mars"', ["Moon", "Eagle"]),  # a quote left open before
    ('["Apollo", 11] or "Mars"', ["Apollo", "11"]),  # a number is a keyword
    ('[true, "Moon"]', ["Moon"]),  # a boolean is not
    ("['Moon', 'Eagle']", ["Moon", "Eagle"]),  # Python quotes
    ('["Moon", "Eagle", "Arms', ["Moon", "Eagle"]),  # cut at the cap: the open item dropped
    ("1. Moon\n2. Eagle", ["Moon", "Eagle"]),  # no list: one keyword a line
    (
        f'["  Neil   Armstrong ", "Moon.", "moon", "", "{"a" * 101}", "{"b" * 100}"]',
        ["Neil Armstrong", "Moon", "b" * 100],  # cleaned, duplicates and overlong items out
    ),
]


@pytest.mark.parametrize(("reply", "keywords"), KEYWORD_REPLIES)
def test_p1_keywords_are_the_list_the_reply_writes_however_it_is_wrapped(
    module_store: Store, reply: str, keywords: list[str]
) -> None:
    out = run(module_store, role_fake(keywords=(reply,), verdicts=("True",)), Q_NO_HITS)
    assert out["keywords"] == keywords
    assert out["queries"] == [" ".join([Q_NO_HITS, *keywords])]  # q + K_1
    assert out["history"][0]["raw_keyword_output"] == reply
    assert out["parse_failures"] == []


def test_p1_without_a_keyword_list_retrieves_with_the_query_alone(module_store: Store) -> None:
    out = run(module_store, role_fake(keywords=("",), verdicts=("True",)))
    assert out["keywords"] == [] and out["queries"] == [Q]  # plain BM25 RAG
    assert out["parse_failures"] == [
        {"node": "generate_keywords", "iteration": 1, "raw": "", "fallback_used": "[]"}
    ]


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
    choices = [r["verdict_scores"]["choice"] for r in out["history"]]
    assert choices == ["False", "False", "True"]  # the tie's choice is False


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


def test_p4_shows_the_previous_keywords_as_they_were_written(module_store: Store) -> None:
    fake = role_fake(keywords=('["Gödel", "Zürich"]',), verdicts=("False", "True"))
    run(module_store, fake, Q_NO_HITS)
    (p4,) = calls_of(fake, "regenerate")
    assert 'Previous Keywords: ["Gödel", "Zürich"]' in prompt(p4)  # not \\u00f6


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
    assert "logprobs" not in p3["kwargs"] and p3["kwargs"]["max_tokens"] == 30  # Table 14

    fake = role_fake(verdicts=("False", "True"), answers=("a1", "Eagle"))
    out = run(module_store, fake, logprobs=False)
    assert kinds(fake).count("validate") == 2 and out["answer"] == "Eagle"  # its False goes on


def test_no_true_returns_the_last_answer_even_when_an_earlier_one_repeats_or_scored_higher(
    module_store: Store,
) -> None:
    fake = role_fake(
        verdicts=(0.1, 0.4, 0.2, 0.1, 0.1), answers=("Eagle", "Eagle", "Columbia", "Saturn", "Luna")
    )
    out = run(module_store, fake)
    assert out["answer"] == "Luna" and out["stop_reason"] == "max_iterations"
    assert out["first_true_iteration"] is None and out["verdicts"] == [False] * 5
    assert out["evidence"] == out["history"][-1]["documents"]
    (final,) = [t for t in out["trace"] if t["node"] == "finalize"]
    assert final == {
        "node": "finalize",
        "stop_reason": "max_iterations",
        "answer_from_iteration": 5,
        "policy": "last",
    }


def test_p3_an_unreadable_verdict_is_no_true_and_the_loop_goes_on(module_store: Store) -> None:
    fake = role_fake(verdicts=("Maybe", "True"), answers=("a1", "Eagle"))
    out = run(module_store, fake)
    assert kinds(fake) == [
        "keywords",
        "answer",
        "validate",  # first-token logprobs: neither option
        "validate",  # the forced choice again, as text, within the paper's 30 tokens
        "regenerate",
        "answer",
        "validate",
    ]
    assert calls_of(fake, "validate")[1]["kwargs"]["max_tokens"] == 30
    assert out["answer"] == "Eagle" and out["verdicts"] == [False, True]
    assert out["history"][0]["verdict_scores"] == {
        "prob_true": None,
        "prob_false": None,
        "p": None,
        "choice": "False",
        "method": "default",
        "raw": "Maybe",
    }
    assert out["parse_failures"] == [
        {"node": "validate_answer", "iteration": 1, "raw": "Maybe", "fallback_used": "False"}
    ]
    first = out["decisions"][0]
    assert (first["decision"], first["p"], first["path"]) == ("reject", None, "default")


def test_each_round_is_recorded_with_its_keywords_documents_answer_and_verdict(
    module_store: Store,
) -> None:
    replies = ('["Moon", "landing"]', '["moon", "Eiffel", "Paris"]')
    fake = role_fake(
        keywords=replies[:1], regen=replies[1:], verdicts=("False", "True"), answers=("a1", "a2")
    )
    out = run(module_store, fake)
    first, second = out["history"]
    queries = [f"{Q} Moon landing", f"{Q} moon Eiffel Paris"]
    assert out["queries"] == queries
    seen: list[str] = []
    for i, (record, query, keywords, reply, answer) in enumerate(
        zip(
            out["history"],
            queries,
            (["Moon", "landing"], ["moon", "Eiffel", "Paris"]),
            replies,
            ("a1", "a2"),
            strict=True,
        ),
        start=1,
    ):
        shown = module_store.search(query, k=3, mode="bm25")
        logged = module_store.search(query, k=5, mode="bm25")  # recall_k = 5
        assert record["iteration"] == i
        assert record["keywords"] == keywords and record["retrieval_query"] == query
        assert record["doc_ids"] == [h["id"] for h in shown]
        assert record["doc_scores"] == [d["score"] for d in record["documents"]]
        assert [d["id"] for d in record["documents"]] == record["doc_ids"]
        assert {d["round"] for d in record["documents"]} == {i}
        assert record["logged_doc_ids"] == [h["id"] for h in logged]
        assert record["new_doc_ids"] == [d for d in record["doc_ids"] if d not in seen]
        seen += record["new_doc_ids"]
        assert record["answer"] == answer and record["raw_answer_output"] == answer
        assert record["raw_keyword_output"] == reply
    assert first["new_keywords"] == ["Moon", "landing"]
    assert second["new_keywords"] == ["Eiffel", "Paris"]  # "moon" was a keyword of round 1
    assert second["doc_ids"] == ["crew", "landing", "eiffel"]
    assert second["new_doc_ids"] == ["eiffel"]
    assert first["verdict"] is False and second["verdict"] is True
    assert first["verdict_scores"] == {
        "prob_true": pytest.approx(0.1),
        "prob_false": pytest.approx(0.9),
        "p": pytest.approx(0.1),
        "choice": "False",
        "method": "logprobs",
        "raw": "False",
    }
    assert first["raw_validation_output"] == "False"
    assert second["verdict_scores"]["choice"] == "True"
    assert out["verdicts"] == [False, True] and out["first_true_iteration"] == 2
    assert out["parse_failures"] == []
    assert out["evidence"] == second["documents"]
    assert [
        (d["node"], d["round"], d["decision"], d["path"], d["threshold"], d["answer"])
        for d in out["decisions"]
    ] == [
        ("validate_answer", 1, "reject", "logprobs", 0.5, "a1"),
        ("validate_answer", 2, "accept", "logprobs", 0.5, "a2"),
    ]
    calls = [t for t in out["trace"] if t.get("call") == "validate_answer"]
    assert [t["path"] for t in calls] == ["logprobs", "logprobs"]
    (final,) = [t for t in out["trace"] if t["node"] == "finalize"]
    assert final == {
        "node": "finalize",
        "stop_reason": "validated",
        "answer_from_iteration": 2,
        "policy": "first_true",
    }


def test_each_step_of_each_round_is_streamed_as_it_happens(module_store: Store) -> None:
    fake = role_fake(verdicts=("False", "True"), answers=("a1", "a2"))
    graph = paper_graph(module_store, fake)
    events = list(graph.stream({"question": Q}, stream_mode="custom"))
    queries = [f"{Q} Moon landing", f"{Q} zeta2 Paris"]
    shown = [[h["id"] for h in module_store.search(q, k=3, mode="bm25")] for q in queries]
    assert events == [
        {"round": 1, "keywords": ["Moon", "landing"]},
        {"round": 1, "query": queries[0], "added": 3},
        {"round": 1, "answer": "a1", "verdict": False, "p": pytest.approx(0.1),
         "decided_by": "logprobs"},
        {"round": 2, "keywords": ["zeta2", "Paris"]},
        {"round": 2, "query": queries[1], "added": len(set(shown[1]) - set(shown[0]))},
        {"round": 2, "answer": "a2", "verdict": True, "p": pytest.approx(0.9),
         "decided_by": "logprobs"},
    ]  # fmt: skip


def test_the_paper_graph_takes_a_question_and_returns_iterkeys_output(
    module_store: Store,
) -> None:
    graph = paper_graph(module_store, role_fake(verdicts=("True",)), checkpointer=InMemorySaver())
    assert graph.name == "iterkey"
    assert set(graph.get_input_jsonschema()["properties"]) == {"question", "dataset_id"}
    fields = {f.name for f in dataclasses.fields(OutputState)}
    assert set(graph.get_output_jsonschema()["properties"]) == fields
    config = {"configurable": {"thread_id": "t"}}
    out = graph.invoke({"question": Q}, config)
    assert set(out) <= fields and out["history"]
    assert graph.get_state(config).values["answer"] == out["answer"]
