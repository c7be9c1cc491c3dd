"""MIGRES in its paper configuration, step by step, with a scripted model.

Paper steps (a round): retrieve BM25 candidates for each query; the knowledge filter keeps what
scores at least delta; the leaf module extracts useful information with its supporting
passages; each fact is verified against its passage (the paper's NLI model; here an LLM yes/no);
the main module answers from the known information or says "unanswerable" and what is missing.
An answer ends the loop; "unanswerable" generates new queries for the next round; after T judge
rounds (multi-hop: 5) a final call forces an answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gaprag import build_graph
from gaprag.llm.client import LLM
from gaprag.stores import Store
from tests.methods.migres import (
    FINAL,
    FINAL_REPLY,
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


def run(store: Store, rules: list[tuple[str, Any]], **ctx: Any) -> tuple[dict[str, Any], Any]:
    chat = ChoiceChat(rules=[(VERIFY, "Yes"), *rules])
    graph = build_graph(
        "migres", llm=LLM(chat, supports_logprobs=True), retriever=store, profile="paper",
        scorer=FakeScorer(1.0), **ctx,
    )  # fmt: skip
    return dict(graph.invoke({"question": QUESTION})), chat


def films(tmp_path: Path) -> Store:
    docs = [
        {"id": f"p{i}", "title": f"Film {i}", "text": f"Film number {i} is a drama. {LONG}"}
        for i in range(40)
    ]
    return hashing_store(tmp_path / "films", docs)


def test_paper_settings() -> None:
    from gaprag.context import effective_settings

    graph = build_graph("migres", llm=ChoiceChat(), profile="paper", scorer=FakeScorer(1.0))
    s = {k: v["value"] for k, v in effective_settings(graph.builder.context_schema).items()}
    assert s["stop_rule"] == "answered" and s["task_type"] == "multihop"
    assert s["llm_knowledge"] is True and s["verifier"] == "llm" and s["reader"] == "paper"
    assert s["max_passage_words"] == 1000 and s["gate"] == "off"


def test_steps_1_to_3_retrieve_filter_extract_verify_over_whole_passages(tmp_path: Path) -> None:
    out, chat = run(
        films(tmp_path),
        [(LEAF, leaf_json(("Film 3 is a drama.", [0]))), (MAIN, main_json("Film 3"))],
    )
    leaf = next(p for p in chat.prompts() if LEAF in p)
    assert "word299" in leaf  # whole passages: no 150-word cut
    assert out["llm_calls_by_kind"]["leaf"] == 1
    assert any(VERIFY in c["messages"][-1][1] for c in chat.calls)  # the fact was verified
    assert out["known_info"] == ["Film 3 is a drama."]


def test_step_4_an_answer_ends_the_loop_with_no_extra_call(tmp_path: Path) -> None:
    out, chat = run(
        films(tmp_path),
        [(LEAF, leaf_json(("Film 3 is a drama.", [0]))), (MAIN, main_json("Film 3"))],
    )
    assert out["answer"] == "Film 3" and out["stop_reason"] == "answered"
    assert not any(SUFF in p for p in chat.prompts())  # no "is it enough?" Yes/No
    assert "sufficiency" not in out["llm_calls_by_kind"]
    decision = out["decisions"][-1]
    assert decision["decision"] == "stop" and decision["path"] == "verdict"
    assert decision["p"] is None and decision["threshold"] is None


def test_step_5_unanswerable_generates_queries_for_the_next_round(tmp_path: Path) -> None:
    main = counter_reply(lambda n: UNANSWERABLE if n == 1 else main_json("Film 7"))
    out, _ = run(
        films(tmp_path),
        [
            (LEAF, counter_reply(lambda n: leaf_json((f"Fact {n} about a drama film.", [0])))),
            (MAIN, main),
            (QUERY, "Which drama film is number 7?"),
        ],
    )
    assert out["answer"] == "Film 7" and out["judge_rounds"] == 2 and out["iterations"] == 2
    assert out["queries"][1] == "Which drama film is number 7?"
    assert [d["decision"] for d in out["decisions"] if d["node"] == "sufficiency"] == [
        "continue",
        "stop",
    ]


def test_step_6_after_t_rounds_a_final_call_forces_the_answer(tmp_path: Path) -> None:
    out, _ = run(
        films(tmp_path),
        [
            (LEAF, counter_reply(lambda n: leaf_json((f"Fact {n} about a drama film.", [0])))),
            (MAIN, UNANSWERABLE),
            (QUERY, counter_reply(lambda n: f"Which film was made in round {n}?")),
            (FINAL, FINAL_REPLY),
        ],
    )
    assert out["judge_rounds"] == 5 and out["iterations"] == 6  # T = 5, T + 1 retrievals
    assert out["status"] == "forced" and out["stop_reason"] == "max_iterations"
    assert out["answer"] == "No"  # the final call's answer, not rewritten by a short-answer step
