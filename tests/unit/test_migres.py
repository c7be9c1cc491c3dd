"""MIGRES: behaviour tests that need no GPU and no real model (see docs/methods/migres.md).

Replies come from a ScriptedChatModel routed by prompt content; retrieval runs on a real Store
built with the HashingEmbedder; the knowledge filter's scores come from a fake scorer.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.runtime import Runtime

from gaprag import build_graph
from gaprag.accounting import metered
from gaprag.deps import Deps
from gaprag.graphs.migres.context import Context, budget, threshold
from gaprag.graphs.migres.deps import MigresDeps
from gaprag.graphs.migres.filter import (
    DEFAULT_EMBEDDING_DELTA,
    CrossEncoderScorer,
    EmbeddingScorer,
    ScoreDoc,
    knowledge_filter,
    split_sentences,
)
from gaprag.graphs.migres.known_info import SEED_FACTS
from gaprag.graphs.migres.nodes import extract, judge_missing, verify_nli
from gaprag.graphs.migres.parsing import (
    LeafReply,
    MainReply,
    clean_queries,
    judgement,
    salvage_leaf,
    salvage_main,
)
from gaprag.graphs.migres.state import Snippet, State
from gaprag.llm.client import LLM
from gaprag.state.base import Evidence
from gaprag.stores import HashingEmbedder, Store
from gaprag.testing import ScriptedChatModel
from tests.methods.migres import (
    FINAL,
    FINAL_REPLY,
    KNOW,
    LEAF,
    LEVITY,
    MAIN,
    Q0,
    QUERY,
    SUFF,
    UNANSWERABLE,
    VERIFY,
    ChoiceChat,
    FakeScorer,
    FakeVerifier,
    asked,
    counter_reply,
    hashing_store,
    leaf_json,
    main_json,
    prompts_with,
    run,
    with_logprobs,
)


# -- fixtures --------------------------------------------------------------------------------
@pytest.fixture
def levity(tmp_path: Path) -> Store:
    return hashing_store(tmp_path / "levity", LEVITY)


# -- 1. topology -----------------------------------------------------------------------------
def test_graph_has_the_method_nodes_and_edges(levity: Store) -> None:
    graph = build_graph("migres", llm=ScriptedChatModel(), retriever=levity)
    drawn = graph.get_graph()
    assert set(drawn.nodes) - {"__start__", "__end__"} == {
        "init", "retrieve", "rerank_filter", "llm_knowledge", "extract", "verify_nli",
        "update_evidence_pool", "judge_missing", "regenerate_keywords", "generate_answer",
        "finalize", "short_answer", "gate", "reader", "select",
    }  # fmt: skip
    edges = {(e.source, e.target, e.conditional) for e in drawn.edges}
    assert edges == {
        ("__start__", "gate", False),
        ("gate", "init", True),
        ("gate", "short_answer", True),
        ("init", "retrieve", False),
        ("retrieve", "rerank_filter", False),
        ("rerank_filter", "extract", True),
        ("rerank_filter", "llm_knowledge", True),
        ("rerank_filter", "update_evidence_pool", True),
        ("llm_knowledge", "extract", False),
        ("extract", "verify_nli", False),
        ("verify_nli", "update_evidence_pool", False),
        ("update_evidence_pool", "judge_missing", True),
        ("update_evidence_pool", "generate_answer", True),
        ("judge_missing", "finalize", True),
        ("judge_missing", "regenerate_keywords", True),
        ("judge_missing", "generate_answer", True),  # a run at the operator's limit
        ("regenerate_keywords", "retrieve", False),
        ("generate_answer", "finalize", False),
        ("finalize", "reader", False),
        ("reader", "select", False),
        ("select", "short_answer", False),
        ("short_answer", "__end__", False),
    }


# -- 2-4. stopping and budget ----------------------------------------------------------------
def test_early_stop_when_the_first_judge_answers(levity: Store) -> None:
    answer = main_json("Paris", 5)
    out, chat = run(
        levity,
        [(LEAF, leaf_json(("Levity was directed by Ed Solomon.", [0]))), (MAIN, answer)],
    )
    assert out["answer"] == "Paris"
    assert out["stop_reason"] == "answered" and out["status"] == "answered"
    assert out["iterations"] == 1 and out["judge_rounds"] == 1
    assert out["usage"]["llm_calls"] == 3 == len(chat.calls)  # leaf, main, sufficiency
    assert out["llm_calls_by_kind"] == {"leaf": 1, "main": 1, "sufficiency": 1}
    assert out["queries"] == [Q0]
    assert out["known_info"] == ["Levity was directed by Ed Solomon."]
    assert out["confidence"] == 5


@pytest.mark.parametrize(("t", "rounds"), [(5, 6), (3, 4)])
def test_budget_exhausted_forces_a_final_answer(tmp_path: Path, t: int, rounds: int) -> None:
    docs = [
        {
            "id": f"p{i}",
            "title": f"Film {i}",
            "text": f"Film number {i} is a drama film made in year {1900 + i}.",
        }
        for i in range(40)
    ]
    store = hashing_store(tmp_path / "films", docs)
    rules = [
        (LEAF, counter_reply(lambda n: leaf_json((f"Fact number {n} about the film.", [0])))),
        (MAIN, UNANSWERABLE),
        (QUERY, counter_reply(lambda n: f"Which film was made in round {n}?")),
        (FINAL, FINAL_REPLY),
    ]
    out, chat = run(store, rules, max_iterations=t, question="Which film is the oldest drama film?")
    kinds = out["llm_calls_by_kind"]
    assert kinds == {"main": t, "sufficiency": t, "query": t, "leaf": rounds, "final": 1}
    assert out["iterations"] == rounds and out["judge_rounds"] == t
    assert out["status"] == "forced" and out["stop_reason"] == "max_iterations"
    assert out["answer"] == "No"
    assert len(out["known_info"]) == rounds
    assert out["usage"]["llm_calls"] == len(chat.calls) == t + t + t + rounds + 1
    assert len(out["passages_per_round"]) == rounds


def test_judge_is_skipped_when_a_round_adds_nothing(levity: Store) -> None:
    leaf = counter_reply(
        lambda n: leaf_json(("Levity was directed by Ed Solomon.", [0])) if n == 1 else leaf_json()
    )
    queries = counter_reply(lambda n: f"Who is the director number {n} of the film?")
    rules = [(LEAF, leaf), (MAIN, UNANSWERABLE), (QUERY, queries), (FINAL, FINAL_REPLY)]
    out, chat = run(levity, rules, max_iterations=3)
    kinds = out["llm_calls_by_kind"]
    assert kinds["main"] == 1  # rounds 2 and 3 add nothing: no judge call
    assert kinds["query"] == 3 and kinds["final"] == 1
    assert out["judge_rounds"] == 3 and out["iterations"] == 4
    query_prompts = prompts_with(chat, QUERY)
    assert len(query_prompts) == 3
    assert all("Missing Information: the director of Levity" in p for p in query_prompts)
    skipped = [e for e in out["trace"] if e.get("event") == "skipped"]
    assert len(skipped) == 2


def test_judge_skip_can_be_turned_off(levity: Store) -> None:
    leaf = counter_reply(
        lambda n: leaf_json(("Levity was directed by Ed Solomon.", [0])) if n == 1 else leaf_json()
    )
    queries = counter_reply(lambda n: f"Who is the director number {n} of the film?")
    rules = [(LEAF, leaf), (MAIN, UNANSWERABLE), (QUERY, queries), (FINAL, FINAL_REPLY)]
    out, _ = run(levity, rules, max_iterations=3, skip_judge_if_no_new_info=False)
    assert out["llm_calls_by_kind"]["main"] == 3


# -- 5-7. query generation and memory --------------------------------------------------------
LEVITY_QUERIES = (
    "1. Who directed Levity?\nWho directed Levity?\nshort\n"
    "What is Ed Solomon's nationality?\nWhere was Ed Solomon born?"
)


def test_clean_queries_strips_filters_and_caps() -> None:
    history = [Q0, "What is Ed Solomon's nationality?"]
    assert clean_queries(LEVITY_QUERIES, history=history) == [
        "Who directed Levity?",
        "Where was Ed Solomon born?",
    ]
    many = "\n".join(f"- Query {i}: what about topic number {i}?" for i in range(6))
    assert len(clean_queries(many, history=[])) == 3
    assert clean_queries('"Who wrote the play Hamlet?"', history=[]) == [
        "Who wrote the play Hamlet?"
    ]
    assert clean_queries("short\nwhat is ed solomon's NATIONALITY?", history=history) == []


def test_generated_queries_feed_the_next_round_and_the_history(levity: Store) -> None:
    leaf = counter_reply(lambda n: leaf_json((f"Fact {n} about Levity and its director.", [0])))
    replies = iter(
        [
            "Who directed Levity?\nWhat is Ed Solomon's nationality?",
            LEVITY_QUERIES,  # both history matches are dropped
            "short\nWho directed Levity?",  # everything filtered: falls back to q0
        ]
    )
    rules = [
        (LEAF, leaf),
        (MAIN, UNANSWERABLE),
        (QUERY, lambda _m: next(replies)),
        (FINAL, FINAL_REPLY),
    ]
    out, chat = run(levity, rules, max_iterations=3)
    assert out["queries"] == [
        Q0,
        "Who directed Levity?",
        "What is Ed Solomon's nationality?",
        "Where was Ed Solomon born?",
        Q0,
    ]
    assert out["query_history"] == [
        Q0,
        "Who directed Levity?",
        "What is Ed Solomon's nationality?",
        "Where was Ed Solomon born?",
    ]
    second = prompts_with(chat, QUERY)[1]
    assert (
        f"Historical Questions: {Q0} Who directed Levity? What is Ed Solomon's nationality?"
        in second
    )


def test_empty_query_reply_searches_the_missing_information(levity: Store) -> None:
    rules = [
        (LEAF, counter_reply(lambda n: leaf_json((f"Fact {n} about the film Levity.", [0])))),
        (MAIN, UNANSWERABLE),
        (QUERY, ""),
        (FINAL, FINAL_REPLY),
    ]
    out, _ = run(levity, rules, max_iterations=1)
    assert out["queries"] == [Q0, "the director of Levity"]


def test_seen_counter_limits_how_often_a_passage_is_shown(tmp_path: Path) -> None:
    names = "ABCDEF"
    docs = [
        {
            "id": n,
            "title": f"Doc {n}",
            "text": f"Document {n} talks about the film festival of {n} city.",
        }
        for n in names
    ]
    store = hashing_store(tmp_path / "seen", docs)
    scores = {n: 10.0 - i for i, n in enumerate(names)}  # A best, F worst, all above delta

    def score(_q: str, d: ScoreDoc) -> float:
        return scores[d["title"][-1]]

    leaf = counter_reply(
        lambda n: (
            leaf_json(("Document A describes a film festival.", [0])) if n == 1 else leaf_json()
        )
    )
    queries = counter_reply(lambda n: f"What happened at film festival number {n}?")
    rules = [(LEAF, leaf), (MAIN, UNANSWERABLE), (QUERY, queries), (FINAL, FINAL_REPLY)]
    out, chat = run(
        store, rules, scorer=FakeScorer(score), max_iterations=3, top_k=2, sentence_filter=False,
        delta=0.0,
    )  # fmt: skip
    leaf_prompts = prompts_with(chat, LEAF)
    shown = [[n for n in names if f"(Title: Doc {n})" in p] for p in leaf_prompts]
    # A is cited in round 1 (shown once, then used): never again. B is shown in rounds 1 and 2
    # without being cited: excluded from round 3 on.
    assert shown == [["A", "B"], ["B", "C"], ["C", "D"], ["D", "E"]]
    assert out["passages_per_round"] == [2, 2, 2, 2]
    assert [e["id"] for e in out["evidence"]] == ["A"]


# -- 8-12. filtering -------------------------------------------------------------------------
def _cand(i: int, text: str, title: str = "T") -> Evidence:
    return Evidence(id=f"c{i}", title=title, text=text, source="bm25", score=1.0, round=1)


def test_passage_threshold_keeps_scores_at_or_above_delta() -> None:
    cands = [_cand(i, f"Passage number {i} has some words.") for i in range(3)]
    table = {c["text"]: s for c, s in zip(cands, [5.1, 3.0, 2.99], strict=True)}
    snippets, log = knowledge_filter(
        cands, ["q"], FakeScorer(lambda _q, d: table[d["text"]]), delta=3.0, seen_counts={},
        sentence_filter=False,
    )  # fmt: skip
    assert [s["id"] for s in snippets] == ["c0", "c1"]
    assert [s["score"] for s in snippets] == [5.1, 3.0]
    assert log["above_delta"] == 2


def test_passage_score_is_the_max_over_queries_and_keeps_that_query() -> None:
    cands = [_cand(0, "A passage about Ed Solomon and his films.")]
    table = {"q1": 1.0, "q2": 4.0, "q3": 2.0}
    snippets, _ = knowledge_filter(
        cands, ["q1", "q2", "q3"], FakeScorer(lambda q, _d: table[q]), delta=3.0,
        seen_counts={}, sentence_filter=False,
    )  # fmt: skip
    assert snippets[0]["query"] == "q2" and snippets[0]["score"] == 4.0


def test_passages_shown_twice_are_filtered_out() -> None:
    cands = [_cand(0, "First passage text here."), _cand(1, "Second passage text here.")]
    snippets, _ = knowledge_filter(
        cands, ["q"], FakeScorer(5.0), delta=3.0, seen_counts={"First passage text here.": 2},
        sentence_filter=False,
    )  # fmt: skip
    assert [s["id"] for s in snippets] == ["c1"]


def _sentence_scorer(passage: float, sentences: list[float], texts: list[str]) -> FakeScorer:
    table = dict(zip(texts, sentences, strict=True))
    return FakeScorer(lambda _q, d: table.get(d["text"], passage))


def test_whole_passage_is_kept_when_no_sentence_beats_it() -> None:
    s = ["Levity is a film.", "It was released in 2003.", "Ed Solomon directed it."]
    cand = _cand(0, " ".join(s))
    snippets, _ = knowledge_filter(
        [cand], ["q"], _sentence_scorer(6.0, [5.5, 1.0, 2.0], s), delta=3.0, seen_counts={}
    )
    assert snippets[0]["text"] == cand["text"] == snippets[0]["origin_text"]


def test_sentences_at_or_above_delta_are_kept_in_order() -> None:
    s = ["Levity is a film.", "It was released in 2003.", "Ed Solomon directed it."]
    cand = _cand(0, " ".join(s))
    snippets, _ = knowledge_filter(
        [cand], ["q"], _sentence_scorer(4.0, [7.0, 1.0, 3.5], s), delta=3.0, seen_counts={}
    )
    assert snippets[0]["text"] == "Levity is a film. Ed Solomon directed it."
    assert snippets[0]["origin_text"] == cand["text"] and snippets[0]["score"] == 4.0


def test_repeated_sentences_across_passages_are_kept_once() -> None:
    s = ["Ed Solomon directed Levity.", "Levity stars Billy Bob Thornton."]
    cands = [_cand(0, " ".join(s)), _cand(1, s[0] + " Something else entirely here.")]
    table = {cands[0]["text"]: 5.0, cands[1]["text"]: 4.0, s[0]: 9.0, s[1]: 1.0}
    snippets, _ = knowledge_filter(
        cands, ["q"], FakeScorer(lambda _q, d: table.get(d["text"], 0.0)), delta=3.0,
        seen_counts={},
    )  # fmt: skip
    assert [sn["text"] for sn in snippets] == ["Ed Solomon directed Levity."]


def test_sentence_splitting_repairs() -> None:
    text = (
        "The city has 1.5 million people. Many animals live there, e.g. foxes and owls. "
        "Dr. Smith founded it in 1900. It is large."
    )
    assert split_sentences(text) == [
        "The city has 1.5 million people.",
        "Many animals live there, e.g. foxes and owls.",
        "Dr. Smith founded it in 1900.",
        "It is large.",
    ]
    assert split_sentences("One sentence. but lowercase continues it.") == [
        "One sentence. but lowercase continues it."
    ]


def test_sentence_contained_in_the_query_is_dropped() -> None:
    s = ["Who directed Levity?", "Ed Solomon directed Levity in 2003."]
    scorer = _sentence_scorer(4.0, [9.0, 8.0], s)
    snippets, _ = knowledge_filter(
        [_cand(0, " ".join(s))], ["Who directed Levity? Tell me."], scorer, delta=3.0,
        seen_counts={},
    )  # fmt: skip
    assert snippets[0]["text"] == "Ed Solomon directed Levity in 2003."
    assert ("Who directed Levity? Tell me.", "Who directed Levity?") not in scorer.seen


def test_display_cap_order_and_short_snippets(tmp_path: Path) -> None:
    docs = [
        {
            "id": f"s{i}",
            "title": f"Doc {i}",
            "text": f"Film review number {i} praises the acting and the plot.",
        }
        for i in range(8)
    ]
    docs.append({"id": "short", "title": "Doc short", "text": "Film review short."})
    store = hashing_store(tmp_path / "cap", docs)

    def score(_q: str, d: ScoreDoc) -> float:
        return 100.0 if d["title"] == "Doc short" else float(d["title"].split()[-1])

    answer = main_json("x", 5)
    out, chat = run(
        store, [(LEAF, leaf_json(("Review 7 praises the acting.", [0]))), (MAIN, answer)],
        scorer=FakeScorer(score), sentence_filter=False, delta=0.0, question="film review?",
    )  # fmt: skip
    prompt = prompts_with(chat, LEAF)[0]
    assert [f"Passage {i}: (Title: Doc {7 - i})" in prompt for i in range(5)] == [True] * 5
    assert "Passage 5" not in prompt and "Doc short" not in prompt
    assert out["passages_per_round"] == [5]
    assert out["evidence"][0]["id"] == "s7"


# -- 13. LLM-knowledge fallback --------------------------------------------------------------
KNOWLEDGE = "Ed Solomon is an American screenwriter and director born in 1960."


def test_llm_knowledge_fallback_becomes_the_only_passage(levity: Store) -> None:
    answer = main_json("No", 4)
    out, chat = run(
        levity,
        [(KNOW, KNOWLEDGE), (LEAF, leaf_json((KNOWLEDGE, [0]))), (MAIN, answer)],
        scorer=FakeScorer(0.1), delta=0.5,
    )  # fmt: skip
    know = prompts_with(chat, KNOW)
    assert len(know) == 1 and know[0].endswith(f"Question: {Q0}\nInformation:")
    leaf = prompts_with(chat, LEAF)[0]
    assert f"Passage 0: (Title: LLM knowledge) {KNOWLEDGE}" in leaf and "Passage 1" not in leaf
    assert leaf.endswith(f"Question: {Q0}\nYour response:")
    assert out["known_info"] == [KNOWLEDGE]
    assert out["evidence"][0]["source"] == "llm"
    assert out["llm_calls_by_kind"] == {"knowledge": 1, "leaf": 1, "main": 1, "sufficiency": 1}


def test_llm_knowledge_uses_the_first_pending_query(levity: Store) -> None:
    rules = [
        (KNOW, "Sorry, I have no information about that."),
        (MAIN, UNANSWERABLE),
        (QUERY, "Who directed the 2003 film Levity?\nWhat nationality is Ed Solomon?"),
        (FINAL, FINAL_REPLY),
    ]
    out, chat = run(levity, rules, scorer=FakeScorer(0.1), delta=0.5, max_iterations=1)
    know = prompts_with(chat, KNOW)
    assert [p.rsplit("Question: ", 1)[1] for p in know] == [
        f"{Q0}\nInformation:",
        "Who directed the 2003 film Levity?\nInformation:",
    ]
    assert prompts_with(chat, LEAF) == []  # refusals give no passage, so no leaf call
    assert out["known_info"] == []


def test_no_llm_knowledge_call_when_disabled(levity: Store) -> None:
    rules = [
        (MAIN, UNANSWERABLE),
        (QUERY, "Who directed the 2003 film Levity?"),
        (FINAL, FINAL_REPLY),
    ]
    out, chat = run(
        levity, rules, scorer=FakeScorer(0.1), delta=0.5, max_iterations=1, llm_knowledge=False
    )
    assert prompts_with(chat, KNOW) == [] and prompts_with(chat, LEAF) == []
    assert out["llm_calls_by_kind"] == {"main": 1, "query": 1, "final": 1}
    assert out["passages_per_round"] == [0, 0]


FINAL_FROM_PASSAGES = "Answer the question using only the passages below"


@pytest.mark.parametrize(
    ("llm_knowledge", "facts", "from_passages"),
    [
        (False, [], True),  # the switch off, nothing verified: the question's passages
        (False, [("Levity is a 2003 drama film.", [0])], False),  # a retrieved fact: P5
        (True, [], False),  # the paper: P5, whose fallback is the model's own knowledge
    ],
)
def test_forced_answer_reads_the_question_passages_when_the_pool_is_empty(
    levity: Store, llm_knowledge: bool, facts: list[tuple[str, list[int]]], from_passages: bool
) -> None:
    rules = [
        (LEAF, leaf_json(*facts)),
        (MAIN, UNANSWERABLE),
        (QUERY, "Who directed the film Levity?"),
        (FINAL_FROM_PASSAGES, main_json("No", 3)),
        (FINAL, FINAL_REPLY),
    ]
    out, chat = run(levity, rules, max_iterations=1, top_k=2, llm_knowledge=llm_knowledge)
    assert out["status"] == "forced" and out["answer"] == "No"
    passages = asked(chat, FINAL_FROM_PASSAGES)
    assert len(passages) == int(from_passages) and len(asked(chat, FINAL)) == 1 - from_passages
    if from_passages:
        # round 1's leaf display (ranked against the question), numbered from 1, whole
        first_leaf = asked(chat, LEAF)[0]
        shown = [line for line in passages[0].splitlines() if line.startswith("[")]
        assert len(shown) == 2
        for n, line in enumerate(shown, 1):
            title, text = line.removeprefix(f"[{n}] ").split(": ", 1)
            assert f"(Title: {title}) {text}" in first_leaf
        assert f"Question: {Q0}" in passages[0]


# -- 14-15. extraction, verification, the evidence pool --------------------------------------
def test_verification_and_deduplication_of_facts(levity: Store) -> None:
    leaf = leaf_json(
        ("A fact with no citation.", []),
        ("Levity was directed by Tran Anh Hung.", [0]),
        ("Ed Solomon is American.", [0, 1]),
        ("ed solomon is american", [1]),
        ("Levity is a 2003 drama film.", [0]),
        ("A fact citing a missing passage.", [9]),
    )
    answer = main_json("No", 4)

    def accept(premise: str, statement: str) -> bool:
        if "Tran Anh Hung" in statement:
            return False
        return "American" not in statement or "Edward James Solomon" in premise

    def score(_q: str, d: ScoreDoc) -> float:
        return {"lev": 3.0, "sol": 2.0}.get(
            next(x["id"] for x in LEVITY if d["text"] in x["text"] or x["text"] in d["text"]), 0.0
        )

    verifier = FakeVerifier(accept)
    out, chat = run(
        levity, [(LEAF, leaf), (MAIN, answer)], scorer=FakeScorer(score), delta=1.0,
        verify_with=verifier, sentence_filter=False, question="What nationality is Ed Solomon, the director of Levity?",
    )  # fmt: skip
    assert out["known_info"] == ["Ed Solomon is American.", "Levity is a 2003 drama film."]
    # the American fact fails on passage 0 and passes on passage 1; the duplicate is not checked
    assert [s for _, s in verifier.calls] == [
        "Levity was directed by Tran Anh Hung.",
        "Ed Solomon is American.",
        "Ed Solomon is American.",
        "Levity is a 2003 drama film.",
    ]
    assert verifier.calls[0][0] == "(Title: Levity (film)) " + LEVITY[0]["text"]
    assert {e["id"] for e in out["evidence"]} == {"lev", "sol"}
    judge = prompts_with(chat, MAIN)[0]
    assert "Information: Ed Solomon is American.; Levity is a 2003 drama film.\n" in judge


def test_llm_verifier_rejects_unsupported_facts(levity: Store) -> None:
    leaf = leaf_json(("Levity was directed by Ed Solomon.", [0]), ("Levity won an Oscar.", [0]))
    rules = [
        (
            VERIFY,
            lambda m: "Yes" if "Statement: Levity was directed" in str(m[-1].content) else "No",
        ),
        (LEAF, leaf),
        (
            MAIN,
            json.dumps({"answer": {"text": "No"}, "explanation": "", "missing_information": ""}),
        ),
    ]
    out, chat = run(levity, rules, verifier="llm")
    assert out["known_info"] == ["Levity was directed by Ed Solomon."]
    assert out["llm_calls_by_kind"]["verify"] == 2
    assert len(prompts_with(chat, VERIFY)) == 2


def test_known_info_rendering_and_no_passages_in_the_judge_prompt(levity: Store) -> None:
    rules = [
        (
            LEAF,
            counter_reply(
                lambda n: (
                    leaf_json()
                    if n == 1
                    else leaf_json(("Levity was directed by Ed Solomon.", [0]))
                )
            ),
        ),
        (MAIN, UNANSWERABLE),
        (QUERY, "Who directed the film Levity?"),
        (FINAL, FINAL_REPLY),
    ]
    _, chat = run(levity, rules, max_iterations=2)
    judges = prompts_with(chat, MAIN)
    assert "Information: None\nQuestion:" in judges[0]
    assert "Information: Levity was directed by Ed Solomon.\nQuestion:" in judges[1]
    for p in judges:
        assert not any(doc["text"] in p for doc in LEVITY)
        assert "Passage 0" not in p
    query_prompts = prompts_with(chat, QUERY)
    assert "Known Information: None\n" in query_prompts[0]
    assert "Known Information: Levity was directed by Ed Solomon.\n" in query_prompts[1]
    final = prompts_with(chat, FINAL)[0]
    assert "Information: Levity was directed by Ed Solomon.\nQuestion:" in final


# -- 16-21. parsers and the verdict ----------------------------------------------------------
CASE2 = (
    '{"useful_information": [{"info": "Der Stolz der Firma was directed by Carl Boese", '
    '"support_passages": [0]}], {"info": "Bed and Sofa was directed by Carmine Gallone", '
    '"support_passages": [1]}]}'
)


def test_malformed_leaf_reply_is_salvaged() -> None:
    items = salvage_leaf(CASE2)
    assert [i["support_passages"] for i in items] == [[0], [1]]
    assert items[0]["info"].endswith("Carl Boese") and items[1]["info"].endswith("Carmine Gallone")


def test_malformed_leaf_reply_is_salvaged_in_the_graph(levity: Store) -> None:
    answer = main_json("No", 4)
    out, _ = run(levity, [(LEAF, CASE2), (MAIN, answer)], scorer=FakeScorer(1.0), delta=0.5)
    assert len(out["known_info"]) == 2


def _structured_main(text: str) -> MainReply:
    llm = LLM(ScriptedChatModel(replies=[text, text]))
    return llm.structured("q", MainReply, default=MainReply()).value


def test_main_reply_with_a_stray_brace_and_single_quotes_parse() -> None:
    case1 = (
        '{"answer": {"text": "Cologne", "confidence": 5}, "explanation": "From the info.", '
        '"missing_information": ""}}'
    )
    parsed = _structured_main(case1)
    assert parsed.answer.text == "Cologne" and parsed.answer.confidence == 5
    quoted = "{'answer': {'text': 'Paris', 'confidence': 4}, 'explanation': 'x', 'missing_information': ''}"
    assert _structured_main(quoted).answer.text == "Paris"
    plain = _structured_main('{"answer": "Rome", "explanation": "e"}')
    assert plain.answer.text == "Rome" and plain.answer.confidence == 1
    assert plain.missing_information == "None"
    bad_conf = _structured_main('{"answer": {"text": "Rome", "confidence": "high"}}')
    assert bad_conf.answer.confidence == -1


def test_key_scan_salvages_a_broken_main_reply() -> None:
    broken = '{"answer": {"text": "unanswerable", "confidence": 2}, "explanation": "no date", "missing_information": "the birth date of X"'
    reply = salvage_main(broken + " trailing junk ]]")
    assert reply is not None
    verdict = judgement(reply)
    assert not verdict["answered"]
    assert verdict["missing_information"].startswith("the birth date of X")


def test_verdict_rules() -> None:
    def verdict(text: str, missing: str = "", explanation: str = "expl text here") -> Any:
        return judgement(
            MainReply.model_validate(
                {
                    "answer": {"text": text},
                    "explanation": explanation,
                    "missing_information": missing,
                }
            )
        )

    unanswerable = verdict("Unanswerable", "", "The director is not in the information.")
    assert not unanswerable["answered"]
    assert unanswerable["missing_information"] == "The director is not in the information."
    assert not verdict("UNANSWERABLE based on info")["answered"]
    assert not verdict("")["answered"]
    long_missing = verdict("unanswerable", "the nationality of Ed Solomon")
    assert long_missing["missing_information"] == "the nationality of Ed Solomon"
    answered = verdict("Ed Solomon.")
    assert answered["answered"] and answered["answer_text"] == "Ed Solomon"


def test_leaf_schema_coerces_citations() -> None:
    reply = LeafReply.model_validate(
        {
            "useful_information": [
                {"info": "x", "support_passages": ["0", "Passage 1"]},
                {"info": "y", "support_passages": 2},
            ]
        }
    )
    assert [f.support_passages for f in reply.useful_information] == [[0, 1], [2]]


def test_forced_answer_parse_failure_is_a_failed_status(levity: Store) -> None:
    rules = [
        (LEAF, leaf_json()),
        (MAIN, UNANSWERABLE),
        (QUERY, "Who directed the film Levity?"),
        (FINAL, "I cannot answer this."),
    ]
    out, _ = run(levity, rules, max_iterations=1)
    assert out["answer"] == "unanswerable"
    assert out["status"] == "failed" and out["stop_reason"] == "max_iterations"


def test_judge_parse_failure_keeps_looping_on_the_question(levity: Store) -> None:
    rules = [
        (LEAF, leaf_json(("Levity was directed by Ed Solomon.", [0]))),
        (MAIN, "I think maybe."),
        (QUERY, "Who directed the film Levity?"),
        (FINAL, FINAL_REPLY),
    ]
    out, chat = run(levity, rules, max_iterations=1)
    assert out["status"] == "forced"
    assert f"Missing Information: {Q0}\n" in prompts_with(chat, QUERY)[0]


# -- 25-27. configuration, accounting, determinism -------------------------------------------
def test_task_presets() -> None:
    ce = CrossEncoderScorer("/nonexistent/bge-reranker-base")  # loads lazily: never here
    for task, t, delta in [("multihop", 5, 3.0), ("odqa", 3, 5.0), ("strategyqa", 5, 0.0)]:
        ctx = Context(task_type=task)
        assert budget(ctx) == t and threshold(ctx, ce) == delta
        assert ctx.top_k == 5 and ctx.n_retrieve == 50 and ctx.max_queries == 3
        assert threshold(ctx, EmbeddingScorer(HashingEmbedder())) == DEFAULT_EMBEDDING_DELTA
    assert budget(Context(task_type="odqa", max_iterations=2)) == 2
    assert threshold(Context(delta="0.25"), ce) == 0.25
    assert threshold(Context(delta=1.5), ce) == 1.5


def test_strategyqa_uses_the_yes_no_prompts(levity: Store) -> None:
    answer = main_json("Yes", 4)
    out, chat = run(
        levity,
        [(LEAF, leaf_json(("Levity is a film.", [0]))), ("is yes or no", answer)],
        task_type="strategyqa",
    )
    assert out["answer"] == "Yes"
    assert len(asked(chat, "is yes or no")) == 1


def test_seed_facts_for_grandparent_questions(levity: Store) -> None:
    answer = main_json("Anna", 4)
    out, chat = run(
        levity, [(LEAF, leaf_json()), (MAIN, answer)], seed_facts=True,
        question="Who is the paternal grandmother of Ed Solomon?",
    )  # fmt: skip
    assert out["known_info"] == [SEED_FACTS["paternal grandmother"]]
    assert "mother of that person's father" in prompts_with(chat, MAIN)[0]


def test_accounting_fields_and_determinism(levity: Store) -> None:
    def once() -> dict[str, Any]:
        leaf = counter_reply(lambda n: leaf_json((f"Fact {n} about the film Levity.", [0])))
        queries = counter_reply(lambda n: f"Who directed the film Levity, part {n}?")
        rules = [(LEAF, leaf), (MAIN, UNANSWERABLE), (QUERY, queries), (FINAL, FINAL_REPLY)]
        return run(levity, rules, max_iterations=2, retry_prefix=False)[0]

    first, second = once(), once()
    assert first["trace"] == second["trace"]
    for key in (
        "answer",
        "known_info",
        "queries",
        "evidence",
        "passages_per_round",
        "knowledge_tokens",
    ):
        assert first[key] == second[key]
    assert first["judge_rounds"] == 2 and first["knowledge_tokens"] > 0
    assert sum(first["llm_calls_by_kind"].values()) == first["usage"]["llm_calls"]
    assert first["usage"]["retrieval_calls"] == len(first["queries"])
    assert any(e.get("node") == "rerank_filter" for e in first["trace"])


class RecordingRetriever:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.calls: list[tuple[str, int, str | None]] = []
        self.hits: list[Evidence] = []

    def search(
        self, query: str, k: int = 5, *, mode: Any = None, exclude: Any = ()
    ) -> list[Evidence]:
        self.calls.append((query, k, mode))
        hits = self.store.search(query, k, mode=mode, exclude=exclude)
        self.hits.extend(hits)
        return hits


def test_retrieval_asks_bm25_for_n_candidates_and_retries_short_lists(levity: Store) -> None:
    answer = main_json("x", 5)
    spy = RecordingRetriever(levity)
    chat = ChoiceChat(rules=[(LEAF, leaf_json(("Levity is a film.", [0]))), (MAIN, answer)])
    graph = build_graph(
        "migres", llm=with_logprobs(chat), retriever=spy, verifier="off", scorer=FakeScorer(1.0)
    )
    out = graph.invoke({"question": "Who directed Levity?"})
    assert spy.calls == [
        ("Who directed Levity?", 50, "bm25"),
        ("Find information about Who directed Levity?", 50, "bm25"),
    ]
    assert out["usage"]["retrieval_calls"] == 2
    log = next(e for e in out["trace"] if e.get("node") == "rerank_filter")
    assert len(spy.hits) > log["candidates"] == len({h["text"] for h in spy.hits})


# -- the default scorer ----------------------------------------------------------------------
def test_default_scorer_uses_the_store_embedder(levity: Store) -> None:
    answer = main_json("Ed Solomon", 5)
    chat = ChoiceChat(
        rules=[(LEAF, leaf_json(("Levity was directed by Ed Solomon.", [0]))), (MAIN, answer)]
    )
    graph = build_graph(
        "migres", llm=with_logprobs(chat), retriever=levity, verifier="off", delta=0.2
    )
    out = graph.invoke({"question": "Who directed the film Levity?"})
    assert out["answer"] == "Ed Solomon"
    log = next(e for e in out["trace"] if e.get("node") == "rerank_filter")
    assert log["scorer"] == "cosine:hashing-256" and log["delta"] == 0.2


def test_embedding_scorer_reuses_stored_vectors(levity: Store) -> None:
    docs = [ScoreDoc(id=d["id"], title=d["title"], text=d["text"]) for d in LEVITY]
    direct = EmbeddingScorer(HashingEmbedder()).score("Who directed Levity?", docs)
    stored = EmbeddingScorer(HashingEmbedder(), store=levity)
    assert stored.score("Who directed Levity?", docs) == pytest.approx(direct, abs=1e-5)
    assert max(direct) == direct[0]  # the Levity film passage is the closest


def test_embedding_scorer_embeds_a_query_once(levity: Store) -> None:
    embedded: list[str] = []

    class Counting(HashingEmbedder):
        def embed(self, texts: Sequence[str], **kw: Any) -> Any:
            embedded.extend(texts)
            return super().embed(texts, **kw)

    docs = [ScoreDoc(id=d["id"], title=d["title"], text=d["text"]) for d in LEVITY]
    plain = EmbeddingScorer(HashingEmbedder())
    scorer = EmbeddingScorer(Counting())
    first = scorer.score("Who directed Levity?", docs[:3])
    again = scorer.score("Who directed Levity?", docs[3:])  # as the sentence filter does
    assert first + again == plain.score("Who directed Levity?", docs)
    assert embedded.count("Who directed Levity?") == 1


def test_progress_events_are_streamed(levity: Store) -> None:
    chat = ChoiceChat(
        rules=[
            (LEAF, leaf_json(("Levity was directed by Ed Solomon.", [0]))),
            (MAIN, main_json("x")),
        ]
    )
    graph = build_graph(
        "migres", llm=with_logprobs(chat), retriever=levity, verifier="off", scorer=FakeScorer(1.0)
    )
    events = [e for e in graph.stream({"question": Q0}, stream_mode="custom")]
    assert {"round": 1, "added": 1, "known": 1} in events
    assert any(e.get("queries") == [Q0] for e in events)
    assert events[-1] == {"done": True, "stop_reason": "answered", "iterations": 1}


# -- the module-level node layout: threads, async, nodes alone, decisions, shown ids ----------
RAIN_Q = "Who directed I Come with the Rain?"
LEVITY_Q = "Who directed Levity?"


def by_question(messages: list[BaseMessage]) -> str:
    """Replies that depend on the question (and, for Levity, on the judge round)."""
    text = "\n".join(str(m.content) for m in messages)
    if VERIFY in text:
        return "Yes"
    rain = "Rain" in text.rsplit("Question:", 1)[-1]
    if LEAF in text:
        fact = (
            "Tran Anh Hung directed I Come with the Rain." if rain else "Ed Solomon wrote Levity."
        )
        return leaf_json((fact, [0]))
    if MAIN in text:
        if rain:
            return main_json("Tran Anh Hung")
        # Levity: not enough until the second fact (from the query's round) is known
        return main_json("Ed Solomon") if "Levity was made" in text else UNANSWERABLE
    if QUERY in text:
        return "Which year was Levity made?"
    return FINAL_REPLY


def levity_then_rain(messages: list[BaseMessage]) -> str:
    text = "\n".join(str(m.content) for m in messages)
    if LEAF in text and "Question: Which year was Levity made?" in text:
        return leaf_json(("Levity was made in 2003.", [0]))
    return by_question(messages)


def no_wall(out: dict[str, Any]) -> dict[str, Any]:
    return {**out, "usage": {k: v for k, v in out["usage"].items() if k != "wall_s"}}


def test_a_second_question_on_a_thread_starts_clean(levity: Store) -> None:
    def graph(checkpointer: Any = None) -> Any:
        return build_graph(
            "migres", llm=with_logprobs(ChoiceChat(default=levity_then_rain)), retriever=levity,
            scorer=FakeScorer(1.0), verifier="off", checkpointer=checkpointer,
        )  # fmt: skip

    threaded = graph(InMemorySaver())
    config = {"configurable": {"thread_id": "t1"}}
    first = threaded.invoke({"question": LEVITY_Q}, config)
    second = threaded.invoke({"question": RAIN_Q}, config)
    assert first["answer"] == "Ed Solomon" and second["answer"] == "Tran Anh Hung"
    assert first["iterations"] == 2 and len(first["queries"]) == 2
    assert second["queries"] == [RAIN_Q] and second["iterations"] == 1
    assert second["stop_reason"] == "answered" and second["judge_rounds"] == 1
    assert second["known_info"] == ["Tran Anh Hung directed I Come with the Rain."]
    assert {e["round"] for e in second["evidence"]} == {1}
    assert second["usage"]["llm_calls"] == 3  # leaf, main, sufficiency
    # everything equals the same question asked on a fresh graph
    alone = graph().invoke({"question": RAIN_Q})
    for key in ("queries", "evidence", "iterations", "stop_reason", "known_info", "trace"):
        assert second[key] == alone[key], key
    assert no_wall(second)["usage"] == no_wall(alone)["usage"]


def test_ainvoke_gives_the_same_output_as_invoke(levity: Store) -> None:
    def graph() -> Any:
        return build_graph(
            "migres", llm=with_logprobs(ChoiceChat(default=levity_then_rain)), retriever=levity,
            scorer=FakeScorer(1.0), verifier="llm",
        )  # fmt: skip

    sync = graph().invoke({"question": LEVITY_Q})
    asyn = asyncio.run(graph().ainvoke({"question": LEVITY_Q}))
    assert sync["iterations"] == 2 and sync["llm_calls_by_kind"]["verify"] == 2
    assert no_wall(sync) == no_wall(asyn)


def levity_snippet() -> Snippet:
    """The first Levity passage as a retrieved snippet, for nodes run alone."""
    return Snippet(
        id="lev",
        title="Levity (film)",
        text=LEVITY[0]["text"],
        origin_text=LEVITY[0]["text"],
        score=2.0,
        query=Q0,
        source="corpus",
    )


def test_a_node_runs_alone_on_a_hand_made_state() -> None:
    snippet = levity_snippet()
    state = State(question=Q0, pending_queries=[Q0], filtered_snippets=[snippet])
    chat = ScriptedChatModel(rules=[(LEAF, leaf_json(("Levity was directed by Ed Solomon.", [0])))])
    update = asyncio.run(extract(state, Runtime(context=Context()), Deps.of(llm=chat)))
    assert update["extracted_info"] == [
        {"info": "Levity was directed by Ed Solomon.", "support_passages": [0]}
    ]
    assert update["leaf_passages"] == [snippet]
    assert update["seen_counts"] == {LEVITY[0]["text"]: 1}
    assert f"Passage 0: (Title: Levity (film)) {LEVITY[0]['text']}" in chat.prompts()[0]


def test_loop_decisions_are_recorded(levity: Store) -> None:
    leaf = counter_reply(
        lambda n: leaf_json(("Levity was directed by Ed Solomon.", [0])) if n == 1 else leaf_json()
    )
    chat = ChoiceChat(
        rules=[(VERIFY, "Yes"), (SUFF, "No"), (LEAF, leaf), (MAIN, UNANSWERABLE),
               (QUERY, "Who made Levity?"), (FINAL, FINAL_REPLY)],
        logprobs={"Yes": -0.1, "No": -2.4},  # the verifier's; the sufficiency choice: p_yes
    )  # fmt: skip
    graph = build_graph(
        "migres", llm=with_logprobs(chat), retriever=levity,
        scorer=FakeScorer(1.0), verifier="llm", max_iterations=2,
    )  # fmt: skip
    out = graph.invoke({"question": Q0})
    yes, no = math.exp(-0.1), math.exp(-2.4)
    assert [(d["node"], d["round"], d["decision"], d["path"]) for d in out["decisions"]] == [
        ("verify_nli", 1, "accept", "logprobs"),
        ("sufficiency", 1, "continue", "logprobs"),
        ("sufficiency", 2, "continue", "rule"),  # the skipped judge
    ]
    verify, judged, skipped = out["decisions"]
    assert verify["p"] == pytest.approx(yes / (yes + no), rel=1e-5)  # P(Yes) = P(entailed)
    assert verify["threshold"] == 0.5
    assert judged["p"] == pytest.approx(0.1) and judged["threshold"] == 0.5
    assert skipped["p"] is None and skipped["threshold"] == 0.5
    assert "answer" not in judged and "answer" not in skipped  # the judge gave none


def test_a_rejected_fact_records_the_probability_of_yes() -> None:
    snippet = levity_snippet()
    item = {"info": "Levity won an Oscar.", "support_passages": [0]}
    state = State(question=Q0, leaf_passages=[snippet], extracted_info=[item], iterations=1)
    chat = ChoiceChat(rules=[(VERIFY, "No")], logprobs={"No": -0.2, "Yes": -1.8})
    ctx = Context(verifier="llm")
    with metered() as meter:
        update = asyncio.run(
            verify_nli(state, Runtime(context=ctx), MigresDeps.of(llm=with_logprobs(chat)))
        )
    assert update["verified_info"] == []
    (decision,) = meter.loop_decisions
    yes, no = math.exp(-1.8), math.exp(-0.2)
    assert decision["decision"] == "reject" and decision["path"] == "logprobs"
    assert decision["p"] == pytest.approx(yes / (yes + no), rel=1e-5)


def test_a_custom_verifier_decision_has_no_probability() -> None:
    snippet = levity_snippet()
    item = {"info": "Levity won an Oscar.", "support_passages": [0]}
    state = State(question=Q0, leaf_passages=[snippet], extracted_info=[item], iterations=3)
    deps = MigresDeps(fact_verifier=FakeVerifier(lambda _p, _s: False))
    with metered() as meter:
        update = asyncio.run(verify_nli(state, Runtime(context=Context()), deps))
    assert update["verified_info"] == []
    assert meter.loop_decisions == [
        {"node": "verify_nli", "round": 3, "decision": "reject", "p": None, "path": "model",
         "threshold": None}
    ]  # fmt: skip


def test_shown_ids_hold_the_passages_in_prompts_only(levity: Store) -> None:
    def only_levity(_q: str, d: ScoreDoc) -> float:
        return 1.0 if d["title"] == "Levity (film)" else 0.0

    rules = [(LEAF, leaf_json(("Levity was directed by Ed Solomon.", [0]))), (MAIN, main_json("x"))]
    out, chat = run(levity, rules, scorer=FakeScorer(only_levity), delta=0.5, sentence_filter=False)
    assert out["shown_ids"] == ["lev"]
    assert "(Title: Levity (film))" in prompts_with(chat, LEAF)[0]
    never_shown = set(out["retrieved_ids"]) - {"lev"}
    assert "lev" in out["retrieved_ids"] and never_shown  # retrieved, filtered out
    assert not never_shown & set(out["shown_ids"])


def test_a_fact_in_a_prompt_counts_for_its_passages() -> None:
    state = State(
        question=Q0, judge_rounds=0, known_info=["Ed Solomon is American.", "A seed fact."],
        known_sources=[["sol", "lev"], []],
    )  # fmt: skip
    chat = ChoiceChat(rules=[(SUFF, "Yes"), (MAIN, main_json("No"))])
    with metered() as meter:
        update = asyncio.run(
            judge_missing(state, Runtime(context=Context()), Deps.of(llm=with_logprobs(chat)))
        )
    assert update["answer"] == "No"
    assert "Information: Ed Solomon is American.; A seed fact.\n" in chat.prompts()[0]
    assert meter.shown == ["sol", "lev"]


# -- the sufficiency decision ------------------------------------------------------------------
ONE_FACT = [(LEAF, leaf_json(("Levity was directed by Ed Solomon.", [0])))]
ROUNDS_RULES = [
    (LEAF, counter_reply(lambda n: leaf_json((f"Fact number {n} about Levity.", [0])))),
    (QUERY, counter_reply(lambda n: f"Which film fact number {n} is missing?")),
    (FINAL, FINAL_REPLY),
]


def sufficiency(out: dict[str, Any]) -> list[dict[str, Any]]:
    return [d for d in out["decisions"] if d["node"] == "sufficiency"]


def test_the_judge_writes_what_is_missing_before_the_answer() -> None:
    assert list(MainReply.model_json_schema()["properties"]) == [
        "missing_information", "explanation", "answer",
    ]  # fmt: skip
    from gaprag.graphs.migres.prompting import PROMPTS

    form = PROMPTS["main"].user
    assert (
        form.index('"missing_information"') < form.index('"explanation"') < form.index('"answer"')
    )
    yesno = PROMPTS["main_yesno"].user
    assert yesno.index('"missing_information"') < yesno.index('"answer"')


@pytest.mark.parametrize(("p", "threshold", "stops"), [(0.7, 0.5, True), (0.7, 0.8, False)])
def test_sufficiency_probability_against_the_threshold(
    levity: Store, p: float, threshold: float, stops: bool
) -> None:
    rules = [*ROUNDS_RULES[:1], (MAIN, main_json("Ed Solomon")), *ROUNDS_RULES[1:]]
    out, chat = run(levity, rules, p_yes=p, sufficiency_threshold=threshold, max_iterations=2)
    first = sufficiency(out)[0]
    assert first["p"] == pytest.approx(p) and first["threshold"] == threshold
    assert first["path"] == "logprobs" and first["answer"] == "Ed Solomon"
    # the choice is a follow-up turn after the judge's own reply
    choice = next(c for c in chat.calls if SUFF in c["messages"][-1][1])
    assert [role for role, _ in choice["messages"]][-3:] == ["human", "ai", "human"]
    assert choice["messages"][-2][1] == main_json("Ed Solomon")
    if stops:
        assert first["decision"] == "stop"
        assert out["stop_reason"] == "answered" and out["answer"] == "Ed Solomon"
        assert out["judge_rounds"] == 1 and out["llm_calls_by_kind"]["sufficiency"] == 1
    else:
        assert first["decision"] == "continue"
        assert out["stop_reason"] == "max_iterations" and out["judge_rounds"] == 2
        assert [d["decision"] for d in sufficiency(out)] == ["continue", "continue"]
        assert out["status"] == "forced" and out["answer"] == "No"  # the final call's
        # an answer that did not stop the loop still drives the next queries
        assert f"Missing Information: {Q0}\n" in prompts_with(chat, QUERY)[0]


def test_no_logprobs_means_keep_retrieving(levity: Store) -> None:
    rules = [*ROUNDS_RULES[:1], (MAIN, main_json("Ed Solomon")), *ROUNDS_RULES[1:]]
    out, _ = run(levity, rules, p_yes=None, max_iterations=2)  # the choice parses "Yes"
    assert [(d["decision"], d["p"], d["path"]) for d in sufficiency(out)] == [
        ("continue", None, "parsed-no-logprobs"), ("continue", None, "parsed-no-logprobs"),
    ]  # fmt: skip
    assert [d["answer"] for d in sufficiency(out)] == ["Ed Solomon", "Ed Solomon"]
    assert out["stop_reason"] == "max_iterations" and out["judge_rounds"] == 2


def test_an_endpoint_without_logprobs_keeps_retrieving(levity: Store) -> None:
    chat = ChoiceChat(rules=[(SUFF, "Yes"), *ONE_FACT, (MAIN, main_json("Ed Solomon"))])
    graph = build_graph(
        "migres", llm=chat, retriever=levity, scorer=FakeScorer(1.0), verifier="off",
        max_iterations=1,
    )  # fmt: skip
    out = graph.invoke({"question": Q0})
    assert sufficiency(out)[0]["p"] is None and out["stop_reason"] == "max_iterations"
    # no_logprobs="trust_answer": the judge's own "Yes" stops the loop
    trusted = graph.invoke({"question": Q0}, context={"no_logprobs": "trust_answer"})
    (decision,) = sufficiency(trusted)
    assert (decision["decision"], decision["p"]) == ("stop", None)
    assert decision["path"].endswith("-no-logprobs") and trusted["stop_reason"] == "answered"


def test_malformed_judge_reply_continues_without_a_choice(levity: Store) -> None:
    rules = [*ONE_FACT, (MAIN, "I think maybe."), (QUERY, "Who directed the film Levity?"),
             (FINAL, FINAL_REPLY)]  # fmt: skip
    out, chat = run(levity, rules, p_yes=0.99, max_iterations=1)
    (decision,) = sufficiency(out)
    assert (decision["decision"], decision["p"], decision["path"]) == ("continue", None, "default")
    assert "sufficiency" not in out["llm_calls_by_kind"] and not asked(chat, SUFF)
    assert out["stop_reason"] == "max_iterations"


def test_a_salvaged_judge_reply_still_gets_the_choice(levity: Store) -> None:
    broken = '{"missing_information": "", "explanation": "known", "answer": {"text": "Ed Solomon"'
    out, _ = run(levity, [*ONE_FACT, (MAIN, broken)], p_yes=0.9)
    assert out["answer"] == "Ed Solomon" and sufficiency(out)[0]["p"] == pytest.approx(0.9)


def test_an_empty_pool_never_stops_the_loop(levity: Store) -> None:
    rules = [(LEAF, leaf_json()), (MAIN, main_json("Paris")), (QUERY, "Where is Levity set?"),
             (FINAL, FINAL_REPLY)]  # fmt: skip
    out, chat = run(levity, rules, p_yes=0.99, max_iterations=2, skip_judge_if_no_new_info=False)
    assert [(d["decision"], d["p"], d["path"]) for d in sufficiency(out)] == [
        ("continue", None, "rule"), ("continue", None, "rule"),
    ]  # fmt: skip
    assert not asked(chat, SUFF) and out["known_info"] == []
    assert out["stop_reason"] == "max_iterations" and out["status"] == "forced"


def test_seed_facts_alone_are_an_empty_pool(levity: Store) -> None:
    rules = [(LEAF, leaf_json()), (MAIN, main_json("Anna")), (FINAL, FINAL_REPLY)]
    out, chat = run(
        levity, rules, p_yes=0.99, max_iterations=1, seed_facts=True,
        question="Who is the paternal grandmother of Ed Solomon?",
    )  # fmt: skip
    assert out["known_info"] == [SEED_FACTS["paternal grandmother"]]
    assert sufficiency(out)[0]["path"] == "rule" and not asked(chat, SUFF)
    assert out["stop_reason"] == "max_iterations"


def test_unanswerable_judge_with_a_sufficient_choice_answers_from_the_pool(levity: Store) -> None:
    out, _ = run(levity, [*ONE_FACT, (MAIN, UNANSWERABLE), (FINAL, FINAL_REPLY)], p_yes=0.8)
    (decision,) = sufficiency(out)
    assert decision["decision"] == "stop" and decision["answer"] == "No"
    assert out["answer"] == "No" and out["stop_reason"] == "answered"
    assert out["llm_calls_by_kind"]["candidate"] == 1 and "final" not in out["llm_calls_by_kind"]


def test_calibration_runs_never_stop_early_and_record_answers(levity: Store) -> None:
    judge = counter_reply(lambda n: main_json("Ed Solomon") if n == 1 else UNANSWERABLE)
    rules = [*ROUNDS_RULES[:1], (MAIN, judge), *ROUNDS_RULES[1:]]
    out, _ = run(levity, rules, p_yes=0.95, max_iterations=3, calibration=True)
    decisions = sufficiency(out)
    assert [d["decision"] for d in decisions] == ["continue"] * 3
    assert [d["p"] for d in decisions] == [pytest.approx(0.95)] * 3
    # the judge's answer, then the final prompt's answer where the judge had none
    assert [d["answer"] for d in decisions] == ["Ed Solomon", "No", "No"]
    assert out["llm_calls_by_kind"]["candidate"] == 2
    assert out["stop_reason"] == "max_iterations" and out["judge_rounds"] == 3


def test_calibration_records_an_answer_at_rule_decisions_too(levity: Store) -> None:
    leaf = counter_reply(lambda n: leaf_json(("Levity is a film.", [0])) if n == 1 else leaf_json())
    rules = [(LEAF, leaf), (MAIN, main_json("Ed Solomon")), (QUERY, "Who directed Levity?"),
             (FINAL, FINAL_REPLY)]  # fmt: skip
    out, _ = run(levity, rules, p_yes=0.95, max_iterations=2, calibration=True)
    assert [(d["path"], d["answer"]) for d in sufficiency(out)] == [
        ("logprobs", "Ed Solomon"), ("rule", "Ed Solomon"),  # skipped: the pool is unchanged
    ]  # fmt: skip


@pytest.mark.parametrize("fallback", [True, False])
def test_llm_knowledge_switch_decides_whether_model_facts_enter_the_pool(
    levity: Store, fallback: bool
) -> None:
    rules = [(KNOW, KNOWLEDGE), (LEAF, leaf_json((KNOWLEDGE, [0]))), (MAIN, UNANSWERABLE),
             (QUERY, "Who directed the 2003 film Levity?"), (FINAL, FINAL_REPLY)]  # fmt: skip
    out, chat = run(
        levity, rules, scorer=FakeScorer(0.1), delta=0.5, max_iterations=2,
        llm_knowledge=fallback,
    )  # fmt: skip
    if fallback:
        assert KNOWLEDGE in out["known_info"]
        assert {e["source"] for e in out["evidence"]} == {"llm"}
    else:
        assert out["known_info"] == [] and out["evidence"] == []
        assert not prompts_with(chat, KNOW) and not prompts_with(chat, LEAF)
        assert "knowledge" not in out["llm_calls_by_kind"]


# -- MIGRES* few-shot demonstrations ---------------------------------------------------------
def test_few_shot_demos_are_user_assistant_turns(levity: Store) -> None:
    from gaprag.graphs.migres.prompting import DEMOS, PROMPTS

    assert set(DEMOS) == {"leaf", "main", "main_yesno", "query", "knowledge", "final",
                          "final_yesno"}  # fmt: skip
    assert all(len(d) == 2 for d in DEMOS.values())
    for name, demos in DEMOS.items():
        head = PROMPTS[name].user.split("{")[0]
        for user, reply in demos:  # each demo is the live prompt filled with its own inputs
            assert user.startswith(head)
            assert not any(f"{{{v}}}" in user for v in PROMPTS[name].variables)
            if name not in ("query", "knowledge"):
                json.loads(reply)
    rules = [*ONE_FACT, (MAIN, main_json("Ed Solomon"))]
    _, plain = run(levity, rules)
    _, shots = run(levity, rules, few_shot=True)
    assert all(len(c["messages"]) == 2 for c in plain.calls if SUFF not in c["messages"][-1][1])
    leaf_call = next(c for c in shots.calls if LEAF in c["messages"][-1][1])
    assert [r for r, _ in leaf_call["messages"]] == [
        "system",
        "human",
        "ai",
        "human",
        "ai",
        "human",
    ]
    assert leaf_call["messages"][2][1] == DEMOS["leaf"][0][1]
    assert "Passage 0: (Title: The Salt Road (film))" in leaf_call["messages"][1][1]
    assert leaf_call["messages"][-1][1].endswith(f"Question: {Q0}\nYour response:")
    main_call = next(c for c in shots.calls if c["messages"][-1][1].endswith("Your response:")
                     and MAIN in c["messages"][-1][1])  # fmt: skip
    assert main_call["messages"][2][1] == DEMOS["main"][0][1]


def test_few_shot_demos_do_not_name_evaluation_entities() -> None:
    """The demos are invented: none of their names occurs in a bundled evaluation file."""
    from gaprag.graphs.migres.prompting import DEMOS

    names = ["Salt Road", "Ilse Varga", "Northern Lanterns", "Aki Toivonen", "Kestrel Records",
             "Tomas Brandt"]  # fmt: skip
    text = "\n".join(u + r for demos in DEMOS.values() for u, r in demos)
    assert all(n in text for n in names)
    data = Path(__file__).resolve().parents[2] / "gaprag" / "data" / "eval"
    for path in data.glob("*.jsonl"):
        content = path.read_text(encoding="utf-8")
        assert not [n for n in names if n in content], path.name


# -- the filter calibration script refuses the evaluation questions ---------------------------
def test_filter_calibration_refuses_the_reported_questions(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tests.scripts import load_script

    script = load_script("benchmarks/calibrate_migres_filter.py")
    for start in ("0", "49", "59"):  # refused before any model is loaded
        assert script.main(["--start", start, "--embedder", "hashing", "--limit", "1"]) == 2
        assert "questions 0-59 are reserved" in capsys.readouterr().err


# -- answer selection: the call whose JSON answer becomes the final answer is scored ----------
PLAIN = "Use the passages below to answer the question."  # plain RAG's prompt (the gate's)
GATE_P = math.exp(-2.0)  # the gate's unsure "Paris"
LEVITY_FACT = leaf_json(("Levity was directed by Ed Solomon.", [0]))


def scored_reply(*pieces: tuple[str, float]) -> tuple[str, list[list[tuple[str, float]]]]:
    """A reply made of ``pieces``, each one token with its logprob: (text, scripted tokens)."""
    return "".join(text for text, _ in pieces), [[piece] for piece in pieces]


def judge_reply(logprob: float) -> tuple[str, list[list[tuple[str, float]]]]:
    """The main module's JSON in its schema's order: the explanation names the answer (a
    token at -5) before the answer's ``text`` value does (at ``logprob``)."""
    return scored_reply(
        ('{"missing_information": "none", "explanation": "', -0.01),
        ("Ed Solomon", -5.0),
        (' directed Levity.", "answer": {"text": "', -0.01),
        ("Ed Solomon", logprob),
        ('", "confidence": 5}}', -0.01),
    )


#: the final answer scored and chosen on probabilities
CHOOSE = {"answer_scoring": "logprob", "answer_choice": "logprob"}


def selected(
    levity: Store, rules: list[tuple[str, Any]], scored: dict[str, Any], **ctx: Any
) -> tuple[dict[str, Any], ScriptedChatModel]:
    """One question whose gate is unsure of "Paris" (p = e^-2), so the loop runs."""
    logprobs = {"Paris": [[("Paris", -2.0)]], **scored}
    return run(
        levity, [(PLAIN, "Paris"), *rules], reply_logprobs=logprobs,
        gate="logprob_mean", gate_threshold=-0.5, **ctx,
    )  # fmt: skip


def selection(out: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``select`` decision and its trace record."""
    (decision,) = [d for d in out["decisions"] if d["node"] == "select"]
    record = next(t for t in out["trace"] if t.get("call") == "select")
    return decision, record


@pytest.mark.parametrize(
    ("logprob", "chosen", "answer"), [(-0.1, "loop", "Ed Solomon"), (-4.0, "gate", "Paris")]
)
def test_the_judges_answer_is_scored_on_its_json_value(
    levity: Store, logprob: float, chosen: str, answer: str
) -> None:
    reply, tokens = judge_reply(logprob)
    rules = [(LEAF, LEVITY_FACT), (MAIN, reply)]
    out, _ = selected(levity, rules, {reply: tokens}, **CHOOSE)
    assert out["stop_reason"] == "answered" and out["answer"] == answer
    decision, record = selection(out)
    assert decision["decision"] == chosen and decision["path"] == "logprobs"
    assert record["loop_p"] == pytest.approx(math.exp(logprob), rel=1e-4)
    assert record["gate_p"] == pytest.approx(GATE_P, rel=1e-4)


def test_the_forced_final_answer_is_scored(levity: Store) -> None:
    reply, tokens = scored_reply(
        ('{"answer": {"text": "', -0.01),
        ("Ed Solomon", -0.3),
        ('", "confidence": 3}, "explanation": "Ed Solomon directed it."}', -0.01),
    )
    rules = [(LEAF, LEVITY_FACT), (MAIN, UNANSWERABLE), (QUERY, "Who directed Levity?"),
             (FINAL, reply)]  # fmt: skip
    out, _ = selected(levity, rules, {reply: tokens}, **CHOOSE, max_iterations=1)
    assert out["stop_reason"] == "max_iterations" and out["answer"] == "Ed Solomon"
    decision, record = selection(out)
    assert decision["decision"] == "loop" and decision["path"] == "logprobs"
    assert decision["p"] == pytest.approx(math.exp(-0.3), rel=1e-4)
    assert record["loop_p"] == pytest.approx(math.exp(-0.3), rel=1e-4)


def test_without_selection_the_answer_calls_ask_for_no_logprobs(levity: Store) -> None:
    judged, tokens = judge_reply(-0.1)
    rules = [(LEAF, LEVITY_FACT), (MAIN, UNANSWERABLE), (QUERY, "Who directed Levity?"),
             (FINAL, judged)]  # fmt: skip
    off, off_chat = selected(levity, rules, {judged: tokens}, max_iterations=1)
    on, on_chat = selected(levity, rules, {judged: tokens}, max_iterations=1, **CHOOSE)
    assert off["answer"] == on["answer"] == "Ed Solomon"
    assert not [d for d in off["decisions"] if d["node"] == "select"]
    # selection asks for logprobs on the same messages, and only that
    assert [c["messages"] for c in off_chat.calls] == [c["messages"] for c in on_chat.calls]
    for chat, scored in ((off_chat, False), (on_chat, True)):
        answering = [c for c in chat.calls if MAIN in c["messages"][-1][1] or FINAL in
                     c["messages"][-1][1]]  # fmt: skip
        assert len(answering) == 2
        assert all(bool(c["kwargs"].get("logprobs")) is scored for c in answering)
