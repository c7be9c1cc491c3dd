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

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from gaprag import build_graph
from gaprag.graphs.migres.filter import ScoreDoc
from gaprag.graphs.migres.parsing import REFUSALS
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


def new_fact_each_call() -> tuple[str, Any]:
    """The leaf's rule: each call extracts a new drama fact citing the first passage."""
    return (LEAF, counter_reply(lambda n: leaf_json((f"Fact {n} about a drama film.", [0]))))


def new_query_each_call() -> tuple[str, Any]:
    """The query rule: each call asks a new query, "Which film was made in round N?"."""
    return (QUERY, counter_reply(lambda n: f"Which film was made in round {n}?"))


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


_STORES: dict[str, Store] = {}


def stored(tmp_path: Path, name: str, docs: list[dict[str, str]]) -> Store:
    """The store of ``docs``, built once a session (under the first test's ``tmp_path``, which
    lasts the session): the tests only read it."""
    key = json.dumps(docs, sort_keys=True)
    if key not in _STORES:
        _STORES[key] = hashing_store(tmp_path / name, docs)
    return _STORES[key]


def films(tmp_path: Path) -> Store:
    docs = [
        {"id": f"p{i}", "title": f"Film {i}", "text": f"Film number {i} is a drama. {LONG}"}
        for i in range(40)
    ]
    return stored(tmp_path, "films", docs)


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
        stored(tmp_path, "lev", docs),
        [(LEAF, leaf_json(("Ed Solomon directed Levity.", [0]))), (MAIN, main_json("Ed Solomon"))],
        scorer=FakeScorer(score),
    )
    (leaf,) = users(chat, LEAF)
    assert "Passage 0: (Title: Levity (film)) It was written and directed by Ed Solomon." in leaf
    assert "Montreal" not in leaf and "Mark Oliver" not in leaf and "Borscht" not in leaf


def test_step_1_the_sentence_filter_keeps_new_sentences_at_delta_and_drops_the_query(
    tmp_path: Path,
) -> None:
    zeta = "Drama film is the oldest film? Zeta is a drama film from 1920. It was shot in Rome. "
    zeta += "Its score is lost."
    eta = "Eta is a drama film from 1920. Eta was shot in Paris in the spring."
    scores = {
        zeta: 0.8,
        "Drama film is the oldest film?": 0.9,  # the question's own words: never scored
        "Zeta is a drama film from 1920.": 0.8,  # as good as its passage: sentences are cut
        "It was shot in Rome.": 0.5,  # delta itself: kept
        "Its score is lost.": 0.4,  # under delta (the scorer's own, 0.5)
        eta: 0.7,
        "Eta is a drama film from 1920.": 0.9,  # inside a sentence chosen before: a repeat
        "Eta was shot in Paris in the spring.": 0.6,
    }
    docs = [{"id": "zeta", "title": "Zeta (film)", "text": zeta},
            {"id": "eta", "title": "Eta (film)", "text": eta}]  # fmt: skip
    _, chat, scorer = run(
        stored(tmp_path, "zeta", docs),
        [(LEAF, leaf_json(("Zeta is a 1920 drama film.", [0]))), (MAIN, main_json("Zeta"))],
        scorer=FakeScorer(lambda _q, d: scores.get(d["text"], 0.0)),
    )
    (leaf,) = users(chat, LEAF)
    assert (
        "Passage 0: (Title: Zeta (film)) Zeta is a drama film from 1920. It was shot in Rome.\n"
        "Passage 1: (Title: Eta (film)) Eta was shot in Paris in the spring.\n"
    ) in leaf
    assert "Drama film is the oldest film?" not in [t for _, t in scorer.seen]


def test_step_1_a_passage_at_delta_is_kept_and_one_under_it_is_not(tmp_path: Path) -> None:
    # Film r scores 0.5, delta itself; Film s 0.49
    _, chat, _ = run(
        ranked(tmp_path, "Ars"),
        [(LEAF, leaf_json(("Film A is a drama.", [0]))), (MAIN, main_json("Film A"))],
        scorer=FakeScorer(by_title),
    )
    (leaf,) = users(chat, LEAF)
    assert shown_in(leaf, "Ars") == ["A", "r"]


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


def test_step_3_a_fact_citing_no_shown_passage_is_never_checked(tmp_path: Path) -> None:
    out, chat, _ = run(
        ranked(tmp_path, "ABCDEFGH"),
        [
            (
                LEAF,
                leaf_json(
                    ("Film F is a drama.", [5]),  # five passages shown: 0-4
                    ("Film G is a drama.", []),
                    (" ", [0]),
                    ("Film H is a drama.", [-1]),
                    ("Film A is a drama.", [9, 0, 0]),
                ),
            ),
            (MAIN, main_json("Film A")),
        ],
        scorer=FakeScorer(by_title),
    )
    (check,) = users(chat, VERIFY)
    assert "Passage: (Title: Film A)" in check and "Statement: Film A is a drama." in check
    assert out["known_info"] == ["Film A is a drama."]


def test_step_1_later_rounds_extract_for_the_queries_that_found_the_shown_passages(
    tmp_path: Path,
) -> None:
    first, second = "Which drama film was shot in city B?", "Which drama film was shot in city D?"

    def score(query: str, doc: ScoreDoc) -> float:  # B and C answer the first, D the second
        best = {"B": first, "C": first, "D": second}.get(doc["title"][-1])
        return by_title(query, doc) if query == best else 0.0  # none the question

    _, chat, _ = run(
        ranked(tmp_path, "ABCDEFGH"),
        [
            (KNOW, "Film B and Film D are dramas shot in two cities."),
            new_fact_each_call(),
            (MAIN, counter_reply(lambda n: UNANSWERABLE if n == 1 else main_json("Film B"))),
            (QUERY, f"{second}\n{first}"),
        ],
        scorer=FakeScorer(score),
    )
    one, two = users(chat, LEAF)  # round 1 read the LLM's knowledge, round 2 passages
    assert "(Title: LLM knowledge)" in one
    assert one.rstrip().endswith(f"Question: {QUESTION}\nYour response:")
    assert shown_in(two, "ABCDEFGH") == ["B", "C", "D"]
    assert two.rstrip().endswith(f"Question: {first} {second}\nYour response:")


def test_step_1_the_leaf_reply_is_read_even_when_it_is_not_valid_json(tmp_path: Path) -> None:
    # the paper's Case 2: a bracket closed too early; and citations written as text
    broken = (
        '{"useful_information": [{"info": "Film A is a drama.", "support_passages": [0]}], '
        '{"info": "Film B is a drama.", "support_passages": [1]}]}'
    )
    texts = json.dumps({"useful_information": [{"info": "Film C is a drama.",
                                                "support_passages": ["Passage 2"]}]})  # fmt: skip
    out, _, _ = run(
        ranked(tmp_path, "ABCDEFGH"),
        [
            (LEAF, counter_reply(lambda n: broken if n < 3 else texts)),  # a repair is asked
            (MAIN, counter_reply(lambda n: UNANSWERABLE if n == 1 else main_json("Film A"))),
            (QUERY, "Which drama film was shot first?"),
        ],
        scorer=FakeScorer(by_title),
    )
    assert out["known_info"] == ["Film A is a drama.", "Film B is a drama.", "Film C is a drama."]


def test_released_code_the_same_llm_knowledge_is_shown_once_when_it_gave_a_fact(
    tmp_path: Path,
) -> None:
    out, chat, _ = run(
        films(tmp_path),
        [
            (KNOW, "Film 9 is the oldest drama film, made in 1950."),
            (LEAF, leaf_json(("Film 9 was made in 1950.", [0]))),
            (MAIN, UNANSWERABLE),
            new_query_each_call(),
            (FINAL, FINAL_REPLY),
        ],
        scorer=FakeScorer(0.0),
    )
    assert len(users(chat, KNOW)) == 6 and len(users(chat, LEAF)) == 1
    assert out["passages_per_round"] == [1, 0, 0, 0, 0, 0]


def test_step_3_the_llm_verifier_keeps_a_fact_on_a_reply_it_cannot_read(tmp_path: Path) -> None:
    out, chat, _ = run(
        films(tmp_path),
        [
            (VERIFY, "Perhaps."),
            (LEAF, leaf_json(("Film 0 is a drama.", [0]))),
            (MAIN, main_json("Film 0")),
        ],
    )
    assert users(chat, VERIFY) and out["known_info"] == ["Film 0 is a drama."]


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


def test_step_4_a_server_side_json_constraint_asks_for_the_papers_field_order(
    tmp_path: Path,
) -> None:
    chat = ChoiceChat(
        rules=[(LEAF, leaf_json(("Film 3 is a drama.", [0]))), (MAIN, main_json("Film 3")),
               (VERIFY, "Yes")]
    )  # fmt: skip
    llm = LLM(chat, supports_logprobs=True, structured_mode="json_schema")
    graph = build_graph(
        "migres", llm=llm, retriever=films(tmp_path), profile="paper", scorer=FakeScorer(1.0)
    )
    assert graph.invoke({"question": QUESTION})["answer"] == "Film 3"
    (call,) = calls_of(chat, MAIN)
    schema = call["kwargs"]["response_format"]["json_schema"]["schema"]
    assert list(schema["properties"]) == ["answer", "explanation", "missing_information"]


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
    assert (out["status"], out["confidence"], out["explanation"]) == (
        "answered",
        5,
        "From the information.",
    )


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
            new_fact_each_call(),
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
            new_fact_each_call(),
            (MAIN, UNANSWERABLE),
            new_query_each_call(),
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
    assert final.rstrip().endswith(f"Question: {QUESTION}\nYour response:")
    assert (out["confidence"], out["explanation"]) == (3, "guess")
    assert [e for e in out["trace"] if e.get("call") == "final"] == [
        {"node": "generate_answer", "call": "final", "path": "parsed"}
    ]  # recorded under its kind
    calls = {"leaf": 6, "verify": 6, "main": 5, "query": 5, "final": 1}
    assert out["llm_calls_by_kind"] == calls and len(chat.calls) == sum(calls.values())


def test_released_code_a_round_that_adds_no_fact_is_not_judged(tmp_path: Path) -> None:
    leaf = counter_reply(lambda n: leaf_json((f"Fact {1 if n < 3 else n} about a drama.", [0])))
    out, chat, _ = run(
        films(tmp_path),
        [
            (LEAF, leaf),  # round 2 finds only the fact round 1 found
            (MAIN, counter_reply(lambda n: UNANSWERABLE if n == 1 else main_json("Film 7"))),
            new_query_each_call(),
        ],
    )
    assert len(users(chat, LEAF)) == 3 and len(users(chat, MAIN)) == 2  # round 2: no main call
    assert len(users(chat, QUERY)) == 2
    assert out["judge_rounds"] == 3 and out["answer"] == "Film 7"
    assert [d["path"] for d in out["decisions"] if d["node"] == "sufficiency"] == [
        "verdict", "rule", "verdict",
    ]  # fmt: skip


# -- the rules behind the steps, one test each -------------------------------------------------
def ranked(tmp_path: Path, names: str, *extra: dict[str, str]) -> Store:
    """Films named by one letter each, ``Film A`` scoring best (see :func:`by_title`)."""
    docs = [
        {"id": n, "title": f"Film {n}", "text": f"Film {n} is a drama shot in the city of {n}."}
        for n in names
    ]
    return stored(tmp_path, "ranked", [*docs, *extra])


def by_title(_query: str, doc: ScoreDoc) -> float:
    """Film A scores 0.99, Film B 0.98, ...; every other passage 0.0."""
    title = doc["title"]
    return 1.0 - (ord(title[-1]) - 64) / 100 if title.startswith("Film ") else 0.0


def unanswerable(missing: str) -> str:
    """A main-module reply that says "unanswerable" and what is missing."""
    return json.dumps(
        {
            "answer": {"text": "Unanswerable.", "confidence": 1},
            "explanation": f"The explanation of a missing text of {len(missing)} characters.",
            "missing_information": missing,
        }
    )


def shown_in(leaf: str, names: str) -> list[str]:
    return [n for n in names if f"(Title: Film {n})" in leaf]


class SpyRetriever:
    """The store behind a recorder of what each search asked."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.calls: list[tuple[str, int, Any]] = []

    def search(self, query: str, k: int = 5, *, mode: Any = None, exclude: Any = ()) -> Any:
        self.calls.append((query, k, mode))
        return self.store.search(query, k, mode=mode, exclude=exclude)


def test_step_1_each_query_asks_bm25_for_50_and_a_short_list_is_retried(tmp_path: Path) -> None:
    spy = SpyRetriever(films(tmp_path))
    chat = ChoiceChat(
        rules=[(LEAF, leaf_json(("Film 3 is a drama.", [0]))), (MAIN, main_json("x"))]
    )
    passages: list[str] = []  # the passages scored (a sentence has no id)

    def score(_query: str, doc: ScoreDoc) -> float:
        passages.extend([doc["id"]] if doc["id"] else [])
        return 1.0

    graph = build_graph(
        "migres", llm=LLM(chat, supports_logprobs=True), retriever=spy, profile="paper",
        scorer=FakeScorer(score),
    )  # fmt: skip
    graph.invoke({"question": QUESTION})
    # 40 hits are fewer than 50: the released code asks again, prefixed
    assert spy.calls == [
        (QUESTION, 50, "bm25"),
        (f"Find information about {QUESTION}", 50, "bm25"),
    ]
    # the two lists' union, each passage once, is what the knowledge filter scores
    assert len(passages) == len(set(passages)) == 40


def test_step_1_a_full_list_of_50_is_not_asked_again(tmp_path: Path) -> None:
    docs = [{"id": f"d{i}", "title": f"Drama {i}", "text": f"Drama film {i} is an old film."}
            for i in range(60)]  # fmt: skip
    spy = SpyRetriever(stored(tmp_path, "sixty", docs))
    chat = ChoiceChat(rules=[(LEAF, leaf_json(("Drama 1 is old.", [0]))), (MAIN, main_json("x"))])
    graph = build_graph(
        "migres", llm=LLM(chat, supports_logprobs=True), retriever=spy, profile="paper",
        scorer=FakeScorer(1.0),
    )  # fmt: skip
    graph.invoke({"question": QUESTION})
    assert spy.calls == [(QUESTION, 50, "bm25")]


def test_step_1_the_leaf_sees_the_best_snippets_first_and_none_under_5_words(
    tmp_path: Path,
) -> None:
    short = {"id": "short", "title": "Film @", "text": "Film @ drama oldest."}  # 4 words, 1.0
    five = {"id": "five", "title": "Film #", "text": "<b>Film #</b> is<br>the drama."}  # 1.29
    _, chat, _ = run(
        ranked(tmp_path, "ABCDEFGH", short, five),
        [(LEAF, leaf_json(("Film A is a drama.", [0]))), (MAIN, main_json("Film A"))],
        scorer=FakeScorer(by_title),
    )
    (leaf,) = users(chat, LEAF)
    # the corpus's bold and line-break tags are removed; five words are enough to be shown
    assert "Passage 0: (Title: Film #) Film #  is the drama.\n" in leaf
    assert all(
        f"Passage {i}: (Title: Film {n}) Film {n} is" in leaf for i, n in enumerate("ABCD", 1)
    )
    assert shown_in(leaf, "ABCDEFGH") == list("ABCD") and "Film @" not in leaf


def test_released_code_a_passage_is_shown_at_most_twice_and_once_if_it_supported_a_fact(
    tmp_path: Path,
) -> None:
    names = "ABCDEFGHIJ"
    out, chat, _ = run(
        ranked(tmp_path, names),
        [
            (
                LEAF,
                counter_reply(
                    lambda n: leaf_json(("Film A is a drama.", [0])) if n == 1 else leaf_json()
                ),
            ),
            (MAIN, UNANSWERABLE),
            (QUERY, counter_reply(lambda n: f"Which drama film is number {n}?")),
            (KNOW, "Sorry, there is nothing more to say about these films."),
            (FINAL, FINAL_REPLY),
        ],
        scorer=FakeScorer(by_title),
    )
    shown = [shown_in(leaf, names) for leaf in users(chat, LEAF)]
    # A supported a fact in round 1: never shown again; B-E, shown in rounds 1 and 2 without
    # supporting one, not after; from round 5 no passage is left, and the LLM's refusal is no
    # passage either
    assert shown == [list("ABCDE"), list("BCDEF"), list("FGHIJ"), list("GHIJ")]
    assert out["passages_per_round"] == [5, 5, 5, 4, 0, 0]
    assert len(users(chat, KNOW)) == 2 and out["known_info"] == ["Film A is a drama."]


@pytest.mark.parametrize("reply", ["", *REFUSALS])
def test_step_2_a_refusal_or_an_empty_reply_is_no_passage(tmp_path: Path, reply: str) -> None:
    text = f"Film 9 is a drama. {reply.upper()}" if reply else "  "
    out, chat, _ = run(
        films(tmp_path),
        [(KNOW, text), (MAIN, UNANSWERABLE), (QUERY, "Which film is the oldest drama?"),
         (FINAL, FINAL_REPLY)],
        scorer=FakeScorer(0.0),
    )  # fmt: skip
    assert not users(chat, LEAF) and out["known_info"] == []
    assert len(users(chat, KNOW)) == 6  # every one of the T + 1 rounds asks again
    assert out["stop_reason"] == "max_iterations" and out["answer"] == "No"


def test_step_5_query_lines_are_cleaned_and_an_empty_reply_searches_what_is_missing(
    tmp_path: Path,
) -> None:
    replies = iter(
        [
            "\n".join(
                [
                    "Film 7 age",  # 10 characters: too short
                    '"Who directed Film X"',
                    "- who directed film x",  # a repeat, in another case
                    QUESTION.upper(),  # the question, in another case
                    "Film 8 age?",  # 11 characters: kept
                    "'What year is Film X'",
                ]
            ),
            "`Who made Film X`",
            "",
        ]
    )
    missing = "the year each drama film was made"
    out, chat, _ = run(
        films(tmp_path),
        [
            new_fact_each_call(),
            (
                MAIN,
                counter_reply(lambda n: unanswerable(missing) if n < 4 else main_json("Film 7")),
            ),
            (QUERY, lambda _m: next(replies)),
        ],
    )
    new = ["Who directed Film X", "Film 8 age?", "What year is Film X", "Who made Film X"]
    assert out["queries"] == [QUESTION, *new, missing]  # the empty reply: what is missing
    assert out["query_history"] == [QUESTION, *new, missing]
    first, second, _ = users(chat, QUERY)
    assert f"Original Question: {QUESTION}\nHistorical Questions: {QUESTION}\n" in first
    assert f"Historical Questions: {' '.join([QUESTION, *new[:3]])}\n" in second
    assert out["llm_calls_by_kind"]["query"] == 3


def test_step_4_a_main_reply_that_names_nothing_missing_keeps_the_last_missing_information(
    tmp_path: Path,
) -> None:
    missing = "the year each drama film was made"
    silent = json.dumps(
        {"answer": {"text": "", "confidence": 1}, "explanation": "", "missing_information": ""}
    )  # an empty answer is no answer
    replies = iter(
        [
            "I think maybe.",  # round 1: no JSON, nor in the repair asked for: the question
            "I think maybe.",
            unanswerable(missing),  # round 2
            silent,  # round 3: what was missing before
            "answer: Film 7, explanation: from the facts",  # round 4: read by its keys, after
            "answer: Film 7, explanation: from the facts",  # the repair asked for
        ]
    )
    out, chat, _ = run(
        films(tmp_path),
        [
            new_fact_each_call(),
            (MAIN, lambda _m: next(replies)),
            new_query_each_call(),
        ],
    )
    asked = [q.split("Missing Information: ")[1].split("\n")[0] for q in users(chat, QUERY)]
    assert asked == [QUESTION, missing, missing]
    assert (out["answer"], out["confidence"], out["explanation"]) == ("Film 7", 1, "from the facts")
    assert out["judge_rounds"] == 4 and out["stop_reason"] == "answered"


def test_step_4_an_answer_written_as_a_plain_string_is_read(tmp_path: Path) -> None:
    replies = iter(
        [
            json.dumps({"answer": None, "explanation": None, "missing_information": None}),
            json.dumps({"answer": "Film 7", "explanation": "", "missing_information": ""}),
        ]
    )
    out, chat, _ = run(
        films(tmp_path),
        [
            new_fact_each_call(),
            (MAIN, lambda _m: next(replies)),
            (QUERY, "Which film was made first?"),
        ],
    )
    (query,) = users(chat, QUERY)  # no answer in round 1, and nothing named missing
    assert f"Missing Information: {QUESTION}\nNew queries:" in query
    assert out["answer"] == "Film 7" and out["judge_rounds"] == 2


def test_step_5_a_reply_of_repeats_searches_the_question_again(tmp_path: Path) -> None:
    out, _, _ = run(
        films(tmp_path),
        [
            new_fact_each_call(),
            (MAIN, counter_reply(lambda n: UNANSWERABLE if n == 1 else main_json("Film 7"))),
            (QUERY, f"{QUESTION}\nshort one"),
        ],
    )
    assert out["queries"] == [QUESTION, QUESTION] and out["query_history"] == [QUESTION]


def test_step_4_a_missing_information_under_10_characters_gives_way_to_the_explanation(
    tmp_path: Path,
) -> None:
    replies = iter([unanswerable("the years"), unanswerable("film years"), main_json("Film 7")])
    _, chat, _ = run(
        films(tmp_path),
        [
            new_fact_each_call(),
            (MAIN, lambda _m: next(replies)),
            new_query_each_call(),
        ],
    )
    first, second = users(chat, QUERY)
    # "the years" has 9 characters: the explanation stands for it; "film years" has 10
    assert "Missing Information: The explanation of a missing text of 9 characters.\n" in first
    assert "Missing Information: film years\n" in second


def test_step_3_a_fact_is_kept_at_the_first_cited_passage_that_entails_it(
    tmp_path: Path,
) -> None:
    def entails(messages: list[Any]) -> str:  # passage B entails every fact, A only its own
        check = str(messages[-1].content)
        passage = check.split("Passage: (Title: ")[1][:6]
        return "Yes" if passage == "Film B" or "Statement: Film A" in check else "No"

    out, chat, _ = run(
        ranked(tmp_path, "ABCDEFGH"),
        [
            (VERIFY, entails),
            (
                LEAF,
                leaf_json(
                    ("Film B is a drama.", [0, 1]),  # A does not entail it, B does
                    ("film B is a drama", [1]),  # the same fact: not checked again
                    ("Film C is a drama.", [0]),  # A, its only citation, does not
                    ("Film A is a drama.", [0, 1]),  # A does: B is not asked
                ),
            ),
            (MAIN, main_json("Film A")),
        ],
        scorer=FakeScorer(by_title),
    )
    checks = [(c.split("Passage: (Title: ")[1][:6], c.split("Statement: ")[1].split("\n")[0])
              for c in users(chat, VERIFY)]  # fmt: skip
    assert checks == [
        ("Film A", "Film B is a drama."),
        ("Film B", "Film B is a drama."),
        ("Film A", "Film C is a drama."),
        ("Film A", "Film A is a drama."),
    ]
    assert out["known_info"] == ["Film B is a drama.", "Film A is a drama."]
    # the passages behind the kept facts, each once
    evidence = [(e["id"], e["title"], e["text"], e["source"], e["score"], e["round"])
                for e in out["evidence"]]  # fmt: skip
    assert evidence == [
        ("A", "Film A", "Film A is a drama shot in the city of A.", "bm25", 0.99, 1),
        ("B", "Film B", "Film B is a drama shot in the city of B.", "bm25", 0.98, 1),
    ]
    (main,) = users(chat, MAIN)
    assert "Information: Film B is a drama.; Film A is a drama.\n" in main


def test_step_6_a_final_reply_nothing_can_read_is_a_failed_unanswerable(tmp_path: Path) -> None:
    out, chat, _ = run(
        films(tmp_path),
        [
            new_fact_each_call(),
            (MAIN, UNANSWERABLE),
            new_query_each_call(),
            (FINAL, "I cannot tell."),
        ],
    )
    assert len(users(chat, FINAL)) == 1
    assert out["answer"] == "unanswerable" and out["status"] == "failed"
    assert out["stop_reason"] == "max_iterations"
    assert (out["confidence"], out["explanation"]) == (-1, "")


def test_step_6_with_no_fact_the_final_call_answers_from_the_models_own_knowledge(
    tmp_path: Path,
) -> None:
    out, chat, _ = run(
        films(tmp_path),
        [
            (LEAF, leaf_json()),  # passages shown, nothing extracted
            (MAIN, UNANSWERABLE),
            new_query_each_call(),
            (FINAL, "answer: Film 9, confidence: 2, explanation: from memory"),  # not JSON
        ],
    )
    assert len(users(chat, LEAF)) == 6 and len(users(chat, MAIN)) == 1  # rounds 2-5 add nothing
    (final,) = users(chat, FINAL)
    assert final.rstrip().endswith(f"Information: None\nQuestion: {QUESTION}\nYour response:")
    # the key-scan salvage reads the reply
    assert (out["answer"], out["confidence"], out["explanation"]) == ("Film 9", 2, "from memory")
    assert out["status"] == "forced"
    assert out["llm_calls_by_kind"] == {"leaf": 6, "main": 1, "query": 5, "final": 1}
    (main,) = users(chat, MAIN)
    assert main.rstrip().endswith(f"Information: None\nQuestion: {QUESTION}\nYour response:")


def test_step_2_each_round_without_a_passage_asks_the_llm_about_its_first_query(
    tmp_path: Path,
) -> None:
    def knows(messages: list[Any]) -> str:
        query = str(messages[-1].content).split("Question: ")[1].split("\n")[0]
        return f"Film 9 is the oldest drama film, as asked by {query}"

    out, chat, _ = run(
        films(tmp_path),
        [
            (KNOW, knows),
            new_fact_each_call(),
            (MAIN, UNANSWERABLE),
            (QUERY, counter_reply(lambda n: f"Which film was made in round {n}?\nWho made it?")),
            (FINAL, FINAL_REPLY),
        ],
        scorer=FakeScorer(0.0),
    )
    queries = [QUESTION, *(f"Which film was made in round {n}?" for n in range(1, 6))]
    asked = [q.split("Question: ")[1].split("\n")[0] for q in users(chat, KNOW)]
    assert asked == queries
    for query, leaf in zip(queries, users(chat, LEAF), strict=True):
        known = f"Film 9 is the oldest drama film, as asked by {query}"
        assert f"Passage 0: (Title: LLM knowledge) {known}\nQuestion: {query}\n" in leaf
    # the verifier's premise is the model's text alone
    checks = users(chat, VERIFY)
    assert len(checks) == 6 and all("Passage: Film 9 is the oldest" in c for c in checks)
    assert out["llm_calls_by_kind"]["knowledge"] == 6
    assert len(out["known_info"]) == 6
    assert [(e["title"], e["source"], e["score"], e["round"]) for e in out["evidence"]] == [
        ("LLM knowledge", "llm", 0.0, n) for n in range(1, 7)
    ]
    # recorded: the LLM's text under its digest, and each call of the route
    texts = [f"Film 9 is the oldest drama film, as asked by {q}" for q in queries]
    digests = [f"llm:{hashlib.sha1(t.encode()).hexdigest()[:16]}" for t in texts]
    assert [e["id"] for e in out["evidence"]] == digests
    assert out["shown_ids"] == []  # no corpus passage was shown
    assert [e for e in out["trace"] if e["node"] == "llm_knowledge"] == [
        {"node": "llm_knowledge", "query": q, "usable": True} for q in queries
    ]


def test_released_code_each_call_keeps_its_output_cap(tmp_path: Path) -> None:
    _, chat, _ = run(
        films(tmp_path),
        [
            (KNOW, counter_reply(lambda n: f"Film {n} is a drama film made in {1950 + n}.")),
            new_fact_each_call(),
            (MAIN, UNANSWERABLE),
            new_query_each_call(),
            (FINAL, FINAL_REPLY),
        ],
        scorer=FakeScorer(0.0),
    )
    caps = {
        kind: {c["kwargs"]["max_tokens"] for c in calls_of(chat, needle)}
        for kind, needle in (("leaf", LEAF), ("main", MAIN), ("query", QUERY), ("knowledge", KNOW),
                             ("final", FINAL))
    }  # fmt: skip
    assert caps == {"leaf": {400}, "main": {200}, "query": {96}, "knowledge": {160}, "final": {200}}


def test_the_run_records_its_decisions_steps_and_progress(tmp_path: Path) -> None:
    """What the run records (no paper rule; the paper's code logs the same steps): the loop's
    decisions, each node's trace, the progress events, the shown and retrieved passages."""
    leaf = {
        1: leaf_json(("Film A is a drama.", [0]), ("Film B won.", [1])),
        2: leaf_json(("Film A is a drama.", [0])),  # nothing new: round 2 is not judged
        3: leaf_json(("Film C is a drama.", [0])),
    }

    def graph() -> Any:
        chat = ChoiceChat(
            rules=[
                (LEAF, counter_reply(lambda n: leaf[n])),
                (VERIFY, lambda m: "No" if "Film B won" in str(m[-1].content) else "Yes"),
                (MAIN, counter_reply(lambda n: UNANSWERABLE if n == 1 else main_json("Film C"))),
                (QUERY, counter_reply(lambda n: f"Which drama film was made in round {n}?")),
            ]
        )
        return build_graph(
            "migres", llm=LLM(chat, supports_logprobs=True), retriever=ranked(tmp_path, "ABCDEFGH"),
            profile="paper", scorer=FakeScorer(by_title),
        )  # fmt: skip

    events = list(graph().stream({"question": QUESTION}, stream_mode="custom"))
    out = dict(graph().invoke({"question": QUESTION}))
    assert events == [
        {"round": 1, "queries": ["Which drama film is the oldest film?"], "candidates": 8},
        {"round": 1, "kept": 8},
        {"round": 1, "added": 1, "known": 1},
        {"round": 1, "answered": False, "p_sufficient": None, "missing": "the director of Levity"},
        {"round": 1, "new_queries": ["Which drama film was made in round 1?"]},
        {"round": 2, "queries": ["Which drama film was made in round 1?"], "candidates": 8},
        {"round": 2, "kept": 7},
        {"round": 2, "added": 0, "known": 1},
        {"round": 2, "new_queries": ["Which drama film was made in round 2?"]},
        {"round": 3, "queries": ["Which drama film was made in round 2?"], "candidates": 8},
        {"round": 3, "kept": 3},
        {"round": 3, "added": 1, "known": 2},
        {"round": 3, "answered": True, "p_sufficient": None, "missing": None},
        {"done": True, "stop_reason": "answered", "iterations": 3},
    ]
    assert out["decisions"] == [
        {
            "node": "verify_nli",
            "round": 1,
            "decision": "accept",
            "p": 0.99,
            "path": "logprobs",
            "threshold": 0.5,
        },
        {
            "node": "verify_nli",
            "round": 1,
            "decision": "reject",
            "p": 0.01,
            "path": "logprobs",
            "threshold": 0.5,
        },
        {
            "node": "sufficiency",
            "round": 1,
            "decision": "continue",
            "p": None,
            "path": "verdict",
            "threshold": None,
        },
        {
            "node": "sufficiency",
            "round": 2,
            "decision": "continue",
            "p": None,
            "path": "rule",
            "threshold": 0.5,
        },
        {
            "node": "verify_nli",
            "round": 3,
            "decision": "accept",
            "p": 0.99,
            "path": "logprobs",
            "threshold": 0.5,
        },
        {
            "node": "sufficiency",
            "round": 3,
            "decision": "stop",
            "p": None,
            "path": "verdict",
            "threshold": None,
            "answer": "Film C",
        },
    ]
    assert out["trace"] == [
        {
            "node": "rerank_filter",
            "candidates": 8,
            "above_delta": 8,
            "kept": 8,
            "whole_passages": 0,
            "delta": 0.5,
            "scorer": "fake",
            "top_scores": [0.99, 0.98, 0.97, 0.96, 0.95],
        },
        {"node": "extract", "call": "leaf", "path": "parsed"},
        {"node": "verify_nli", "rejected": ["Film B won."]},
        {
            "node": "verify_nli",
            "call": "verify",
            "path": "logprobs",
            "probs": {"Yes": 0.99, "No": 0.010000000000000004},
        },
        {
            "node": "verify_nli",
            "call": "verify",
            "path": "logprobs",
            "probs": {"Yes": 0.010000000000000004, "No": 0.99},
        },
        {
            "node": "judge_missing",
            "round": 1,
            "answered": False,
            "p_sufficient": None,
            "path": "verdict",
            "stop": False,
            "answer_from": "judge",
        },
        {"node": "judge_missing", "call": "main", "path": "parsed"},
        {
            "node": "rerank_filter",
            "candidates": 8,
            "above_delta": 8,
            "kept": 7,
            "whole_passages": 0,
            "delta": 0.5,
            "scorer": "fake",
            "top_scores": [0.99, 0.98, 0.97, 0.96, 0.95],
        },
        {"node": "extract", "call": "leaf", "path": "parsed"},
        {"node": "judge_missing", "event": "skipped", "reason": "no new facts"},
        {
            "node": "rerank_filter",
            "candidates": 8,
            "above_delta": 8,
            "kept": 3,
            "whole_passages": 0,
            "delta": 0.5,
            "scorer": "fake",
            "top_scores": [0.99, 0.98, 0.97, 0.96, 0.95],
        },
        {"node": "extract", "call": "leaf", "path": "parsed"},
        {
            "node": "verify_nli",
            "call": "verify",
            "path": "logprobs",
            "probs": {"Yes": 0.99, "No": 0.010000000000000004},
        },
        {
            "node": "judge_missing",
            "round": 3,
            "answered": True,
            "p_sufficient": None,
            "path": "verdict",
            "stop": True,
            "answer_from": "judge",
        },
        {"node": "judge_missing", "call": "main", "path": "parsed"},
        {
            "node": "finalize",
            "stop_reason": "answered",
            "status": "answered",
            "judge_rounds": 3,
            "retrieval_rounds": 3,
            "known_info": 2,
        },
        {"node": "short_answer", "call": "short_answer", "path": "off"},
    ]
    assert out["knowledge_tokens"] == 130
    assert out["llm_calls_by_kind"] == {"leaf": 3, "verify": 3, "main": 2, "query": 2}
    assert out["shown_ids"] == ["A", "B", "C", "D", "E", "F", "G", "H"]
    assert out["retrieved_ids"] == ["H", "G", "F", "E", "D", "C", "B", "A"]
