"""standard_rag: wiring, evidence, usage, settings."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gaprag import build_graph, list_methods
from gaprag.errors import GapragError
from gaprag.llm.client import LLM
from gaprag.stores import HashingEmbedder, Store
from gaprag.stores.documents import Document
from gaprag.testing import ScriptedChatModel, scripted


def test_answers_from_top_k_with_usage(store: Store) -> None:
    fake = scripted("Answer: William Shakespeare.")
    graph = build_graph("standard_rag", llm=fake, retriever=store, top_k=2, retrieval_mode="hybrid")
    out = graph.invoke({"question": "Who wrote Hamlet?"})
    assert out["answer"] == "William Shakespeare"
    assert out["stop_reason"] == "answered" and out["iterations"] == 1
    assert out["queries"] == ["Who wrote Hamlet?"]
    assert len(out["evidence"]) == 2 and out["evidence"][0]["id"] == "hamlet"
    assert out["evidence"][0]["round"] == 1 and out["evidence"][0]["source"] == "hybrid"
    usage = out["usage"]
    assert usage["llm_calls"] == 1 and usage["retrieval_calls"] == 1
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0 and usage["wall_s"] > 0
    prompt = fake.prompts()[0]
    assert prompt.rstrip().endswith("Question: Who wrote Hamlet?\nAnswer:")  # variable part last
    assert "[1] Hamlet:" in prompt


def test_run_context_overrides_build_defaults(store: Store) -> None:
    graph = build_graph(
        "standard_rag", llm=scripted(default="x"), retriever=store, top_k=1, retrieval_mode="bm25"
    )
    assert len(graph.invoke({"question": "capital city tower"})["evidence"]) == 1
    out = graph.invoke({"question": "capital city tower"}, context={"top_k": 3})
    assert len(out["evidence"]) == 3
    assert out["evidence"][0]["source"] == "bm25"  # build-time mode kept


def test_passages_are_truncated(tmp_path: Path) -> None:
    docs: list[Document] = [{"id": "long", "title": "L", "text": " ".join(["word"] * 500)}]
    st = Store.build(tmp_path / "l", docs, embedder=HashingEmbedder(), progress=False)
    fake = scripted("x")
    build_graph(
        "standard_rag", llm=fake, retriever=st, max_passage_words=20, retrieval_mode="bm25"
    ).invoke({"question": "word"})
    assert fake.prompts()[0].count("word") < 40


def test_unknown_option_is_a_clear_error() -> None:
    with pytest.raises(GapragError) as err:
        build_graph("standard_rag", llm=scripted(), top_kk=3)
    assert "top_kk" in str(err.value) and "top_k" in err.value.hint


def test_registry() -> None:
    assert "standard_rag" in list_methods()
    with pytest.raises(GapragError):
        build_graph("nope")


PLAIN = "Use the passages below to answer the question."  # plain RAG's answer prompt


def _scored_model() -> ScriptedChatModel:
    tokens = [[("Paris", -0.1), ("Lyon", -3.0)], [(".", -0.3), ("!", -2.0)]]
    return ScriptedChatModel(rules=[(PLAIN, "Paris.")], reply_logprobs={"Paris.": tokens})


def test_the_answer_records_its_confidence_from_token_logprobs(store: Store) -> None:
    llm = LLM(_scored_model(), supports_logprobs=True)
    out = build_graph("standard_rag", llm=llm, retriever=store).invoke({"question": "Capital?"})
    (decision,) = out["decisions"]
    assert out["answer"] == "Paris" and out["usage"]["llm_calls"] == 1
    assert decision["node"] == "answer" and decision["decision"] == "stop"
    assert decision["path"] == "logprobs" and decision["answer"] == "Paris"
    assert decision["p"] == pytest.approx(math.exp((-0.1 - 0.3) / 2), rel=1e-4)


def test_without_logprobs_the_answer_is_recorded_without_a_probability(store: Store) -> None:
    llm = LLM(_scored_model(), supports_logprobs=False)
    out = build_graph("standard_rag", llm=llm, retriever=store).invoke({"question": "Capital?"})
    (decision,) = out["decisions"]
    assert out["answer"] == "Paris"
    assert decision["p"] is None and decision["path"] == "no-logprobs"


def test_plain_rags_request_is_the_gates_request(store: Store) -> None:
    plain, gated = _scored_model(), _scored_model()
    build_graph("standard_rag", llm=LLM(plain, supports_logprobs=True), retriever=store).invoke(
        {"question": "Capital?"}
    )
    build_graph(
        "missing_knowledge", llm=LLM(gated, supports_logprobs=True), retriever=store,
        gate="logprob_mean", gate_threshold=-5.0,
    ).invoke({"question": "Capital?"})  # fmt: skip
    assert gated.calls[0]["messages"] == plain.calls[0]["messages"]
    assert gated.calls[0]["kwargs"] == plain.calls[0]["kwargs"]
