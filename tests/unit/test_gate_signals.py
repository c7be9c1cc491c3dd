"""benchmarks/gate_signals.py: the signals it computes, its question plan and its resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult

from gaprag.datasets import Dataset, Example
from gaprag.errors import InputError
from gaprag.llm.client import LLM
from gaprag.stores import Store
from gaprag.stores.documents import Document
from gaprag.testing import ScriptedChatModel
from tests.scripts import load_script

gs = load_script("benchmarks/gate_signals.py")


class LogprobChat(ScriptedChatModel):
    """Replies as scripted; token i of every reply (split on spaces) has logprob -0.1 (i + 1)
    and one alternative at -3."""

    def _result(self, messages: list[BaseMessage], **kwargs: Any) -> ChatResult:
        result = super()._result(messages, **kwargs)
        msg = result.generations[0].message
        content = [
            {
                "token": tok,
                "logprob": -0.1 * (i + 1),
                "top_logprobs": [
                    {"token": tok, "logprob": -0.1 * (i + 1)},
                    {"token": "x", "logprob": -3.0},
                ],
            }
            for i, tok in enumerate(str(msg.content).split(" "))
        ]
        msg.response_metadata["logprobs"] = {"content": content}
        return result


def _dataset(tmp_path: Path, name: str, docs: list[Document], n: int = 63) -> Dataset:
    examples = [
        Example(
            id=f"{name}-{i}",
            question="What is the capital of France?" if i % 2 else "Who wrote Hamlet?",
            answers=["Paris"] if i % 2 else ["William Shakespeare"],
            supporting=["fr"] if i % 2 else ["hamlet"],
            paragraphs=docs,
        )
        for i in range(n)
    ]
    return Dataset(name=name, path=tmp_path / f"{name}.jsonl", examples=examples, sha256="x")


def _bench_maker(store: Store, chat: ScriptedChatModel) -> tuple[Any, Any]:
    recorder = gs.CallRecorder()
    llm = LLM(gs.with_logprobs(chat, recorder))

    def make(ds: Dataset) -> Any:
        return gs.Bench.build(ds, llm, recorder, store)

    return make, recorder


def test_answer_confidence_skips_whitespace_and_takes_first_token_margin() -> None:
    content = [
        {"token": " ", "logprob": -5.0, "top_logprobs": []},
        {
            "token": "Paris",
            "logprob": -0.2,
            "top_logprobs": [
                {"token": "Lyon", "logprob": -1.7},
                {"token": "Paris", "logprob": -0.2},
            ],
        },
        {"token": " France", "logprob": -1.0, "top_logprobs": []},
        {"token": "\n", "logprob": -9.0},
    ]
    conf = gs.answer_confidence(content)
    assert conf["first"] == pytest.approx(-0.2)
    assert conf["first_margin"] == pytest.approx(1.5)
    assert conf["mean"] == pytest.approx(-0.6)
    assert conf["min"] == pytest.approx(-1.0)
    assert conf["tokens"] == 2
    assert gs.answer_confidence(None)["mean"] is None


def test_agreement_and_score_margin() -> None:
    assert gs.agreement("The Paris", "paris") == {"em": 1.0, "f1": 1.0}
    assert gs.agreement("Lyon", "Paris")["em"] == 0.0
    margin = gs.score_margin([{"score": 0.9}, {"score": 0.6}, {"score": 0.1}])
    assert margin["top1"] == pytest.approx(0.9) and margin["margin"] == pytest.approx(0.3)
    assert gs.score_margin([{"score": 0.5}])["margin"] is None


def test_rank_auc_counts_ties_as_half_and_matches_sklearn() -> None:
    labels = [True, False, True, False, True]
    scores = [0.9, 0.1, 0.5, 0.5, 0.2]
    assert gs.rank_auc([True, False], [1.0, 0.0]) == 1.0
    assert gs.rank_auc([True, False], [0.0, 1.0]) == 0.0
    assert gs.rank_auc([True, False], [0.5, 0.5]) == 0.5
    assert gs.rank_auc([True, True], [0.5, 0.1]) is None
    # pairs (pos, neg): (0.9,0.1)1 (0.9,0.5)1 (0.5,0.1)1 (0.5,0.5).5 (0.2,0.1)1 (0.2,0.5)0
    assert gs.rank_auc(labels, scores) == pytest.approx(4.5 / 6)
    assert gs.auc(labels, scores) == pytest.approx(4.5 / 6)
    lo, hi = gs.bootstrap_auc(labels, scores, resamples=200)
    assert lo is not None and hi is not None and lo <= 4.5 / 6 <= hi


def test_measure_records_answers_logprobs_agreements_and_costs(
    tmp_path: Path, store: Store, tiny_docs: list[Document]
) -> None:
    chat = LogprobChat(rules=[("(no passages)", "London city")], default="Paris")
    make, _ = _bench_maker(store, chat)
    ds = _dataset(tmp_path, "toy", tiny_docs)
    row = gs.measure(make(ds), ds.examples[61], 61)
    assert row["rag"]["answer"] == "Paris" and row["rag"]["f1"] == 1.0 and row["label"] is True
    assert row["rag"]["logprobs_returned"] is True
    assert row["signals"]["lp_first"] == pytest.approx(-0.1)
    assert row["signals"]["lp_first_margin"] == pytest.approx(2.9)
    # closed book: "London city" -> two tokens at -0.1 and -0.2, disagrees with "Paris"
    closed = row["variants"]["closed_book"]
    assert closed["answer"] == "London city" and closed["llm_calls"] == 1
    assert closed["confidence"]["mean"] == pytest.approx(-0.15)
    assert row["signals"]["agree_closed_book_em"] == 0.0
    assert row["signals"]["agree_top3_em"] == 1.0
    top3 = row["variants"]["top3"]
    assert top3["llm_calls"] == 1 and top3["reused"] is False and len(top3["evidence_ids"]) == 3
    assert row["settings"]["top_k"] == 5 and row["settings"]["retrieval_mode"] == "hybrid"
    # every variant that asked the model shows up in the cost; reused ones cost nothing
    for name in ("bm25", "dense"):
        v = row["variants"][name]
        assert v["llm_calls"] == (0 if v["reused"] else 1)
    prompts = chat.prompts()
    assert sum("(no passages)" in p for p in prompts) == 1
    assert row["retrieval"]["hybrid"]["margin"] is not None


def test_plan_interleaves_sets_and_refuses_reserved_questions(
    tmp_path: Path, tiny_docs: list[Document]
) -> None:
    a, b = _dataset(tmp_path, "a", tiny_docs), _dataset(tmp_path, "b", tiny_docs, n=61)
    order = [(ds.name, i) for ds, i, _ in gs.plan([a, b], 60, 3)]
    assert order == [("a", 60), ("b", 60), ("a", 61), ("a", 62)]
    with pytest.raises(InputError, match="reserved"):
        list(gs.plan([a], 59, 2))


def test_run_resumes_after_a_kill_mid_line(
    tmp_path: Path, store: Store, tiny_docs: list[Document]
) -> None:
    chat = LogprobChat(default="Paris")
    make, _ = _bench_maker(store, chat)
    sets = [_dataset(tmp_path, "a", tiny_docs), _dataset(tmp_path, "b", tiny_docs)]
    out = tmp_path / "rows.jsonl"
    assert gs.run(sets, start=60, per_set=1, out=out, resume=False, make_bench=make) == 2
    with out.open("a", encoding="utf-8") as fh:
        fh.write('{"dataset": "a", "id": "a-61", "rag": {')  # a kill mid-line
    with pytest.raises(InputError, match="--resume"):
        gs.run(sets, start=60, per_set=2, out=out, resume=False, make_bench=make)
    calls_before = len(chat.calls)
    with pytest.warns(UserWarning, match="incomplete last line"):
        assert gs.run(sets, start=60, per_set=2, out=out, resume=True, make_bench=make) == 2
    rows = gs.read_rows(out)
    assert [(r["dataset"], r["index"]) for r in rows] == [
        ("a", 60), ("b", 60), ("a", 61), ("b", 61),
    ]  # fmt: skip
    assert len(chat.calls) > calls_before
    summary = gs.summarize(rows)
    assert "| lp_mean |" in summary and "| pooled | 4 | 60-61 |" in summary


def test_with_logprobs_asks_an_openai_client_for_logprobs() -> None:
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    recorder = gs.CallRecorder()
    chat = ChatOpenAI(
        base_url="http://127.0.0.1:9/v1", model="m", api_key=SecretStr("k"), temperature=0.0
    )
    asked = gs.with_logprobs(chat, recorder)
    assert asked.logprobs is True and asked.top_logprobs == gs.TOP_LOGPROBS
    assert asked.callbacks == [recorder] and asked.temperature == 0.0
    assert chat.logprobs is None  # the original client is left as it was
