"""The shared gate: plain RAG's answer first, the loop only when that answer is unsure."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from gaprag import build_graph
from gaprag.datasets import load_dataset
from gaprag.errors import InputError
from gaprag.graphs import ITERATIVE, METHODS
from gaprag.graphs.standard_rag.context import Context as PlainContext
from gaprag.llm.client import LLM, TokenLogprob
from gaprag.metrics import normalize_answer
from gaprag.nodes.choice import agrees
from gaprag.nodes.gate import (
    AGREEMENT_K,
    GATE_STOP,
    PLAIN_ANSWER_MAX_TOKENS,
    PLAIN_MODE,
    PLAIN_PASSAGE_WORDS,
    PLAIN_TOP_K,
    logprob_signals,
    probability,
    threshold_setting,
)
from gaprag.stores.store import Store
from gaprag.testing import ScriptedChatModel

Q = "What is the capital of France?"
PLAIN = "Use the passages below to answer the question."  # plain RAG's answer prompt
SURE = [[("Paris", -0.05), ("Lyon", -3.2)]]
UNSURE = [[("Paris", -1.6), ("Lyon", -1.7)], [("ian", -2.4), (" city", -2.5)]]


def plain_model(
    tokens: list[list[tuple[str, float]]], reply: str = "Paris", **kw: Any
) -> ScriptedChatModel:
    return ScriptedChatModel(
        rules=[(PLAIN, reply)], reply_logprobs={reply: tokens}, default="Unknown", **kw
    )


def gate_only(
    method: str, store: Store, model: ScriptedChatModel, *, logprobs: bool = True, **options: Any
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Run the question up to the gate's routing: (the state then, the nodes it leads to)."""
    graph = build_graph(
        method, llm=LLM(model, supports_logprobs=logprobs), retriever=store,
        checkpointer=InMemorySaver(), **options,
    )  # fmt: skip
    config: Any = {"configurable": {"thread_id": "t"}}
    graph.invoke({"question": Q}, config, interrupt_after=["gate"])
    snapshot = graph.get_state(config)
    return dict(snapshot.values), tuple(snapshot.next)


def test_every_iterative_method_starts_with_the_gate(store: Store) -> None:
    for method in METHODS:
        graph = build_graph(method, llm=plain_model(SURE), retriever=store)
        assert ("gate" in graph.nodes) == (method in ITERATIVE), method


@pytest.mark.parametrize("method", ITERATIVE)
def test_a_confident_plain_answer_ends_the_question_at_the_gate(method: str, store: Store) -> None:
    model = plain_model(SURE)
    graph = build_graph(
        method, llm=LLM(model, supports_logprobs=True), retriever=store,
        gate="logprob_mean", gate_threshold=-0.5,
    )  # fmt: skip
    out = graph.invoke({"question": Q})
    assert out["answer"] == "Paris" and out["stop_reason"] == GATE_STOP
    assert out["usage"]["llm_calls"] == 1 and out["iterations"] == 1
    assert out["queries"] == [Q] and len(out["evidence"]) == PLAIN_TOP_K
    assert out["shown_ids"] == [e["id"] for e in out["evidence"]]
    (decision,) = out["decisions"]
    assert decision["node"] == "gate" and decision["decision"] == "stop"
    assert decision["path"] == "logprobs" and decision["answer"] == "Paris"
    assert decision["p"] == pytest.approx(math.exp(-0.05), rel=1e-4)
    assert decision["threshold"] == pytest.approx(math.exp(-0.5))


@pytest.mark.parametrize("method", ITERATIVE)
def test_an_unsure_plain_answer_runs_the_method_loop(method: str, store: Store) -> None:
    state, following = gate_only(
        method, store, plain_model(UNSURE), gate="logprob_mean", gate_threshold=-0.5
    )
    assert following not in {(), ("short_answer",)} and not state.get("stop_reason")
    (decision,) = state["decisions"]
    assert decision["decision"] == "continue"
    assert decision["p"] == pytest.approx(math.exp((-1.6 - 2.4) / 2), rel=1e-4)
    # plain RAG's passages stay for the reader; the method's own evidence is untouched
    assert len(state["gate_passages"]) == PLAIN_TOP_K and state.get("evidence", []) == []


@pytest.mark.parametrize("method", ITERATIVE)
def test_the_gate_off_goes_straight_to_the_loop_without_a_call(method: str, store: Store) -> None:
    model = plain_model(SURE)
    state, following = gate_only(method, store, model)
    assert following not in {(), ("short_answer",)} and model.calls == []
    assert not state.get("decisions") and model.calls == []


def test_the_margin_signal_is_the_first_tokens_top_two_gap(store: Store) -> None:
    stop, _ = gate_only(
        "ircot", store, plain_model(SURE), gate="logprob_margin", gate_threshold=2.0
    )
    go, _ = gate_only(
        "ircot", store, plain_model(UNSURE), gate="logprob_margin", gate_threshold=2.0
    )
    assert stop["stop_reason"] == GATE_STOP and not go.get("stop_reason")
    assert go["decisions"][0]["p"] == pytest.approx(1 - math.exp(-0.1), rel=1e-3)


def test_the_min_signal_is_the_weakest_token(store: Store) -> None:
    state, _ = gate_only("iterkey", store, plain_model(UNSURE), gate="logprob_min")
    assert state["decisions"][0]["p"] == pytest.approx(math.exp(-2.4), rel=1e-4)
    record = next(t for t in state["trace"] if t.get("call") == "gate")
    assert record["signal"] == "logprob_min" and record["value"] == pytest.approx(-2.4)
    assert record["logprob_mean"] == pytest.approx(-2.0)


def _by_cut(top3: str, all5: str) -> Any:
    """A reply for plain RAG's prompt: ``top3`` when it shows three passages, else ``all5``."""

    def reply(messages: list[Any]) -> str:
        return all5 if "[4]" in str(messages[-1].content) else top3

    return reply


@pytest.mark.parametrize(("top3", "stops"), [("paris.", True), ("Lyon", False)])
def test_without_logprobs_the_gate_falls_back_to_agreement(
    store: Store, top3: str, stops: bool
) -> None:
    model = ScriptedChatModel(rules=[(PLAIN, _by_cut(top3, "Paris"))], default="Unknown")
    state, following = gate_only(
        "migres", store, model, logprobs=False, gate="logprob_mean", gate_threshold=-0.5
    )
    (decision,) = state["decisions"]
    assert decision["path"] == "agreement_fallback" and len(model.calls) == 2
    assert decision["decision"] == ("stop" if stops else "continue")
    assert (state.get("stop_reason") == GATE_STOP) is stops
    assert (following == ("short_answer",)) is stops


def test_a_reply_without_logprobs_also_falls_back(store: Store) -> None:
    model = ScriptedChatModel(rules=[(PLAIN, "Paris")], default="Unknown")  # no logprobs
    state, _ = gate_only("rfm_rag", store, model, gate="logprob_margin")
    assert state["decisions"][0]["path"] == "agreement_fallback"
    assert state["stop_reason"] == GATE_STOP  # the same answer from 3 and from 5 passages


def test_the_agreement_signal_compares_the_top_three_with_all_passages(store: Store) -> None:
    model = ScriptedChatModel(rules=[(PLAIN, _by_cut("Lyon", "Paris"))], default="Unknown")
    state, _ = gate_only("missing_knowledge", store, model, gate="agreement")
    (decision,) = state["decisions"]
    assert decision["path"] == "agreement" and decision["p"] == 0.0
    assert decision["decision"] == "continue" and len(model.calls) == 2
    assert "[4]" not in model.prompts()[1] and "[3]" in model.prompts()[1]


def test_a_calibration_run_records_the_gate_but_never_stops_there(store: Store) -> None:
    state, following = gate_only(
        "iterkey", store, plain_model(SURE), gate="logprob_mean", calibration=True
    )
    (decision,) = state["decisions"]
    assert decision["decision"] == "continue" and decision["answer"] == "Paris"
    assert decision["p"] >= decision["threshold"]
    assert following != ("short_answer",) and not state.get("stop_reason")


def test_the_gate_is_a_run_time_setting(store: Store) -> None:
    model = plain_model(SURE)
    graph = build_graph("ircot", llm=LLM(model, supports_logprobs=True), retriever=store)
    out = graph.invoke({"question": Q}, context={"gate": "logprob_mean"})
    assert out["stop_reason"] == GATE_STOP


def test_an_unknown_gate_is_refused(store: Store) -> None:
    with pytest.raises(InputError, match="gate"):
        build_graph("ircot", llm=plain_model(SURE), retriever=store, gate="sometimes")


def test_signals_from_token_logprobs() -> None:
    tokens = [
        TokenLogprob(" ", -0.01, [(" ", -0.01)]),
        TokenLogprob("Par", -0.2, [("Par", -0.2), ("Lon", -1.9)]),
        TokenLogprob("is", -0.6, [("is", -0.6)]),
    ]
    signals = logprob_signals(tokens)
    assert signals == pytest.approx(
        {"logprob_mean": -0.4, "logprob_min": -0.6, "logprob_margin": 1.7}
    )
    assert logprob_signals([TokenLogprob(" ", -0.1)]) is None
    # one alternative only: no margin (the gate then falls back to agreement)
    assert "logprob_margin" not in (logprob_signals([TokenLogprob("x", -0.1, [("x", -0.1)])]) or {})


@pytest.mark.parametrize(
    ("signal", "value"), [("logprob_mean", -0.7), ("logprob_min", -2.0), ("logprob_margin", 1.5)]
)
def test_a_threshold_setting_and_its_probability_are_inverse(signal: Any, value: float) -> None:
    p = probability(signal, value)
    assert 0.0 < p < 1.0
    assert threshold_setting(signal, p) == pytest.approx(value)
    # a higher signal is a higher probability: stopping on p >= t is stopping on the signal
    assert probability(signal, value + 0.1) > p


def test_answers_agree_after_normalisation() -> None:
    assert agrees("The Eiffel Tower.", "eiffel tower")
    assert not agrees("Paris", "Lyon") and not agrees("", "")


def test_non_ascii_answers_agree_only_when_they_are_the_same_answer() -> None:
    """Every answer of the bundled medqa_zh set: each agrees with itself (punctuation and
    width aside) and with no other answer of the set."""
    answers = sorted({a for ex in load_dataset("medqa_zh").examples for a in ex.answers})
    assert len(answers) > 50
    assert all(normalize_answer(a) for a in answers)
    for a, b in itertools.pairwise(answers):
        assert agrees(a, f"{a}。") and not agrees(a, b), (a, b)


def test_the_gates_agreement_signal_tells_two_chinese_answers_apart(store: Store) -> None:
    """The agreement signal on non-ASCII answers: two different answers are a disagreement."""
    for other, p in (("慢波睡眠", 0.0), ("缺铁性贫血。", 1.0)):
        model = ScriptedChatModel(rules=[(PLAIN, _by_cut(other, "缺铁性贫血"))], default="x")
        state, _ = gate_only("missing_knowledge", store, model, gate="agreement")
        (decision,) = state["decisions"]
        assert decision["path"] == "agreement" and decision["p"] == p, other


def test_the_gate_retrieves_as_plain_rag_does() -> None:
    plain = PlainContext()
    assert (plain.top_k, plain.retrieval_mode) == (PLAIN_TOP_K, PLAIN_MODE)
    assert plain.max_passage_words == PLAIN_PASSAGE_WORDS
    assert plain.answer_max_tokens == PLAIN_ANSWER_MAX_TOKENS


def long_doc(key: str, title: str) -> dict[str, str]:
    """A passage of 300 numbered words, then a sentence about ``title``: a cut after n words
    ends at word n."""
    words = " ".join(f"{key}{i}" for i in range(1, 301))
    return {"id": key, "title": title, "text": f"{words} {title} is in France."}


@pytest.fixture
def long_store(tmp_path: Path) -> Store:
    """Six passages longer than any method's passage cut."""
    from gaprag.stores.embeddings import HashingEmbedder

    docs = [long_doc(f"d{n}x", f"Place {n}") for n in range(6)]
    return Store.build(tmp_path / "long", docs, embedder=HashingEmbedder(), progress=False)


def first_request(method: str, store: Store, **options: Any) -> dict[str, Any]:
    """The messages and request settings of ``method``'s first call on the question."""
    model = plain_model(UNSURE)
    graph = build_graph(
        method, llm=LLM(model, supports_logprobs=True), retriever=store,
        checkpointer=InMemorySaver(), **options,
    )  # fmt: skip
    config: Any = {"configurable": {"thread_id": "t"}}
    graph.invoke({"question": Q}, config, interrupt_after=["gate", "generate_answer"])
    call = model.calls[0]
    return {"messages": call["messages"], **call["kwargs"]}


@pytest.mark.parametrize("method", ITERATIVE)
def test_the_gate_sends_exactly_plain_rags_answer_request(method: str, long_store: Store) -> None:
    plain = first_request("standard_rag", long_store)
    assert plain["max_tokens"] == PLAIN_ANSWER_MAX_TOKENS and plain["logprobs"]
    # whatever the method's own passage cut and answer cap (its defaults, or others)
    assert first_request(method, long_store, gate="logprob_mean") == plain
    other = {"max_passage_words": 60, "answer_max_tokens": 20}
    assert first_request(method, long_store, gate="logprob_mean", **other) == plain


def test_the_agreement_calls_use_plain_rags_cut_and_cap(long_store: Store) -> None:
    model = ScriptedChatModel(rules=[(PLAIN, "Paris")], default="Unknown")  # no logprobs
    state, _ = gate_only(
        "ircot", long_store, model, gate="logprob_mean", max_passage_words=60,
        answer_max_tokens=20,
    )  # fmt: skip
    assert state["decisions"][0]["path"] == "agreement_fallback" and len(model.calls) == 2
    for call, shown in zip(model.calls, (PLAIN_TOP_K, AGREEMENT_K), strict=True):
        prompt = call["messages"][-1][1]
        assert call["kwargs"]["max_tokens"] == PLAIN_ANSWER_MAX_TOKENS
        assert prompt.count("x150 ...") == shown and "x151" not in prompt


def test_an_eval_variant_compares_gated_and_ungated_runs() -> None:
    from gaprag.eval.runner import plan_methods

    keys, methods, options = plan_methods(
        ["migres"], ["gated=migres:gate=logprob_mean,gate_threshold=-0.5"], [], None
    )
    assert keys == ["migres", "gated"] and methods["gated"] == "migres"
    assert options["gated"]["gate"] == "logprob_mean"
    assert options["gated"]["gate_threshold"] == -0.5
    assert options["migres"].get("gate", "off") == "off"


# -- calibration: `gaprag calibrate --gate SIGNAL` -------------------------------------------
def test_a_gate_calibration_on_reported_questions_is_refused(store: Store) -> None:
    from gaprag.eval.calibrate import calibrate

    model = plain_model(SURE)
    with pytest.raises(InputError, match="reserved"):
        calibrate(
            model="scripted", methods=["ircot"], datasets=["hotpotqa"], start=10, limit=2,
            gate="logprob_mean", llm=model, progress=False,
        )  # fmt: skip
    assert model.calls == []  # refused before anything ran


def test_a_gate_calibration_needs_a_known_signal_and_an_iterative_method() -> None:
    from gaprag.eval.calibrate import calibrate

    with pytest.raises(InputError, match="gate signal"):
        calibrate(model="m", methods=["ircot"], gate="vibes", run=False)
    with pytest.raises(InputError, match="standard_rag"):
        calibrate(model="m", methods=["standard_rag"], gate="logprob_mean", run=False)


def gate_row(p: float, plain: str, f1: float, calls: int, path: str = "logprobs") -> Any:
    decision = {"node": "gate", "round": 0, "decision": "continue", "p": p, "path": path}
    return {
        "method": "ircot", "question": "Q?", "answers": ["Paris"], "f1": f1,
        "llm_calls": calls, "decisions": [{**decision, "answer": plain}],
    }  # fmt: skip


def test_the_gate_replay_stops_confident_questions_with_plain_rags_answer() -> None:
    from gaprag.eval.calibrate import gate_replay

    rows = [gate_row(0.9, "Paris", 0.0, 5), gate_row(0.2, "Lyon", 1.0, 5)]
    loop_all = gate_replay(rows, 1.01)
    assert (loop_all.f1, loop_all.llm_calls, loop_all.stop_rate) == (0.5, 5.0, 0.0)
    gated = gate_replay(rows, 0.5)  # the first stops (right, 1 call), the second loops
    assert (gated.f1, gated.llm_calls, gated.stop_rate) == (1.0, 3.0, 0.5)
    agreement = gate_replay([gate_row(1.0, "Paris", 0.0, 5, "agreement")], 0.5)
    assert agreement.llm_calls == 2.0


def test_the_gate_calibration_writes_the_signal_and_its_threshold(
    tmp_path: Path, store: Store
) -> None:
    from gaprag.eval.calibrate import gate_curves, write_profile

    rows = [gate_row(0.9, "Paris", 0.0, 5), gate_row(0.2, "Lyon", 1.0, 5)]
    curves = gate_curves(rows, ["ircot"], "logprob_mean")
    chosen = curves["ircot"]["chosen"]
    assert 0.2 < chosen["threshold"] <= 0.9 and chosen["stop_rate"] == 0.5
    assert curves["ircot"]["profile"] == {
        "gate": "logprob_mean",
        "gate_threshold": round(math.log(chosen["threshold"]), 4),
    }
    never = gate_curves([gate_row(0.9, "Lyon", 1.0, 3)], ["ircot"], "logprob_mean")
    assert never["ircot"]["profile"] == {"gate": "off"}
    path = tmp_path / "m.toml"
    write_profile(path, "m", {}, {"date": "today"}, gate=curves)
    text = path.read_text()
    assert 'gate = "logprob_mean"' in text and "gate_threshold = " in text
    # a graph built with that profile is gated
    llm = LLM(plain_model(SURE), supports_logprobs=True)
    graph = build_graph("ircot", llm=llm, retriever=store, profile=str(path))
    assert graph.invoke({"question": Q})["stop_reason"] == GATE_STOP


class RefusesLogprobs(ScriptedChatModel):
    """A chat model whose endpoint rejects a request for logprobs."""

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        if kw.get("logprobs"):
            raise ValueError("logprobs are not supported")
        return super()._generate(messages, stop, run_manager, **kw)


def test_an_endpoint_that_refuses_logprobs_is_not_asked_again(store: Store) -> None:
    llm = LLM(RefusesLogprobs(rules=[(PLAIN, "Paris")]), supports_logprobs=True)
    graph = build_graph("ircot", llm=llm, retriever=store, gate="logprob_mean")
    out = graph.invoke({"question": Q})
    assert llm.supports_logprobs is False and out["stop_reason"] == GATE_STOP
    assert out["decisions"][0]["path"] == "agreement_fallback"
    assert any(t.get("event") == "logprobs_unavailable" for t in out["trace"])
