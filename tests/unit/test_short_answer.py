"""The shared short-answer step and the loop-decision helpers."""

from __future__ import annotations

from typing import Any

import pytest

from gaprag import build_graph
from gaprag.llm.client import Choice
from gaprag.nodes import option_probability, should_stop
from gaprag.nodes.short_answer import options, rule_answer, yes_no_question
from gaprag.prompts import load_prompts
from gaprag.stores import Store
from gaprag.testing import scripted


@pytest.mark.parametrize(
    ("question", "answer", "expected"),
    [
        ("Are Bob Dylan and Joan Baez both singers?", "Yes, they both are.", "yes"),
        ("Was the tower built before 1900?", "No. It was built in 1931.", "no"),
        ("Is Berlin the capital of Germany?", "True", "yes"),
        ("Who was born first, Fred Gehrke or Tom Rader?", "Tom Rader was born first.", "Tom Rader"),
        ("Which is older, the Rhine or the Danube?", "danube", "Danube"),
        ("Who wrote Hamlet?", "William Shakespeare", "William Shakespeare"),
        ("Who wrote Hamlet?", "", ""),
        # not decidable by a rule: a model call
        ("Who wrote Hamlet?", "Hamlet was written by William Shakespeare around 1600", None),
        ("Did Oasis or Blur form first?", "Blur formed first in the year 1988 in London", None),
        ("Is Paris in France?", "Paris is the capital of France", None),
        ("Who was born first, Fred Gehrke or Tom Rader?", "Both were born in 1920s", None),
    ],
)
def test_rule_answer(question: str, answer: str, expected: str | None) -> None:
    assert rule_answer(question, answer) == expected


def test_question_shapes() -> None:
    assert options("Which magazine was started first, Arthur's Magazine or First for Women?") == [
        "Arthur's Magazine",
        "First for Women",
    ]
    assert options("Who wrote Hamlet?") == []
    assert yes_no_question("Are both rivers in Europe?")
    assert not yes_no_question("Is it Oasis, Blur or Pulp?")  # options, not yes/no
    assert not yes_no_question("Who is older?")
    # alternatives without a comma are still alternatives (one rule for every method)
    assert not yes_no_question("Is Jerry Seinfeld or Larry David older?")
    assert not yes_no_question("Was Move a film or a play?")
    assert yes_no_question("Is the Nile longer than the Amazon?\nOptions:\nA. yes or no")


def test_the_shared_prompt_sends_few_shot_turns() -> None:
    prompt = load_prompts("gaprag.nodes")["short_answer"]
    rendered = prompt.render(question="Q?", answer="A long answer.")
    roles = [role for role, _ in rendered]
    assert roles[0] == "system" and roles[-1] == "user"
    assert roles[1:-1] == ["user", "assistant"] * (len(roles[1:-1]) // 2) and len(roles) > 3
    assert "Blur" not in rendered[0][1]  # examples are turns, not system text
    assert rendered[-1][1].endswith("Answer: A long answer.\nShortest answer:")


def test_long_answer_is_shortened_by_one_call(store: Store) -> None:
    fake = scripted(
        "Hamlet was written by the English playwright William Shakespeare.", "William Shakespeare"
    )
    out = build_graph("standard_rag", llm=fake, retriever=store, top_k=2).invoke(
        {"question": "Who wrote Hamlet?"}
    )
    assert out["answer"] == "William Shakespeare"
    assert out["usage"]["llm_calls"] == 2
    record = [t for t in out["trace"] if t.get("call") == "short_answer"]
    assert record[0]["path"] == "llm" and record[0]["original"].startswith("Hamlet was")
    assert fake.calls[1]["messages"][-1][1].startswith("Question: Who wrote Hamlet?")


def test_short_answer_costs_no_call(store: Store) -> None:
    fake = scripted("William Shakespeare")
    out = build_graph("standard_rag", llm=fake, retriever=store).invoke(
        {"question": "Who wrote Hamlet?"}
    )
    assert out["answer"] == "William Shakespeare" and out["usage"]["llm_calls"] == 1


def test_a_reply_that_is_not_shorter_is_discarded(store: Store) -> None:
    long = "Hamlet was written by the English playwright William Shakespeare."
    fake = scripted(long, long + " Indeed.")
    out = build_graph("standard_rag", llm=fake, retriever=store).invoke(
        {"question": "Who wrote Hamlet?"}
    )
    assert out["answer"] == long.rstrip(".")
    # the call was made and counted even though its reply was not used
    assert out["usage"]["llm_calls"] == 2
    record = [t for t in out["trace"] if t.get("call") == "short_answer"]
    assert record[0]["path"] == "llm_kept"


@pytest.mark.parametrize("off", [{"reader": "paper"}, {"short_answer": False}])
def test_paper_style_or_the_short_answer_setting_turns_the_step_off(
    store: Store, off: dict[str, Any]
) -> None:
    long = "Hamlet was written by the English playwright William Shakespeare"
    fake = scripted(long, "William Shakespeare")
    graph = build_graph("standard_rag", llm=fake, retriever=store, **off)
    out = graph.invoke({"question": "Who wrote Hamlet?"})
    assert out["answer"] == long and out["usage"]["llm_calls"] == 1
    with pytest.raises(Exception, match="reader"):
        build_graph("standard_rag", llm=fake, retriever=store, reader="terse")


def test_option_probability_and_should_stop() -> None:
    choice = Choice("Yes", "logprobs", {"Yes": 0.6, "No": 0.2})
    p = option_probability(choice, "Yes")
    assert p == pytest.approx(0.75)
    assert should_stop(p, 0.7) and not should_stop(p, 0.8)
    assert not should_stop(p, 0.5, calibration=True)  # a calibration run never stops early
    assert option_probability(Choice("Yes", "parsed"), "Yes") is None
    assert option_probability(Choice("No", "logprobs", {"No": 0.9}), "Yes") == 0.0
    assert not should_stop(None, 0.0)  # no probability: keep retrieving
