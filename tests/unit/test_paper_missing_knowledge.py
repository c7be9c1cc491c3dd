"""Missing-Knowledge RAG in its paper configuration, step by step, with a scripted model.

Paper steps: retrieve TopK/2 chunks for the question (KB A); a draft answer over them; ONE judge
call writes its thought, its verdict (knowledge missing or not), the missing knowledge and a
query for each; the verdict routes: missing -> each query retrieves from KB B, new chunks only,
TopK - TopK/2 in all -> the final answer over the context and the missing-knowledge context;
not missing -> the final answer with the judge's thought and no new chunks."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gaprag import build_graph
from gaprag.stores.store import Store
from gaprag.testing import ScriptedChatModel

Q = "Who designed the tower in the capital of France?"
LONG = " ".join(f"word{i}" for i in range(400))  # longer than the shipped 150-word cut


@pytest.fixture
def store_docs() -> list[dict[str, str]]:
    docs = [
        ("fr", "France", "Paris is the capital of France."),
        ("eiffel", "Eiffel Tower", "The tower in Paris was built by Eiffel."),
        ("de", "Germany", "Berlin is the capital of Germany."),
        ("eng", "Gustave Eiffel", "Gustave Eiffel was a French engineer."),
        ("rome", "Rome", "Rome is the capital of Italy."),
        ("lon", "London", "London is the capital of England."),
    ]
    return [{"id": i, "title": t, "text": f"{text} {LONG}"} for i, t, text in docs]


def judge(missing: bool, queries: list[str]) -> str:
    return json.dumps(
        {
            "thought": "The context does not say who designed the tower.",
            "judge": missing,
            "missing_knowledge": ["designer of the Eiffel Tower"] if missing else [],
            "query": queries,
        }
    )


def run(store: Store, verdict: str, **options: Any) -> tuple[dict[str, Any], ScriptedChatModel]:
    model = ScriptedChatModel(
        rules=[
            ("## First Round Answer", verdict),
            ("## Missing Knowledge Context", "Gustave Eiffel, the French engineer"),
        ],
        default="Paris",
    )
    graph = build_graph("missing_knowledge", llm=model, retriever=store, profile="paper", **options)
    return dict(graph.invoke({"question": Q})), model


def kinds(model: ScriptedChatModel) -> list[str]:
    out = []
    for prompt in model.prompts():
        if "## First Round Answer" in prompt:
            out.append("judge")
        elif "## Missing Knowledge Context" in prompt:
            out.append("final")
        else:
            out.append("draft")
    return out


def test_step_1_the_first_retrieval_takes_topk_over_two_chunks(store: Store) -> None:
    out, _ = run(store, judge(False, []))
    first = [e for e in out["evidence"] if e["round"] == 1]
    assert len(first) == 2  # TopK = 4, split evenly between KB A and KB B
    assert out["queries"][0] == Q


def test_step_2_the_draft_sees_whole_passages(store: Store) -> None:
    _, model = run(store, judge(False, []))
    draft = model.prompts()[kinds(model).index("draft")]
    assert draft.count("word399") == 2  # both chunks whole: no 150-word cut
    assert "## Missing Knowledge Context" not in draft


def test_step_3_one_judge_call_with_the_papers_criteria(store: Store) -> None:
    _, model = run(store, judge(False, []))
    prompt = model.prompts()[kinds(model).index("judge")]
    assert "(c) the answer is vague or off topic." in prompt
    assert "does not support it" not in prompt and "encyclopedia title" not in prompt
    for slot in ("## Query", "## Context", "## First Round Answer", "## Output"):
        assert slot in prompt
    assert kinds(model).count("judge") == 1


def test_step_4_a_not_missing_verdict_answers_with_the_thought_and_no_new_chunks(
    store: Store,
) -> None:
    out, model = run(store, judge(False, []))
    assert kinds(model) == ["draft", "judge", "final"]  # no Yes/No call after the judge
    final = model.prompts()[-1]
    assert "The context does not say who designed the tower." in final
    assert {e["round"] for e in out["evidence"]} == {1}
    decision = out["decisions"][-1]
    assert decision["decision"] == "stop" and decision["path"] == "verdict"
    assert decision["p"] is None and decision["threshold"] is None


def test_step_4_a_missing_verdict_retrieves_for_each_query_within_the_budget(
    store: Store,
) -> None:
    out, model = run(store, judge(True, ["Eiffel Tower designer", "Gustave Eiffel engineer"]))
    assert kinds(model) == ["draft", "judge", "final"]
    assert out["queries"][1:] == ["Eiffel Tower designer", "Gustave Eiffel engineer"]
    first = {e["id"] for e in out["evidence"] if e["round"] == 1}
    added = [e for e in out["evidence"] if e["round"] == 2]
    assert len(added) == 2 and not first & {e["id"] for e in added}  # TopK - TopK/2, new only
    assert out["decisions"][-1]["decision"] == "continue"


def test_step_5_the_final_answer_holds_both_contexts_and_is_returned_as_written(
    store: Store,
) -> None:
    out, model = run(store, judge(True, ["Eiffel Tower designer"]))
    final = model.prompts()[-1]
    context, _, rest = final.partition("## Missing Knowledge Context")
    assert "## Context" in context and "## Question" in rest
    assert "The context does not say who designed the tower." in rest
    # the paper's answer, not rewritten by a short-answer step
    assert out["answer"] == "Gustave Eiffel, the French engineer" and len(model.calls) == 3


def test_a_missing_verdict_without_queries_answers_without_retrieving(store: Store) -> None:
    out, model = run(store, json.dumps({"thought": "", "judge": True, "query": []}))
    assert kinds(model) == ["draft", "judge", "final"]
    assert {e["round"] for e in out["evidence"]} == {1}
