"""The shared answer choice: plain RAG's answer or the loop's, where the gate let the loop
run (``answer_scoring`` and ``answer_choice``; off by default)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from gaprag import build_graph
from gaprag.graphs import ITERATIVE, METHODS, context_class
from gaprag.llm.client import LLM, TokenLogprob
from gaprag.nodes.choice import answer_probability, answer_span, takes_gate
from gaprag.options import options_for, parse_sets
from gaprag.profiles import apply_profile, load_profile
from gaprag.stores.store import Store
from gaprag.testing import ScriptedChatModel

Q = "What is the capital of France?"
PLAIN = "Use the passages below to answer the question."  # plain RAG's answer prompt
UNSURE = [[("Paris", -1.6), ("Lyon", -1.7)], [("ian", -2.4), (" city", -2.5)]]  # p = e^-2
GATE_P = math.exp(-2.0)
REASON = "Next sentence:"  # IRCoT's reasoning prompt
#: the final answer scored, the answer chosen on probabilities
LOGPROB = {"answer_scoring": "logprob", "answer_choice": "logprob"}


def cot(answer: str, logprob: float) -> list[list[tuple[str, float]]]:
    """IRCoT's sentence "So the answer is: <answer>." with ``logprob`` on the answer token."""
    lead = [("So", -0.01), (" the", -0.01), (" answer", -0.01), (" is", -0.01), (":", -0.01)]
    return [[t] for t in [*lead, (f" {answer}", logprob), (".", -0.01)]]


def ircot_run(
    store: Store, loop: str = "Lyon", loop_logprob: float | None = -0.1, **options: Any
) -> tuple[dict[str, Any], ScriptedChatModel]:
    """One IRCoT question whose gate is unsure of "Paris" and whose chain of thought answers
    ``loop`` (scored with ``loop_logprob`` on its answer token; None: no logprobs)."""
    sentence = f"So the answer is: {loop}."
    scored = {"Paris": UNSURE}
    if loop_logprob is not None:
        scored[sentence] = cot(loop, loop_logprob)
    model = ScriptedChatModel(
        rules=[(PLAIN, "Paris"), (REASON, sentence)], reply_logprobs=scored, default="Unknown"
    )
    options = {"gate": "logprob_mean", "gate_threshold": -0.5, **options}
    graph = build_graph("ircot", llm=LLM(model, supports_logprobs=True), retriever=store, **options)
    return graph.invoke({"question": Q}), model


def selection(out: dict[str, Any]) -> dict[str, Any]:
    (decision,) = [d for d in out["decisions"] if d["node"] == "select"]
    return dict(decision)


def test_the_answer_span_is_the_one_after_the_answer_marker() -> None:
    reply = "Lyon is near Paris, so the answer is: Paris."
    start, end = answer_span(reply, "paris") or (0, 0)
    assert reply[start:end] == "Paris" and start > reply.index("answer")
    json = '{"why": "Lyon", "text": "Lyon"}'
    assert answer_span(json, "Lyon") == (json.rindex("Lyon"), json.rindex("Lyon") + 4)
    assert answer_span("Lyon.", "Paris") is None


def test_migres_json_answer_is_read_from_its_text_field() -> None:
    """MIGRES's main module writes its explanation before ``answer.text``; only the answer
    field's tokens count."""
    pieces = [('{"explanation": "', -0.01), ("Lyon", -3.0), ('.", "answer": {"text": ', -0.01),
              ('"', -0.01), ("Lyon", -0.2), ('", "confidence": 4}}', -0.01)]  # fmt: skip
    tokens = [TokenLogprob(t, lp) for t, lp in pieces]
    assert answer_probability(tokens, "Lyon") == pytest.approx(math.exp(-0.2))


def test_the_answer_probability_reads_only_the_answer_tokens() -> None:
    tokens = [TokenLogprob(t, lp) for ((t, lp),) in cot("Lyon", -0.7)]
    assert answer_probability(tokens, "Lyon") == pytest.approx(math.exp(-0.7))
    assert answer_probability(tokens, "Paris") is None and answer_probability(None, "Lyon") is None


def test_the_logprob_rule_takes_plain_rags_answer_only_past_the_margin() -> None:
    assert takes_gate(0.6, 0.3, 0.2) and not takes_gate(0.4, 0.3, 0.2)
    assert not takes_gate(None, 0.3, 0.0) and not takes_gate(0.6, None, 0.0)


def test_a_confident_loop_answer_is_kept(store: Store) -> None:
    out, _ = ircot_run(store, loop_logprob=-0.1, **LOGPROB)
    decision = selection(out)
    assert out["answer"] == "Lyon" and decision["decision"] == "loop"
    assert decision["path"] == "logprobs" and decision["p"] == pytest.approx(math.exp(-0.1), 1e-4)
    assert decision["threshold"] == 0.0 and decision["answer"] == "Lyon"


def test_an_unsure_loop_answer_gives_way_to_a_surer_plain_answer(store: Store) -> None:
    out, _ = ircot_run(store, loop_logprob=-4.0, **LOGPROB)
    decision = selection(out)
    assert out["answer"] == "Paris" and decision["decision"] == "gate"
    assert decision["p"] == pytest.approx(GATE_P, rel=1e-4) and decision["answer"] == "Paris"
    record = next(t for t in out["trace"] if t.get("call") == "select")
    assert record["loop_p"] == pytest.approx(math.exp(-4.0), rel=1e-4) and not record["agree"]


def test_plain_rags_probability_is_its_mean_token_probability_whatever_the_gates_signal(
    store: Store,
) -> None:
    out, _ = ircot_run(
        store, loop_logprob=-4.0, **LOGPROB, gate="logprob_margin", gate_threshold=2.0
    )
    decision = selection(out)
    assert out["answer"] == "Paris" and decision["path"] == "logprobs"
    assert decision["p"] == pytest.approx(GATE_P, rel=1e-4)


def test_the_margin_keeps_the_loop_answer_when_plain_rag_is_not_sure_enough(store: Store) -> None:
    out, _ = ircot_run(store, loop_logprob=-4.0, **LOGPROB, choice_margin=0.5)
    assert out["answer"] == "Lyon" and selection(out)["decision"] == "loop"


def test_agreeing_candidates_are_kept_with_the_stronger_probability(store: Store) -> None:
    out, _ = ircot_run(store, loop="Paris", loop_logprob=-4.0, **LOGPROB)
    decision = selection(out)
    assert out["answer"] == "Paris" and decision["decision"] == "loop"
    assert decision["p"] == pytest.approx(GATE_P, rel=1e-4)


def test_the_agreement_rule_keeps_the_loop_answer_and_records_the_disagreement(
    store: Store,
) -> None:
    differ, _ = ircot_run(store, answer_scoring="logprob", answer_choice="agreement")
    agree, _ = ircot_run(store, loop="Paris", answer_scoring="logprob", answer_choice="agreement")
    assert differ["answer"] == "Lyon" and selection(differ)["p"] == 0.0
    # two answers that agree: p is the higher of their probabilities (the loop's here)
    assert selection(agree)["path"] == "agreement"
    assert selection(agree)["p"] == pytest.approx(math.exp(-0.1))


def test_the_select_step_records_what_escalating_rags_choice_records(store: Store) -> None:
    from gaprag.nodes.choice import Candidate, choose_answer

    for loop in ("Paris", "Lyon"):
        for rule in ("logprob", "agreement"):
            out, _ = ircot_run(store, loop=loop, answer_scoring="logprob", answer_choice=rule)
            (seen,) = [t for t in out["trace"] if t.get("call") == "select"]
            gate, mine = Candidate("Paris", seen["gate_p"]), Candidate(loop, seen["loop_p"])
            expected = choose_answer([gate, mine], rule, 0.1)
            decision = selection(out)
            assert decision["path"] == expected.path
            assert decision["p"] == pytest.approx(expected.p)


def test_without_the_loop_answers_logprobs_selection_falls_back_to_agreement(
    store: Store,
) -> None:
    out, _ = ircot_run(store, loop_logprob=None, **LOGPROB)
    decision = selection(out)
    assert out["answer"] == "Lyon" and decision["path"] == "agreement_fallback"
    assert decision["p"] == 0.0


def test_selection_off_changes_no_request_and_no_answer(store: Store) -> None:
    off, off_model = ircot_run(store, loop_logprob=-4.0)
    _, on_model = ircot_run(store, loop_logprob=-4.0, **LOGPROB)
    assert off["answer"] == "Lyon" and not [d for d in off["decisions"] if d["node"] == "select"]
    assert "answer_p" not in off or not off["answer_p"]
    # scoring asks for logprobs on the same messages, and only that
    assert [c["messages"] for c in off_model.calls] == [c["messages"] for c in on_model.calls]
    reason_off = [c for c in off_model.calls if REASON in c["messages"][-1][1]]
    reason_on = [c for c in on_model.calls if REASON in c["messages"][-1][1]]
    assert reason_off and not any(c["kwargs"].get("logprobs") for c in reason_off)
    assert all(c["kwargs"].get("logprobs") for c in reason_on)


def test_the_gates_own_stop_is_not_selected_again(store: Store) -> None:
    model = ScriptedChatModel(
        rules=[(PLAIN, "Paris")], reply_logprobs={"Paris": [[("Paris", -0.05)]]}, default="x"
    )
    graph = build_graph(
        "ircot", llm=LLM(model, supports_logprobs=True), retriever=store,
        gate="logprob_mean", **LOGPROB,
    )  # fmt: skip
    out = graph.invoke({"question": Q})
    assert out["answer"] == "Paris" and [d["node"] for d in out["decisions"]] == ["gate"]


@pytest.mark.parametrize("method", METHODS)
def test_every_iterative_method_selects_before_its_short_answer(method: str, store: Store) -> None:
    graph = build_graph(method, llm=ScriptedChatModel(default="Paris"), retriever=store)
    edges = set(graph.builder.edges)
    assert ("select" in graph.builder.nodes) == (method in ITERATIVE), method
    if method in ITERATIVE:
        assert ("select", "short_answer") in edges
        assert sum(1 for source, target in edges if target == "select") == 1


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ({"select": "logprob"}, LOGPROB),
        ({"select": "agreement"}, {"answer_scoring": "logprob", "answer_choice": "agreement"}),
        ({"select": "off"}, {"answer_scoring": "off", "answer_choice": "off"}),
        ({"select_margin": 0.2}, {"choice_margin": 0.2}),
    ],
)
def test_the_old_selection_settings_still_work_with_a_deprecation_warning(
    store: Store, old: dict[str, Any], new: dict[str, Any]
) -> None:
    with pytest.warns(DeprecationWarning, match="deprecated.*use"):
        built = build_graph("ircot", llm=ScriptedChatModel(), retriever=store, **old)
    ctx = built.builder.context_schema()
    assert {k: getattr(ctx, k) for k in new} == new
    with pytest.warns(DeprecationWarning):
        at_run = context_class("ircot")(**old)
    assert {k: getattr(at_run, k) for k in new} == new


def test_an_old_name_in_a_profile_or_a_set_option_is_read_under_its_new_name(
    tmp_path: Path,
) -> None:
    profile = tmp_path / "m.toml"
    profile.write_text('model = "m"\n[ircot]\nselect = "logprob"\nselect_margin = 0.1\n')
    with pytest.warns(DeprecationWarning):
        merged, sources = apply_profile(
            "ircot", {}, load_profile(profile), {*LOGPROB, "choice_margin"}
        )
    assert merged == {**LOGPROB, "choice_margin": 0.1}
    assert set(sources.values()) == {"profile m"}
    with pytest.warns(DeprecationWarning):
        options = options_for("ircot", parse_sets(["select=agreement", "select_margin=0.3"]))
    assert options == {
        "answer_scoring": "logprob",
        "answer_choice": "agreement",
        "choice_margin": 0.3,
    }


def test_a_new_name_given_beside_its_old_one_wins(store: Store) -> None:
    with pytest.warns(DeprecationWarning):
        ctx = context_class("ircot")(select="logprob", answer_choice="agreement")
    assert ctx.answer_choice == "agreement" and ctx.answer_scoring == "logprob"


def test_the_answer_choice_needs_the_gate_it_chooses_against(store: Store) -> None:
    from langgraph.graph import StateGraph

    from gaprag.deps import Deps
    from gaprag.graphs.standard_rag import Context, State
    from gaprag.graphs.standard_rag.nodes import generate_answer, retrieve
    from gaprag.nodes import add_nodes, add_short_answer

    builder = StateGraph(State, context_schema=Context)
    add_nodes(builder, Deps(), retrieve, generate_answer)
    builder.add_edge("retrieve", "generate_answer")
    with pytest.raises(ValueError, match="needs the gate"):
        add_short_answer(builder, Deps(), after="generate_answer", choice=True)


def test_each_optional_step_of_the_tail_is_off_by_its_own_setting(store: Store) -> None:
    """gate="off", answer_scoring="off", answer_choice="off" and short_answer=false: no
    gate call, no logprobs asked for, no choice made, no short-answer call."""
    off = {"gate": "off", "answer_scoring": "off", "answer_choice": "off", "short_answer": False}
    long = "The capital of France is the city of Lyon, as the passages say."
    sentence = f"So the answer is: {long}"
    model = ScriptedChatModel(rules=[(PLAIN, "Paris"), (REASON, sentence)], default="Unknown")
    graph = build_graph("ircot", llm=LLM(model, supports_logprobs=True), retriever=store, **off)
    out = graph.invoke({"question": Q})
    assert not any(PLAIN in c["messages"][-1][1] for c in model.calls)  # no gate call
    assert not any(c["kwargs"].get("logprobs") for c in model.calls)
    assert {d["node"] for d in out["decisions"]}.isdisjoint({"gate", "select"})
    (step,) = [t for t in out["trace"] if t.get("call") == "short_answer"]
    assert step["path"] == "off" and out["answer"] == long.rstrip(".")
