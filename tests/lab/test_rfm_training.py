"""RFM-RAG's R-Feedback model in the lab (lab.rfm): labelled examples, training and its
warnings, the monotone network, training on the graph's own pools, `python -m lab rfm train`,
and the graph with trained weights."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gaprag.errors import GapragError, InputError
from gaprag.graphs.rfm_rag.feedback_model.features import (
    FeatureExtractor,
)
from gaprag.graphs.rfm_rag.feedback_model.model import (
    RFeedbackMLP,
    monotonicity_violations,
)
from gaprag.llm.client import LLM
from gaprag.stores import Document, HashingEmbedder, Store
from lab.__main__ import main
from lab.rfm.examples import (
    EVAL_RESERVED,
    build_splits,
    graph_pool_samples,
    graph_pool_splits,
    heuristic_entities,
    load_records,
    question_material,
    refuse_evaluation_questions,
)
from lab.rfm.train import (
    auc,
    epoch_budget,
    run_training,
    train_mlp,
    training_warnings,
)
from tests.methods.rfm_rag import (
    DOCS,
    FACT_FILM,
    FACT_MOTHER,
    QUESTION,
    ProbJudge,
    SeqJudge,
    fake_llm,
    make_graph,
    yes_logprobs,
)


@pytest.fixture
def store_docs() -> list[Document]:
    """The ``store`` fixture's documents."""
    return DOCS


# -- feedback modes ------------------------------------------------------------------------------
def _separable(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    pos = np.column_stack([rng.normal(0.9, 0.05, n), rng.normal(3.0, 0.5, n)])
    neg = np.column_stack([rng.normal(0.2, 0.05, n), rng.normal(-2.0, 0.5, n)])
    return np.vstack([pos, neg]), np.concatenate([np.ones(n), np.zeros(n)])


def test_mlp_mode_with_trained_weights(store: Store, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x, y = _separable(200, rng)
    x[:, 1] = np.where(y == 1, 0.6, 0.05)  # G_f on the hashing embedder's cosine scale
    model = train_mlp(x, y, x, y, epochs=30, embedder=HashingEmbedder().name).model
    path = tmp_path / "w.json"
    model.save(path)
    fake = fake_llm()
    out = make_graph(fake, store, feedback_mode="mlp", rf_weights=str(path)).invoke({"question": QUESTION})  # fmt: skip
    record = next(t for t in out["trace"] if t["node"] == "feedback_classifier")
    assert record["s_f"] == 1.0 and isinstance(record["g_f"], float) and record["g_f"] > 0
    assert out["feedback_prob"] is not None and 0.0 <= out["feedback_prob"] <= 1.0
    assert out["sufficient"] == (out["feedback_prob"] >= 0.5)
    # an always-sufficient threshold of 0 stops after one round
    out = make_graph(fake_llm(), store, feedback_mode="mlp", rf_weights=str(path), rf_threshold=0.0).invoke({"question": QUESTION})  # fmt: skip
    assert out["iterations"] == 1 and out["stop_reason"] == "sufficient"


def _fixture_records(n: int = 20) -> list[dict[str, Any]]:
    records = []
    for i in range(n):
        paras = [
            {"id": f"s{i}a", "title": f"Film {i}", "text": f"Film {i} was directed by Person {i}. It was shot in colour."},
            {"id": f"s{i}b", "title": f"Person {i}", "text": f"Person {i} was born in City {i}."},
            {"id": f"d{i}a", "title": "Other", "text": f"Unrelated fact {i} one. Unrelated fact {i} two."},
            {"id": f"d{i}b", "title": "Other2", "text": f"Noise {i} alpha. Noise {i} beta. Noise {i} gamma."},
        ]  # fmt: skip
        records.append({
            "id": f"q{i}", "question": f"Where was the director of Film {i} born?",
            "supporting": [f"s{i}a", f"s{i}b"], "paragraphs": paras,
        })  # fmt: skip
    return records


def test_dataset_builder() -> None:
    records = _fixture_records()
    data = build_splits(records, n_train=200, n_val=40, n_test=40, n_cal=40, seed=3)
    assert (len(data.train), len(data.val), len(data.test), len(data.cal)) == (200, 40, 40, 40)
    support = {r["id"]: question_material(r) for r in records}
    for split in (data.train, data.val, data.test, data.cal):
        assert sum(s.label for s in split) == len(split) // 2
        kinds = [s.kind for s in split]
        assert kinds.count("partial") == kinds.count("irrelevant") == len(split) // 4
        for s in split:
            m = support[s.qid]
            assert m is not None
            gold = set(m.support_sentences)
            inside = gold & set(s.sentences)
            if s.label == 1:
                assert inside == gold
            elif s.kind == "partial":
                assert 0 < len(inside) < len(gold) and len(set(s.sentences) - gold) >= 1
            else:
                assert inside == set()
    qids = [{s.qid for s in split} for split in (data.train, data.val, data.test, data.cal)]
    for i in range(4):
        for j in range(i + 1, 4):
            assert not qids[i] & qids[j]
    defaults = build_splits.__kwdefaults__
    assert defaults["n_train"] == 10_000 and defaults["n_val"] == 800


def test_training_on_separable_features() -> None:
    rng = np.random.default_rng(0)
    x, y = _separable(300, rng)
    xv, yv = _separable(100, rng)
    result = train_mlp(x, y, xv, yv, epochs=20, patience=20)
    acc = float(np.mean((result.model.probs(xv) >= 0.5) == yv))
    assert acc >= 0.95
    assert result.history[-1]["train_loss"] < result.history[0]["train_loss"]
    assert auc(result.model.probs(xv), yv) > 0.99
    assert auc(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])) == 0.75


def test_a_small_training_set_gets_enough_steps() -> None:
    # ~80 calibration pools are 2 batches an epoch: 100 epochs would be 200 steps
    assert epoch_budget(84) == 1000 and epoch_budget(84, 3) == 3
    assert epoch_budget(10_000) == 100  # the paragraph source keeps its 100 epochs
    rng = np.random.default_rng(0)
    x, y = _separable(42, rng)  # 84 examples
    result = train_mlp(x, y, x, y, patience=2000)
    assert len(result.history) == 1000 and result.history[-1]["train_loss"] < 0.05


def test_training_warns_of_a_flat_or_chance_model() -> None:
    rng = np.random.default_rng(0)
    x, y = _separable(200, rng)
    model = train_mlp(x, y, x, y, epochs=20, patience=20, x_cal=x, y_cal=y).model
    xy = {"cal": (x[:100], y[:100]), "test": (x[100:], y[100:])}
    assert training_warnings(model, xy, {"auc": 0.99}) == []
    model.calibration = (1e-3, -0.3)  # a Platt fit on pools without signal
    flat = training_warnings(model, xy, {"auc": 0.5})
    assert len(flat) == 2 and "nearly constant (0.43-0.43" in flat[0] and "AUC 0.50" in flat[1]
    assert training_warnings(model, {"cal": (x[:0], y[:0]), "test": (x[:0], y[:0])}, {}) == []


def test_feature_extractor_and_entities() -> None:
    fx = FeatureExtractor(HashingEmbedder())
    f = fx("Who directed Move?", ["Move"], ["Move was directed by Stuart Rosenberg."])
    g = fx("Who directed Move?", ["Move"], ["Borscht is a soup."])
    assert f.syntactic_coverage == 1.0 and g.syntactic_coverage == 0.0
    assert f.semantic_relevance > g.semantic_relevance and fx.relevance("q", []) == 0.0
    assert heuristic_entities("Are Dan O'Connor and Hale Baugh of the same nationality?") == ["Dan O'Connor", "Hale Baugh"]  # fmt: skip
    assert heuristic_entities(
        "Is the director of Move (1970 Film) and the director of Méditerranée (1963 Film) the same country?"
    ) == ["Move (1970 Film)", "Méditerranée (1963 Film)"]


# -- training CLI, data hygiene, shipped weights -------------------------------------------------
def bundled_records(name: str) -> list[dict[str, Any]]:
    from gaprag.datasets import data_dir

    lines = (data_dir() / f"{name}.dev.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_training_skips_the_evaluated_questions() -> None:
    all_records = bundled_records("2wikimultihopqa")
    kept = load_records("2wikimultihopqa")
    assert kept[0]["id"] == all_records[60]["id"] and len(kept) == len(all_records) - 60
    first_ids = {r["id"] for r in all_records[:60]}
    data = build_splits(kept, n_train=100, n_val=20, n_test=20)
    assert not first_ids & {s.qid for s in data.train + data.val + data.test}


def test_rfm_train_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "w"
    args = ["rfm", "train", "--out", str(out), "--embedder", "hashing-256", "--datasets",
            "2wikimultihopqa", "--n-train", "200", "--n-val", "40", "--n-test", "40",
            "--n-cal", "40", "--epochs", "3", "--seed", "1", "--quiet"]  # fmt: skip
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["embedder"] == "hashing-256" and 0.0 <= summary["test"]["auc"] <= 1.0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["data"]["skip_first"] == 60 and metrics["training"]["epochs_run"] <= 3
    assert metrics["data"]["samples"] == {"train": 200, "val": 40, "cal": 40, "test": 40}
    assert metrics["monotone"] == ["syntactic_coverage", "semantic_relevance"]
    assert set(metrics["test"]["monotonicity_violations"].values()) == {0}
    assert RFeedbackMLP.load(out / "weights.json", expect_embedder="hashing-256").sizes == (2, 32, 16, 1)  # fmt: skip
    assert main(["rfm", "train", "--datasets", "nope", "--quiet", "--embedder", "hashing-256"]) == 2
    assert main(["rfm", "train", "--monotone", "nope", "--quiet", "--embedder", "hashing-256"]) == 2
    assert main(["rfm", "train", "--source", "graph_pools", "--quiet"]) == 2  # no --runs


def test_decisions_are_recorded(store: Store, tmp_path: Path) -> None:
    out = make_graph(fake_llm(), store, SeqJudge(False, True)).invoke({"question": QUESTION})
    assert out["decisions"] == [
        {"node": "feedback_classifier", "round": 1, "decision": "continue", "p": 0.0,
         "path": "model", "threshold": 0.5},
        {"node": "feedback_classifier", "round": 2, "decision": "stop", "p": 1.0,
         "path": "model", "threshold": 0.5},
    ]  # fmt: skip
    out = make_graph(fake_llm(), store, feedback_mode="heuristic").invoke({"question": QUESTION})
    assert out["decisions"] == [{"node": "feedback_classifier", "round": 1, "decision": "stop",
                                 "p": None, "path": "rule", "threshold": 0.5}]  # fmt: skip
    fake = fake_llm(judge="Yes", logprobs=yes_logprobs(0.8))
    out = make_graph(LLM(fake, supports_logprobs=True), store, feedback_mode="llm_judge").invoke({"question": QUESTION})  # fmt: skip
    assert [(d["decision"], d["path"]) for d in out["decisions"]] == [("stop", "logprobs")]
    out = make_graph(fake_llm(), store, feedback_mode="never_sufficient").invoke({"question": QUESTION})  # fmt: skip
    assert [(d["round"], d["decision"], d["path"]) for d in out["decisions"]] == [
        (1, "continue", "rule"),
        (2, "continue", "rule"),
    ]  # no decision at the cap: the router answers without asking the judge
    # the trained model: p is its probability, with its threshold
    rng = np.random.default_rng(0)
    x, y = _separable(200, rng)
    x[:, 1] = np.where(y == 1, 0.6, 0.05)
    path = tmp_path / "w.json"
    train_mlp(x, y, x, y, epochs=30, embedder=HashingEmbedder().name).model.save(path)
    out = make_graph(fake_llm(), store, rf_weights=str(path), rf_threshold=0.4).invoke({"question": QUESTION})  # fmt: skip
    first = out["decisions"][0]
    assert first["path"] == "model" and first["threshold"] == 0.4
    record = next(t for t in out["trace"] if t["node"] == "feedback_classifier")
    assert first["p"] == pytest.approx(record["prob"]) and first["p"] is not None
    assert first["decision"] == ("stop" if record["sufficient"] else "continue")


# -- training never sees evaluation questions ---------------------------------------------------
def test_training_refuses_evaluation_questions(tmp_path: Path) -> None:
    """The shared split guard (check_no_overlap): no record that is one of a bundled set's
    first 60 questions, by index, id or question text, whatever the source."""
    assert EVAL_RESERVED == 60
    with pytest.raises(InputError, match="reserved question"):
        refuse_evaluation_questions([bundled_records("hotpotqa")[59]])
    refuse_evaluation_questions(load_records("hotpotqa", skip_first=60))  # index 60 on is fine
    with pytest.raises(InputError, match="may not start at question 10"):
        load_records("musique", skip_first=10)  # calibration_slice refuses the start
    with pytest.raises(InputError, match="may not start at question 10"):
        run_training(tmp_path / "w", HashingEmbedder(), datasets=["musique"], skip_first=10,
                     progress=False)  # fmt: skip
    copy = tmp_path / "copy.jsonl"  # a renamed copy is caught by the question text
    record = {**bundled_records("2wikimultihopqa")[3], "id": "renamed"}
    copy.write_text(json.dumps(record) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"reserved question.*index 3"):
        run_training(tmp_path / "w", HashingEmbedder(), datasets=[str(copy)], skip_first=0,
                     progress=False)  # fmt: skip
    assert not (tmp_path / "w").exists()
    assert main(["rfm", "train", "--skip-first", "10", "--quiet", "--embedder", "hashing-256"]) == 2


# -- monotone, calibrated R-Feedback; the decision convention; graph-pool training -----
def _bumpy(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Labels that FALL with coverage above 0.5: what an unconstrained model learns to mimic."""
    s_f = rng.uniform(0, 1, n)
    g_f = rng.uniform(0, 1, n)
    y = ((s_f > 0.2) & (s_f < 0.5) | (g_f > 0.8)).astype(float)
    return np.column_stack([s_f, g_f]), y


def test_monotone_model_never_falls_as_coverage_rises() -> None:
    rng = np.random.default_rng(0)
    x, y = _bumpy(1500, rng)
    free = train_mlp(x, y, x, y, epochs=40, patience=40, monotone=()).model
    mono = train_mlp(x, y, x, y, epochs=40, patience=40, x_cal=x, y_cal=y).model
    assert mono.monotone == ("syntactic_coverage", "semantic_relevance")
    assert mono.satisfies_constraints()
    assert monotonicity_violations(free, x, "syntactic_coverage") > 0  # the audited defect
    for feature in mono.features:
        assert monotonicity_violations(mono, x, feature) == 0
    # explicitly: other features fixed, the probability is non-decreasing in S_f
    for g in (0.0, 0.3, 0.6, 0.9, 1.5):
        grid = np.column_stack([np.linspace(-0.5, 1.5, 201), np.full(201, g)])
        assert np.all(np.diff(mono.probs(grid)) >= -1e-12)


def _trace_of(out: dict[str, Any], *, qid: str, question: str, dataset: str = "fixture",
              supporting: list[str] | None = None) -> dict[str, Any]:  # fmt: skip
    """What `gaprag eval` writes to traces/rfm_rag/ID.json for one question."""
    standard = {"answer", "stop_reason", "iterations", "queries", "evidence", "usage", "trace",
                "decisions", "shown_ids", "retrieved_ids"}  # fmt: skip
    return {
        "dataset": dataset, "id": qid, "method": "rfm_rag", "base_method": "rfm_rag",
        "input": question, "answers": ["Małgorzata Braunek"],
        "supporting": supporting if supporting is not None else ["prw", "xz"],
        "prediction": out["answer"], "stop_reason": out["stop_reason"],
        "iterations": out["iterations"], "decisions": out["decisions"],
        "trace": out["trace"], "extra": {k: v for k, v in out.items() if k not in standard},
        "error": None,
    }  # fmt: skip


def _write_runs(tmp_path: Path, store: Store, n: int = 6) -> Path:
    run = tmp_path / "run" / "traces" / "rfm_rag"
    run.mkdir(parents=True)
    out = make_graph(fake_llm(), store, ProbJudge(0.3), calibration=True).invoke({"question": QUESTION})  # fmt: skip
    for i in range(n):
        trace = _trace_of(out, qid=f"q{i}", question=f"{QUESTION} ({i})")
        (run / f"q{i}.json").write_text(json.dumps(trace), encoding="utf-8")
    return tmp_path / "run"


def test_graph_pool_samples_from_traces(store: Store, tmp_path: Path) -> None:
    out = make_graph(fake_llm(), store, ProbJudge(0.3), calibration=True).invoke({"question": QUESTION})  # fmt: skip
    record = next(t for t in out["trace"] if t["node"] == "feedback_classifier")
    assert record["pool"] == [FACT_FILM] and "prw" in record["pool_passages"]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_trace_of(out, qid="x", question=QUESTION)), encoding="utf-8")
    support = graph_pool_samples([path])
    # round 1: the film fact only (the Braunek passage not yet behind the pool) -> 0; round 2
    # adds the mother fact -> 1; the final pool (round 3) is the same as round 2's, not repeated
    assert [(s.kind, s.label) for s in support] == [("round1", 0), ("round2", 1)]
    assert support[1].sentences == [FACT_FILM, FACT_MOTHER]
    assert support[0].entities == ["Polish-Russian War"] and support[0].question == QUESTION
    answer = graph_pool_samples([path], label="answer")
    assert [(s.kind, s.label) for s in answer] == [("round1", 1), ("round2", 1)]
    other = tmp_path / "other.json"  # another method's trace is ignored
    other.write_text(json.dumps({"base_method": "standard_rag"}), encoding="utf-8")
    assert len(graph_pool_samples([path, other])) == 2


def test_graph_pools_refuse_evaluation_questions(store: Store, tmp_path: Path) -> None:
    out = make_graph(fake_llm(), store, ProbJudge(0.3)).invoke({"question": QUESTION})
    reserved = bundled_records("hotpotqa")[12]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_trace_of(out, qid=reserved["id"], question=reserved["question"],
                                         dataset="hotpotqa")), encoding="utf-8")  # fmt: skip
    with pytest.raises(InputError, match=r"reserved question.*index 12"):
        graph_pool_samples([path])
    ok = bundled_records("hotpotqa")[75]
    path.write_text(json.dumps(_trace_of(out, qid=ok["id"], question=ok["question"],
                                         dataset="hotpotqa")), encoding="utf-8")  # fmt: skip
    assert graph_pool_samples([path])


def test_train_from_graph_pools(store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    runs = _write_runs(tmp_path, store, n=8)
    data = graph_pool_splits(graph_pool_samples([runs]))
    qids = [{s.qid for s in part} for part in (data.train, data.val, data.cal, data.test)]
    assert all(qids) and sum(len(q) for q in qids) == len(set().union(*qids)) == 8
    out = tmp_path / "w"
    args = ["rfm", "train", "--source", "graph_pools", "--runs", str(runs), "--out", str(out),
            "--embedder", "hashing-256", "--epochs", "3", "--quiet"]  # fmt: skip
    assert main(args) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["source"] == "graph_pools"
    metrics = json.loads((out / "metrics.json").read_text())
    assert (
        metrics["training"]["max_epochs"] == 3
        and metrics["training"]["max_epochs_rule"] == "--epochs"
    )
    assert summary["warnings"] == metrics["warnings"]
    assert all(f"lab: warning: {w}" in captured.err for w in metrics["warnings"])
    assert metrics["data"]["label"] == "support" and metrics["data"]["samples"]["train"] > 0
    # the questions no weight was fitted to: the Platt and test splits, never a trained one
    trained = {f"fixture/q{i}" for i in range(8)} - set(metrics["data"]["heldout"])
    assert metrics["data"]["heldout"] and len(trained) == (
        metrics["data"]["questions"]["train"] + metrics["data"]["questions"]["val"]
    )
    assert RFeedbackMLP.load(out / "weights.json", expect_embedder="hashing-256").satisfies_constraints()  # fmt: skip
    with pytest.raises(GapragError, match="traced questions"):
        graph_pool_splits(graph_pool_samples([runs])[:2])
    # every pool answered right: one class, no AUC anywhere; the metrics stay strict JSON
    assert main([*args[:-1], "--label", "answer", "--quiet"]) == 0
    strict = json.loads((out / "metrics.json").read_text(), parse_constant=pytest.fail)
    assert strict["test"]["auc"] is None and strict["data"]["label"] == "answer"
    assert json.loads(capsys.readouterr().out)["test"]["auc"] is None
