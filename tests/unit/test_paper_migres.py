"""MIGRES in its paper configuration (arXiv 2404.14043), judged at the model boundary: what each
call sends (which passages and sentences, which facts, which instructions, in which order), how
many calls a question takes, what it returns and why it stopped.

Paper steps (a round): BM25 candidates for each query; the knowledge filter keeps the passages,
and inside them the sentences, scoring at least delta, and the leaf module extracts useful
information from the best k = 5 with the passages it cites; when nothing clears delta the LLM
writes background from its own knowledge instead; each fact is checked against a cited passage
(the paper's NLI model; here an LLM yes/no); the main module sees only the known information and
answers, or says "unanswerable" and what is missing (its JSON: answer, explanation, missing
information); an answer ends the loop; "unanswerable" makes at most three new queries for the
missing information, none repeating an earlier one; after T = 5 judge rounds a final call forces
an answer."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from gaprag import build_graph
from gaprag.graphs.migres.filter import ScoreDoc
from gaprag.llm.client import LLM
from gaprag.stores import Store
from tests.methods.migres import (
    FINAL,
    FINAL_REPLY,
    KNOW,
    LEAF,
    MAIN,
    QUERY,
    SUFF,
    UNANSWERABLE,
    VERIFY,
    ChoiceChat,
    FakeScorer,
    counter_reply,
    hashing_store,
    leaf_json,
    main_json,
)

LONG = " ".join(f"word{i}" for i in range(300))
QUESTION = "Which drama film is the oldest film?"
LONG_ANSWER = "The oldest of the drama films here is Film 3, which was made in 1950"


def run(
    store: Store, rules: list[tuple[str, Any]], scorer: Any = None, **ctx: Any
) -> tuple[dict[str, Any], ChoiceChat, FakeScorer]:
    chat = ChoiceChat(rules=[*rules, (VERIFY, "Yes")])
    scorer = scorer if scorer is not None else FakeScorer(1.0)
    graph = build_graph(
        "migres", llm=LLM(chat, supports_logprobs=True), retriever=store, profile="paper",
        scorer=scorer, **ctx,
    )  # fmt: skip
    return dict(graph.invoke({"question": QUESTION})), chat, scorer


def films(tmp_path: Path) -> Store:
    docs = [
        {"id": f"p{i}", "title": f"Film {i}", "text": f"Film number {i} is a drama. {LONG}"}
        for i in range(40)
    ]
    return hashing_store(tmp_path / "films", docs)


def users(chat: ChoiceChat, needle: str) -> list[str]:
    """The user turns of the calls whose last message contains ``needle``."""
    return [c["messages"][-1][1] for c in chat.calls if needle in c["messages"][-1][1]]


def calls_of(chat: ChoiceChat, needle: str) -> list[dict[str, Any]]:
    return [c for c in chat.calls if needle in c["messages"][-1][1]]


def test_step_1_the_leaf_extracts_from_the_best_k_of_5_whole_passages(tmp_path: Path) -> None:
    out, chat, scorer = run(
        films(tmp_path),
        [(LEAF, leaf_json(("Film 3 is a drama.", [0]))), (MAIN, main_json("Film 3"))],
    )
    # every BM25 candidate (at most 50 a query; all 40 films match) is scored against the question
    passages = {t for q, t in scorer.seen if t.startswith("Film number") and "word299" in t}
    assert len(passages) == 40 and {q for q, _ in scorer.seen} == {QUESTION}
    (leaf,) = users(chat, LEAF)
    assert [f"Passage {i}: (Title: Film" in leaf for i in range(6)] == [True] * 5 + [False]
    assert leaf.count("word299") == 5  # whole passages: no cut
    assert leaf.rstrip().endswith(f"Question: {QUESTION}\nYour response:")
    assert out["passages_per_round"] == [5] and out["llm_calls_by_kind"]["leaf"] == 1


def test_step_1_the_knowledge_filter_keeps_the_sentences_that_clear_delta(tmp_path: Path) -> None:
    docs = [
        {
            "id": "lev",
            "title": "Levity (film)",
            "text": "Levity is a 2003 drama film shot in Montreal. "
            "It was written and directed by Ed Solomon. Its score was composed by Mark Oliver.",
        },
        {"id": "far", "title": "Borscht", "text": "Borscht is a sour soup of Eastern Europe."},
    ]

    def score(query: str, doc: ScoreDoc) -> float:  # delta is the scorer's default, 0.5
        if "Borscht" in doc["text"]:
            return 0.1
        if doc["text"] == docs[0]["text"]:
            return 0.6  # the passage clears delta ...
        return 0.9 if "Solomon" in doc["text"] else 0.2  # ... and one sentence beats it

    _, chat, _ = run(
        hashing_store(tmp_path / "lev", docs),
        [(LEAF, leaf_json(("Ed Solomon directed Levity.", [0]))), (MAIN, main_json("Ed Solomon"))],
        scorer=FakeScorer(score),
    )
    (leaf,) = users(chat, LEAF)
    assert "Passage 0: (Title: Levity (film)) It was written and directed by Ed Solomon." in leaf
    assert "Montreal" not in leaf and "Mark Oliver" not in leaf and "Borscht" not in leaf


def test_step_2_when_nothing_clears_delta_the_llm_writes_what_it_knows(tmp_path: Path) -> None:
    known = "Film 9 is a 1950 drama film, the oldest drama film."
    out, chat, _ = run(
        films(tmp_path),
        [
            (KNOW, known),
            (LEAF, leaf_json((known, [0]))),
            (MAIN, main_json("Film 9")),
        ],
        scorer=FakeScorer(0.0),
    )
    (asked,) = users(chat, KNOW)
    assert asked.rstrip().endswith(f"Question: {QUESTION}\nInformation:")
    (leaf,) = users(chat, LEAF)
    assert f"Passage 0: (Title: LLM knowledge) {known}" in leaf and "Film number" not in leaf
    assert out["known_info"] == [known] and out["answer"] == "Film 9"


def test_step_3_each_fact_is_kept_only_if_its_cited_passage_entails_it(tmp_path: Path) -> None:
    good, bad = "Film 0 is a drama.", "Film 1 won an Oscar."
    out, chat, _ = run(
        films(tmp_path),
        [
            (VERIFY, lambda m: "No" if bad in str(m[-1].content) else "Yes"),
            (LEAF, leaf_json((good, [0]), (bad, [1]))),
            (MAIN, main_json("Film 0")),
        ],
    )
    (leaf,) = users(chat, LEAF)
    cited = re.findall(r"Passage [01]: \(Title: (Film \d+)\)", leaf)
    checks = users(chat, VERIFY)
    assert len(checks) == 2
    for title, fact, check in zip(cited, (good, bad), checks, strict=True):
        n = title.split()[-1]
        assert f"Passage: (Title: {title}) Film number {n} is a drama." in check
        assert f"Statement: {fact}" in check
    assert out["known_info"] == [good]
    (main,) = users(chat, MAIN)
    assert f"Information: {good}\n" in main and bad not in main


def test_step_4_the_main_module_answers_from_the_known_information_alone(tmp_path: Path) -> None:
    facts = ("Film 3 is a drama.", [0]), ("Film 4 is a drama.", [1])
    out, chat, _ = run(films(tmp_path), [(LEAF, leaf_json(*facts)), (MAIN, main_json("Film 3"))])
    assert out["known_info"] == ["Film 3 is a drama.", "Film 4 is a drama."]
    (call,) = calls_of(chat, MAIN)
    main = call["messages"][-1][1]
    assert "Information: Film 3 is a drama.; Film 4 is a drama.\n" in main
    assert "Film number" not in main and "word1" not in main  # no passage reaches it
    assert 'the answer text must be "unanswerable"' in main
    # the paper's JSON: the answer first, then its explanation, then what is missing
    assert main.index('{"answer"') < main.index('"explanation"') < main.index('"missing_info')
    assert main.rstrip().endswith(f"Question: {QUESTION}\nYour response:")
    assert not call["kwargs"].get("logprobs")


def test_step_4_an_answer_ends_the_loop_with_no_extra_call(tmp_path: Path) -> None:
    out, chat, _ = run(
        films(tmp_path),
        [(LEAF, leaf_json(("Film 3 is a drama.", [0]))), (MAIN, main_json(LONG_ANSWER + "."))],
    )
    assert len(chat.calls) == 3  # leaf, one verification, main: no Yes/No, no short answer
    assert not users(chat, SUFF)
    # the main module's answer as written (its final full stop dropped): no short-answer step
    assert out["answer"] == LONG_ANSWER and out["stop_reason"] == "answered"
    assert out["judge_rounds"] == 1 and out["iterations"] == 1
    decision = out["decisions"][-1]
    assert decision["decision"] == "stop" and decision["path"] == "verdict"


def test_step_5_unanswerable_asks_up_to_three_new_queries_for_what_is_missing(
    tmp_path: Path,
) -> None:
    lines = "\n".join(
        [QUESTION, "Which film is number 7?", "1. When was Film 8 made?", "Who made Film 9?",
         "What year is Film 10 from?"]
    )  # fmt: skip
    out, chat, scorer = run(
        films(tmp_path),
        [
            (LEAF, counter_reply(lambda n: leaf_json((f"Fact {n} about a drama film.", [0])))),
            (MAIN, counter_reply(lambda n: UNANSWERABLE if n == 1 else main_json("Film 7"))),
            (QUERY, lines),
        ],
    )
    (query,) = users(chat, QUERY)
    assert "Missing Information: the director of Levity" in query
    assert f"Historical Questions: {QUESTION}\n" in query
    assert "Known Information: Fact 1 about a drama film.\n" in query
    new = ["Which film is number 7?", "When was Film 8 made?", "Who made Film 9?"]
    assert out["queries"] == [QUESTION, *new]  # the question repeated is dropped, three kept
    assert {q for q, _ in scorer.seen} == {QUESTION, *new}  # every new query is filtered on
    assert out["answer"] == "Film 7" and out["judge_rounds"] == 2 and out["iterations"] == 2


def test_step_6_after_five_judge_rounds_a_final_call_forces_the_answer(tmp_path: Path) -> None:
    out, chat, _ = run(
        films(tmp_path),
        [
            (LEAF, counter_reply(lambda n: leaf_json((f"Fact {n} about a drama film.", [0])))),
            (MAIN, UNANSWERABLE),
            (QUERY, counter_reply(lambda n: f"Which film was made in round {n}?")),
            (FINAL, FINAL_REPLY),
        ],
    )
    assert len(users(chat, MAIN)) == 5 and len(users(chat, QUERY)) == 5
    (final,) = users(chat, FINAL)
    assert (
        "Information: " + "; ".join(f"Fact {n} about a drama film." for n in range(1, 7)) in final
    )
    assert out["judge_rounds"] == 5 and out["iterations"] == 6  # T = 5, T + 1 retrievals
    assert out["status"] == "forced" and out["stop_reason"] == "max_iterations"
    assert out["answer"] == "No"  # the final call's answer, not rewritten by a short-answer step
    assert json.loads(FINAL_REPLY)["answer"]["text"] == "No"


def test_released_code_a_round_that_adds_no_fact_is_not_judged(tmp_path: Path) -> None:
    leaf = counter_reply(lambda n: leaf_json((f"Fact {1 if n < 3 else n} about a drama.", [0])))
    out, chat, _ = run(
        films(tmp_path),
        [
            (LEAF, leaf),  # round 2 finds only the fact round 1 found
            (MAIN, counter_reply(lambda n: UNANSWERABLE if n == 1 else main_json("Film 7"))),
            (QUERY, counter_reply(lambda n: f"Which film was made in round {n}?")),
        ],
    )
    assert len(users(chat, LEAF)) == 3 and len(users(chat, MAIN)) == 2  # round 2: no main call
    assert len(users(chat, QUERY)) == 2
    assert out["judge_rounds"] == 3 and out["answer"] == "Film 7"
    assert [d["path"] for d in out["decisions"] if d["node"] == "sufficiency"] == [
        "verdict", "rule", "verdict",
    ]  # fmt: skip
