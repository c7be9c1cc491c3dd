"""Replies reused within one question's run (gaprag.llm.memo): a repeated call inside a run is
answered without the model, nothing is reused across runs, scopes or other request settings,
and only a temperature-0 model reuses by default."""

from __future__ import annotations

from typing import Any

import pytest

from gaprag import build_graph
from gaprag.accounting import metered
from gaprag.graphs.iterkey.nodes import PROMPTS
from gaprag.llm.client import LLM
from gaprag.llm.memo import ReplyMemo, deterministic, run_scope
from gaprag.stores import Store
from gaprag.stores.documents import Document
from gaprag.testing import ScriptedChatModel

CORPUS: list[Document] = [
    {"id": "apollo", "title": "Apollo 11", "text": "Apollo 11 lunar module Eagle carried Neil Armstrong."},
    {"id": "moon", "title": "Moon", "text": "The Moon is the only natural satellite of the Earth."},
    {"id": "fr", "title": "France", "text": "Paris is the capital and largest city of France."},
]  # fmt: skip


class Deterministic(ScriptedChatModel):
    """A scripted model that says it samples at temperature 0."""

    temperature: float = 0.0


def counting(temperature: float = 0.0) -> Deterministic:
    """Each reply names how many calls the model has answered, so a reused reply is visible."""
    fake = Deterministic(temperature=temperature)
    fake.default = lambda _messages: f"reply {len(fake.calls) + 1}"
    return fake


def test_a_repeated_call_in_a_run_is_answered_from_the_memo() -> None:
    fake = counting()
    llm = LLM(fake)
    with metered() as meter, run_scope("run-1"):
        first = llm.generate("What is the capital of France?")
        again = llm.generate("What is the capital of France?")
        other = llm.generate("What is the capital of Germany?")
    assert (first, again, other) == ("reply 1", "reply 1", "reply 2")
    assert len(fake.calls) == 2
    assert meter.llm_calls == 2  # a reused reply is not a call: no calls, no tokens
    assert [d for d in meter.decisions if d.get("event") == "reply_reused"] == [
        {"event": "reply_reused"}
    ]


def test_nothing_is_reused_across_runs_outside_a_run_or_with_other_settings() -> None:
    fake = counting()
    llm = LLM(fake)
    with run_scope("run-1"):
        assert llm.generate("Q?") == "reply 1"
        assert llm.generate("Q?", max_tokens=5) == "reply 2"  # another request
    with run_scope("run-2"):
        assert llm.generate("Q?") == "reply 3"  # another run
    assert llm.generate("Q?") == "reply 4"  # no run
    assert llm.generate("Q?") == "reply 5"


@pytest.mark.parametrize(
    ("temperature", "reuse", "expected"),
    [(0.0, None, True), (0.7, None, False), (0.7, True, True), (0.0, False, False)],
)
def test_reuse_is_on_by_default_only_at_temperature_zero(
    temperature: float, reuse: bool | None, expected: bool
) -> None:
    fake = counting(temperature)
    llm = LLM(fake, reuse_replies=reuse)
    with run_scope("run-1"):
        replies = {llm.generate("Q?"), llm.generate("Q?")}
    assert (len(replies) == 1) is expected
    assert (llm.memo is not None) is expected


def test_a_model_without_a_temperature_is_not_taken_for_deterministic() -> None:
    assert not deterministic(ScriptedChatModel())
    assert deterministic(Deterministic())


def test_logprob_choices_are_reused_with_their_probabilities() -> None:
    fake = Deterministic(default="Yes", logprobs={"Yes": -0.1, "No": -2.4})
    llm = LLM(fake, supports_logprobs=True)
    with run_scope("run-1"):
        first = llm.choose("Enough?", ["Yes", "No"], default="No")
        again = llm.choose("Enough?", ["Yes", "No"], default="No")
    assert len(fake.calls) == 1
    assert again.probs == first.probs and again.path == "logprobs" and again.value == "Yes"


def test_the_memo_keeps_the_most_recent_runs() -> None:
    from langchain_core.messages import AIMessage

    memo = ReplyMemo(runs=2)
    for run in ("a", "b", "c"):
        memo.put(run, "k", AIMessage(content=run))
    assert memo.get("a", "k") is None
    assert [memo.get(r, "k").content for r in ("b", "c")] == ["b", "c"]  # type: ignore[union-attr]


@pytest.fixture
def store_docs() -> list[Document]:
    """The ``store`` fixture's documents."""
    return CORPUS


def iterkey_fake() -> Deterministic:
    """IterKey's prompts, answered the same way every round: the same keywords come back, so
    every round retrieves the same passages and repeats the first round's prompts."""
    return Deterministic(
        rules=[
            (PROMPTS["validate"].system, "False"),
            (PROMPTS["regenerate"].system, '["Moon", "Eagle"]'),
            (PROMPTS["keywords"].system, '["Moon", "Eagle"]'),
        ],
        default="Eagle",
    )


def ask(graph: Any) -> dict[str, Any]:
    return dict(graph.invoke({"question": "Which craft landed on the Moon?"}))


def test_a_loop_that_repeats_itself_makes_fewer_calls_and_answers_the_same(store: Store) -> None:
    with_memo, without = iterkey_fake(), iterkey_fake()
    graph = build_graph("iterkey", llm=LLM(with_memo), retriever=store, max_iterations=3)
    plain = build_graph(
        "iterkey", llm=LLM(without, reuse_replies=False), retriever=store, max_iterations=3
    )
    out, ref = ask(graph), ask(plain)
    assert (out["answer"], out["stop_reason"], out["iterations"]) == (
        ref["answer"], ref["stop_reason"], ref["iterations"],
    )  # fmt: skip
    assert out["iterations"] == 3
    assert len(with_memo.calls) < len(without.calls)
    assert out["usage"]["llm_calls"] == len(with_memo.calls)
    reused = [t for t in out["trace"] if t.get("event") == "reply_reused"]
    assert len(reused) == len(without.calls) - len(with_memo.calls)


def test_a_second_question_on_the_same_graph_reuses_nothing_from_the_first(store: Store) -> None:
    fake = iterkey_fake()
    graph = build_graph("iterkey", llm=LLM(fake), retriever=store, max_iterations=3)
    ask(graph)
    first = len(fake.calls)
    ask(graph)
    assert len(fake.calls) == 2 * first
