"""rfm_rag's relevance-only stop (feedback_mode=relevance) and the audit of the R-Feedback
model on the pools the graph recorded (`python -m lab rfm audit`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gaprag.graphs.rfm_rag.context import RELEVANCE_THRESHOLD, Context
from gaprag.graphs.rfm_rag.feedback_model.model import RelevanceJudge, RFeedbackMLP, sigmoid
from gaprag.stores.embeddings import HashingEmbedder
from gaprag.stores.store import Store
from lab.__main__ import main
from lab.rfm.pool_audit import (
    audit,
    bootstrap_aucs,
    bundled_records,
    gold_facts,
    is_complete,
    trace_pools,
)
from tests.methods.rfm_rag import QUESTION, fake_llm, make_graph


@pytest.fixture
def hashing_weights(tmp_path: Path) -> Path:
    """R-Feedback weights that name the hashing embedder (the test store's)."""
    path = tmp_path / "w.json"
    RFeedbackMLP.init(seed=0, embedder=HashingEmbedder().name).save(path)
    return path


class FixedRelevance:
    def __init__(self, g_f: float) -> None:
        self.g_f = g_f

    def relevance(self, question: str, sentences: list[str]) -> float:
        return self.g_f


def test_relevance_judge_stops_at_its_threshold_and_reports_sigmoid_of_g_f() -> None:
    judge = RelevanceJudge(FixedRelevance(0.6), threshold=0.6)
    result = judge.judge("q", [], ["a fact."], 0.0)
    assert result.sufficient and result.g_f == 0.6
    assert result.prob == pytest.approx(sigmoid(0.6), abs=1e-6)
    assert judge.prob_threshold == pytest.approx(sigmoid(0.6))
    assert (
        not RelevanceJudge(FixedRelevance(0.59), threshold=0.6).judge("q", [], ["x"], 0).sufficient
    )


def test_relevance_mode_is_a_setting_with_the_fitted_default() -> None:
    assert Context().relevance_threshold == RELEVANCE_THRESHOLD == 0.6
    assert Context().feedback_mode == "mlp"  # the shipped mode is unchanged


def test_relevance_mode_decides_on_g_f_and_records_its_decision(
    store: Store, hashing_weights: Path
) -> None:
    opts: dict[str, Any] = {"feedback_mode": "relevance", "rf_weights": str(hashing_weights)}
    out = make_graph(fake_llm(), store, relevance_threshold=0.0, **opts).invoke(
        {"question": QUESTION}
    )
    assert out["iterations"] == 1 and out["stop_reason"] == "sufficient"
    [decision] = out["decisions"]
    record = next(t for t in out["trace"] if t["node"] == "feedback_classifier")
    assert decision["path"] == "relevance" and decision["decision"] == "stop"
    assert decision["p"] == pytest.approx(sigmoid(record["g_f"]), abs=1e-6)
    assert decision["threshold"] == pytest.approx(sigmoid(0.0), abs=1e-6)
    never = make_graph(fake_llm(), store, relevance_threshold=1.01, **opts).invoke(
        {"question": QUESTION}
    )
    assert never["iterations"] == 3 and never["stop_reason"] == "max_iterations"
    assert [d["decision"] for d in never["decisions"]] == ["continue", "continue"]


def _record(dataset: str, start: int = 60) -> tuple[str, int, dict[str, Any]]:
    """A bundled calibration question (index >= 60) of ``dataset``."""
    for (name, qid), (i, record) in bundled_records().items():
        if name == dataset and i >= start and gold_facts(record):
            return qid, i, record
    raise AssertionError(f"no calibration question in {dataset}")


def test_gold_facts_hotpot_sentences_and_musique_steps() -> None:
    _, _, hotpot = _record("hotpotqa")
    facts = gold_facts(hotpot)
    assert len(facts) == len(hotpot["meta"]["supporting_facts"])
    title = hotpot["meta"]["supporting_facts"][0][0]
    assert facts[0][1] == f"{title} {facts[0][0]}"  # the sentence, and title + sentence
    _, _, musique = _record("musique")
    steps = musique["meta"]["question_decomposition"]
    assert len(gold_facts(musique)) == len(steps)


def test_a_pool_is_complete_only_when_every_fact_is_matched() -> None:
    facts = [["Paris is the capital of France."], ["Berlin is the capital of Germany."]]
    assert is_complete(["Paris is the capital of France.", "Berlin is Germany's capital."], facts)
    assert not is_complete(["Paris is the capital of France."], facts)
    assert not is_complete(["Rome is in Italy."], facts)


def _trace(dataset: str, qid: str, record: dict[str, Any], pools: list[list[str]],
           answers: list[str | None], prediction: str) -> dict[str, Any]:  # fmt: skip
    judged = [
        {"node": "feedback_classifier", "round": r + 1, "pool": pool, "pool_passages": []}
        for r, pool in enumerate(pools)
    ]
    return {
        "dataset": dataset,
        "id": qid,
        "method": "rfm_rag",
        "input": record["question"],
        "answers": record["answers"],
        "prediction": prediction,
        "iterations": len(pools),
        "trace": judged,
        "decisions": [
            {"node": "feedback_classifier", "round": r + 1, "answer": a}
            for r, a in enumerate(answers)
        ],
        "extra": {"entities": [], "evidence_pool": [{"text": s} for s in pools[-1]]},
    }


def test_trace_pools_label_complete_and_answer(tmp_path: Path) -> None:
    qid, index, record = _record("hotpotqa")
    gold = [fact[1] for fact in gold_facts(record)]
    trace = _trace("hotpotqa", qid, record, [["Nothing relevant here."], gold],
                   ["wrong", record["answers"][0]], record["answers"][0])  # fmt: skip
    pools = trace_pools(trace, (index, record))
    assert [(p.round, p.judged, p.complete, p.answer_ok) for p in pools] == [
        (1, True, 0, 0),
        (2, True, 1, 1),
    ]  # the final pool is the last judged one: listed once
    assert all(p.group == "calibration" for p in pools)
    no_answers = _trace("hotpotqa", qid, record, [["x."], gold], [None, None], "y")
    assert [p.answer_ok for p in trace_pools(no_answers, (index, record))] == [None, None]


def test_bootstrap_aucs_resample_questions_and_are_seeded() -> None:
    rng = np.random.default_rng(0)
    labels = np.tile([0.0, 1.0], 30)
    good = labels + rng.normal(0, 0.3, 60)
    scores = np.column_stack([good, rng.normal(0, 1, 60)])
    groups = [f"q{i // 2}" for i in range(60)]
    out = bootstrap_aucs(scores, labels, groups, n=200, seed=1)
    assert out["mlp"]["auc"] > 0.9 and out["mlp"]["ci95"][0] > 0.75
    assert out["mlp_minus_relevance"]["ci95"][0] > 0
    assert out == bootstrap_aucs(scores, labels, groups, n=200, seed=1)


def test_rfm_audit_cli_reports_both_labels(
    tmp_path: Path, hashing_weights: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "run" / "traces"
    runs.mkdir(parents=True)
    for n, dataset in enumerate(("hotpotqa", "2wikimultihopqa")):
        qid, _, record = _record(dataset)
        gold = [fact[1] for fact in gold_facts(record)]
        trace = _trace(dataset, qid, record, [["Unrelated words."], gold],
                       ["no", record["answers"][0]], record["answers"][0])  # fmt: skip
        (runs / f"t{n}.json").write_text(json.dumps(trace), encoding="utf-8")
    out = tmp_path / "audit.json"
    code = main(["rfm", "audit", "--runs", str(tmp_path / "run"), "--weights",
                 str(hashing_weights), "--bootstrap", "50", "--out", str(out)])  # fmt: skip
    assert code == 0
    report = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == report
    complete = report["groups"]["calibration"]["complete"]
    assert (complete["pools"], complete["questions"], complete["positive"]) == (4, 2, 2)
    assert set(complete) >= {"mlp", "relevance", "coverage", "mlp_minus_relevance"}
    assert report["groups"]["calibration"]["answer"]["positive"] == 2
    assert "evaluation" not in report["groups"]
    assert audit([tmp_path / "run"], hashing_weights, n=10) ["groups"]["all"]["answer"]["negative"] == 2  # fmt: skip
