"""The evaluation harness: datasets, runner (resume, errors, concurrency, traces), report, CLI."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage

from gaprag.errors import GapragError, InputError
from gaprag.eval import evaluate, load_dataset, read_results, write_report
from gaprag.eval.datasets import bundled
from gaprag.eval.runner import RESULT_FIELDS, TooManyErrors
from gaprag.graphs import METHODS
from gaprag.stores import HashingEmbedder
from gaprag.testing import ScriptedChatModel

PARAS = {
    "fr": ("France", "Paris is the capital and largest city of France."),
    "de": ("Germany", "Berlin is the capital of Germany and its largest city."),
    "it": ("Italy", "Rome is the capital city of Italy."),
    "es": ("Spain", "Madrid is the capital of Spain."),
    "pt": ("Portugal", "Lisbon is the capital of Portugal."),
    "hamlet": ("Hamlet", "Hamlet is a tragedy written by William Shakespeare."),
}
QUESTIONS = [
    ("q1", "What is the capital of France?", ["Paris"], ["fr"]),
    ("q2", "What is the capital of Germany?", ["Berlin"], ["de"]),
    ("q3", "What is the capital of Italy?", ["Rome"], ["it"]),
    ("q4", "What is the capital of Spain?", ["Madrid"], ["es"]),
    ("q5", "Who wrote Hamlet?", ["William Shakespeare", "Shakespeare"], ["hamlet", "pt"]),
]
ANSWERS = {
    "France": "Paris",
    "Germany": "Berlin",
    "Italy": "Milan",
    "Spain": "Madrid",
    "Hamlet": "Shakespeare",
}


def _record(qid: str, question: str, answers: list[str], supporting: list[str]) -> dict[str, Any]:
    return {
        "id": qid,
        "question": question,
        "answers": answers,
        "supporting": supporting,
        "type": "test",
        "paragraphs": [{"id": p, "title": PARAS[p][0], "text": PARAS[p][1]} for p in PARAS],
    }


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    path = tmp_path / "capitals.jsonl"
    path.write_text("\n".join(json.dumps(_record(*q)) for q in QUESTIONS) + "\n")
    return path


def _reply(messages: list[BaseMessage]) -> str:
    last = str(messages[-1].content)
    question = last.rsplit("Question:", 1)[-1]
    for key, answer in ANSWERS.items():
        if key in question:
            return answer
    return "unknown"


def oracle() -> ScriptedChatModel:
    return ScriptedChatModel(default=_reply)


@pytest.fixture
def two_methods(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A second registered method name (the baseline's module) so runs compare two methods."""
    monkeypatch.setitem(METHODS, "standard_rag_k1", METHODS["standard_rag"])
    return ["standard_rag", "standard_rag_k1"]


def run(dataset: Path, out: Path, **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("methods", ["standard_rag"])
    kwargs.setdefault("llm", oracle())
    return evaluate(dataset=dataset, out=out, embedder=HashingEmbedder(), progress=False, **kwargs)


# -- datasets ------------------------------------------------------------------------------
def test_bundled_sets_load_in_file_order() -> None:
    assert {"hotpotqa", "musique", "medmcqa", "medqa_zh"} <= set(bundled())
    ds = load_dataset("medmcqa")
    first = json.loads((ds.path).read_text().split("\n", 1)[0])
    assert ds.examples[0].id == first["id"]
    assert [e.id for e in ds.select(2, 1)] == [e.id for e in ds.examples[1:3]]
    mc = ds.examples[0]
    assert mc.options and mc.answer_idx == first["meta"]["answer_idx"]
    assert "Options:\nA. " in mc.prompt() and mc.prompt().startswith(mc.question)
    hotpot = load_dataset("hotpotqa")
    assert hotpot.examples[0].prompt() == hotpot.examples[0].question
    assert len(hotpot.documents()) == 1768  # the union of all questions' paragraphs (MANIFEST)


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ({"id": "x", "question": "q?"}, "field 'answers' is missing"),
        ({"id": "x", "question": "", "answers": ["a"]}, "field 'question'"),
        ({"question": "q?", "answers": ["a"]}, "field 'id'"),
        ({"id": "x", "question": "q?", "answers": "a", "supporting": "p1"}, "field 'supporting'"),
        (
            {
                "id": "x",
                "question": "q?",
                "answers": ["a"],
                "paragraphs": [{"id": "p", "text": ""}],
            },
            "paragraphs[0].text",
        ),
        ({"id": "q1", "question": "q?", "answers": ["a"]}, "duplicate id 'q1' (first on line 1)"),
    ],
)
def test_malformed_record_names_line_and_field(
    dataset: Path, line: dict[str, Any], needle: str
) -> None:
    text = dataset.read_text().splitlines()
    text.insert(1, json.dumps(line))
    dataset.write_text("\n".join(text))
    with pytest.raises(InputError) as err:
        load_dataset(dataset)
    assert f"{dataset}:2: " in str(err.value) and needle in str(err.value)


def test_unknown_dataset_lists_bundled() -> None:
    with pytest.raises(InputError) as err:
        load_dataset("hotpot")
    assert "hotpotqa" in err.value.hint


# -- runner --------------------------------------------------------------------------------
def test_rows_have_design_fields_scores_and_traces(dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    fake = oracle()
    summary = run(dataset, out, llm=fake, sets=["top_k=2"])
    rows = read_results(out)
    assert [r["id"] for r in rows] == ["q1", "q2", "q3", "q4", "q5"]
    for row in rows:
        assert set(RESULT_FIELDS) <= set(row)
        assert row["dataset"] == "capitals" and row["method"] == "standard_rag"
        assert row["error"] is None and row["llm_calls"] == 1 and row["retrieval_calls"] == 1
        assert (
            row["prompt_tokens"] > 0 and row["iterations"] == 1 and row["stop_reason"] == "answered"
        )
        assert len(row["evidence_ids"]) == 2 and row["options"] == {"top_k": 2}
    by_id = {r["id"]: r for r in rows}
    assert by_id["q1"]["em"] == 1.0 and by_id["q1"]["support_recall"] == 1.0
    assert (
        by_id["q3"]["prediction"] == "Milan"
        and by_id["q3"]["em"] == 0.0
        and by_id["q3"]["f1"] == 0.0
    )
    assert by_id["q5"]["em"] == 1.0 and by_id["q5"]["acc"] == 1.0  # alias match
    assert by_id["q5"]["support_recall"] == 0.5  # "pt" is not retrieved for a Hamlet question
    trace = json.loads((out / "traces" / "standard_rag" / "q2.json").read_text())
    assert trace["queries"] == ["What is the capital of Germany?"]
    assert trace["retrievals"][0]["ids"] == by_id["q2"]["evidence_ids"]
    assert len(trace["llm_calls"]) == 1
    call = trace["llm_calls"][0]
    assert call["messages"][-1]["content"].endswith(
        "Question: What is the capital of Germany?\nAnswer:"
    )
    assert call["reply"] == "Berlin" and call["prompt_tokens"] > 0
    assert len(fake.calls) == 5
    f1 = summary["datasets"]["capitals"]["methods"]["standard_rag"]["f1"]
    assert f1["mean"] == pytest.approx(0.8) and f1["n"] == 5
    run_info = json.loads((out / "run.json").read_text())
    assert run_info["selected"] == 5 and run_info["corpus"]["documents"] == len(PARAS)


def test_resume_skips_finished_pairs(dataset: Path, tmp_path: Path, two_methods: list[str]) -> None:
    out = tmp_path / "run"
    run(dataset, out, methods=two_methods, limit=3)
    assert len(read_results(out)) == 6
    with pytest.raises(InputError, match="already has 6 rows"):
        run(dataset, out, methods=two_methods, limit=5)
    fake = oracle()
    summary = run(dataset, out, methods=two_methods, limit=5, resume=True, llm=fake)
    rows = read_results(out)
    assert len(rows) == 10 and summary["new_rows"] == 4 and summary["skipped"] == 6
    new = rows[6:]
    assert sorted((r["method"], r["id"]) for r in new) == [
        (m, q) for m in two_methods for q in ("q4", "q5")
    ]
    assert len(fake.calls) == 4  # finished questions were not asked again
    assert len({(r["method"], r["id"]) for r in rows}) == 10


def test_resume_refuses_other_options(dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    run(dataset, out, limit=2, sets=["top_k=2"])
    with pytest.raises(InputError, match="options for standard_rag differ"):
        run(dataset, out, limit=3, sets=["top_k=3"], resume=True)


def test_torn_last_line_is_ignored_and_repaired(dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    run(dataset, out, limit=2)
    with (out / "results.jsonl").open("a") as fh:
        fh.write('{"dataset": "capitals", "id": "q3", "meth')  # killed mid-write
    with pytest.warns(UserWarning, match="skipped 1 incomplete line"):
        run(dataset, out, limit=3, resume=True)
        rows = read_results(out)
    assert [r["id"] for r in rows] == ["q1", "q2", "q3"]


def _failing(bad: set[str]) -> ScriptedChatModel:
    def reply(messages: list[BaseMessage]) -> str:
        text = str(messages[-1].content)
        if any(b in text.rsplit("Question:", 1)[-1] for b in bad):
            raise RuntimeError("model exploded")
        return _reply(messages)

    return ScriptedChatModel(default=reply)


def test_failed_question_is_recorded_and_the_run_goes_on(dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    summary = run(dataset, out, llm=_failing({"Germany"}), max_errors=3)
    rows = {r["id"]: r for r in read_results(out)}
    assert len(rows) == 5 and summary["errors"] == 1
    assert rows["q2"]["error"] == "RuntimeError: model exploded"
    assert rows["q2"]["em"] is None and rows["q2"]["stop_reason"] == "error"
    assert rows["q2"]["retrieval_calls"] == 1  # counted from the recorder after the failure
    assert rows["q1"]["error"] is None and rows["q1"]["em"] == 1.0
    trace = json.loads((out / "traces" / "standard_rag" / "q2.json").read_text())
    assert "model exploded" in trace["traceback"]
    entry = summary["datasets"]["capitals"]["methods"]["standard_rag"]
    assert entry["n"] == 4 and entry["errors"] == 1 and entry["stop_reasons"]["error"] == 1
    # --resume retries the failed question only
    fake = oracle()
    run(dataset, out, llm=fake, resume=True)
    assert len(fake.calls) == 1 and "Germany" in fake.prompts()[0]
    summary = write_report([out])
    assert summary["datasets"]["capitals"]["methods"]["standard_rag"]["errors"] == 0


@pytest.mark.parametrize(
    ("max_errors", "message", "kept"),
    [
        (2, "stopped after 2 failed questions", 2),  # the cap stops the run
        (0, "all 5 questions of this run failed", 5),  # no cap, but nothing succeeded
    ],
)
def test_failing_runs_raise_and_keep_their_rows(
    dataset: Path, tmp_path: Path, max_errors: int, message: str, kept: int
) -> None:
    out = tmp_path / "run"
    with pytest.raises(TooManyErrors) as err:
        run(dataset, out, llm=_failing({"capital", "Hamlet"}), max_errors=max_errors)
    assert message in str(err.value) and "--resume" in err.value.hint
    rows = read_results(out)
    assert len(rows) == kept and all(r["error"] for r in rows)  # kept for the retry


def test_default_llm_that_cannot_start_fails_before_any_question(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gaprag.llm.factory as factory

    calls: list[int] = []

    def not_installed() -> Any:
        calls.append(1)
        raise GapragError("the weights of m are not installed", hint="run: pip install m")

    monkeypatch.setattr(factory, "default_llm", not_installed)
    out = tmp_path / "run"
    with pytest.raises(GapragError, match="not installed") as err:
        run(dataset, out, llm=None)
    assert calls == [1] and err.value.hint == "run: pip install m"
    assert not (out / "results.jsonl").exists()
    # an explicit endpoint, here per method, is not the default LLM: no preflight
    from tests.fake_openai import FakeOpenAI

    with FakeOpenAI(reply="Paris") as server:
        run(dataset, tmp_path / "run2", llm=None, sets=[f"base_url={server.base_url}"], limit=1)
        assert len(server.requests) == 1
    assert calls == [1]


def test_concurrency_is_bounded(dataset: Path, tmp_path: Path, two_methods: list[str]) -> None:
    lock = threading.Lock()
    state = {"now": 0, "peak": 0}

    def slow(messages: list[BaseMessage]) -> str:
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.15)
        with lock:
            state["now"] -= 1
        return _reply(messages)

    run(
        dataset,
        tmp_path / "run",
        methods=two_methods,
        concurrency=3,
        llm=ScriptedChatModel(default=slow),
    )
    assert state["peak"] == 3
    assert len(read_results(tmp_path / "run")) == 10


def test_method_options_pass_through(dataset: Path, tmp_path: Path, two_methods: list[str]) -> None:
    out = tmp_path / "run"
    run(dataset, out, methods=two_methods, limit=2, sets=["standard_rag_k1.top_k=1", "top_k=3"])
    rows = read_results(out)
    lengths = {r["method"]: len(r["evidence_ids"]) for r in rows}
    assert lengths == {"standard_rag": 3, "standard_rag_k1": 1}
    with pytest.raises(InputError, match="unknown method 'migress'"):
        run(dataset, tmp_path / "x", sets=["migress.max_iterations=3"])
    with pytest.raises(InputError, match="no method in this run has an option 'top_kk'"):
        run(dataset, tmp_path / "y", sets=["top_kk=3"])


def test_multiple_choice_maps_the_prediction_to_an_option(tmp_path: Path) -> None:
    record = {
        "id": "m1",
        "question": "Which stain is used?",
        "answers": ["Congo red"],
        "supporting": ["p1"],
        "paragraphs": [{"id": "p1", "title": "Stains", "text": "Amyloid stains with Congo red."}],
        "options": {"A": "PAS", "B": "Congo red", "C": "Gram"},
        "meta": {"answer_idx": "B"},
    }
    path = tmp_path / "mc.jsonl"
    path.write_text(json.dumps(record) + "\n" + json.dumps({**record, "id": "m2"}) + "\n")
    fake = ScriptedChatModel(replies=["B", "A. PAS"])
    summary = run(path, tmp_path / "run", llm=fake)
    rows = {r["id"]: r for r in read_results(tmp_path / "run")}
    assert rows["m1"]["choice"] == "B" and rows["m1"]["choice_correct"] == 1.0
    assert rows["m2"]["choice"] == "A" and rows["m2"]["choice_correct"] == 0.0
    # EM/F1/Acc score the chosen option's text, so they agree with the choice
    assert (rows["m1"]["em"], rows["m1"]["f1"], rows["m2"]["em"]) == (1.0, 1.0, 0.0)
    assert rows["m1"]["prediction"] == "B"  # the raw reply is kept
    assert "Options:\nA. PAS\nB. Congo red\nC. Gram" in fake.prompts()[0]
    ds = summary["datasets"]["mc"]
    assert ds["primary"] == "choice_correct"
    assert ds["methods"]["standard_rag"]["choice_correct"]["mean"] == 0.5
    assert "MC acc" in (tmp_path / "run" / "summary.md").read_text()


# -- report --------------------------------------------------------------------------------
def _row(method: str, qid: str, score: float, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {k: None for k in RESULT_FIELDS}
    row.update(
        dataset="d", id=qid, method=method, question="?", answers=["a"], prediction="a",
        em=score, f1=score, acc=score, support_recall=1.0, llm_calls=1, prompt_tokens=100,
        completion_tokens=10, retrieval_calls=1, iterations=1, stop_reason="answered", wall_s=0.5,
    )  # fmt: skip
    row.update(extra)
    return row


def _write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_report_paired_difference_on_shared_questions(tmp_path: Path) -> None:
    base = _write_rows(
        tmp_path / "base",
        [
            _row("standard_rag", f"q{i}", f)
            for i, f in zip(range(1, 5), [1.0, 0.0, 1.0, 0.0], strict=True)
        ],
    )
    other_rows = [
        _row(
            "iterkey",
            f"q{i}",
            1.0,
            prompt_tokens=300,
            completion_tokens=30,
            iterations=2,
            stop_reason="validated",
        )
        for i in range(2, 6)
    ]
    other_rows.append(
        _row("iterkey", "q6", 0.0, error="Boom", em=None, f1=None, acc=None, stop_reason="error")
    )
    other_rows.append(_row("iterkey", "q7", 0.0, missing=True))
    other = _write_rows(tmp_path / "other", other_rows)
    out = tmp_path / "report"
    summary = write_report([base, other], out, seed=1)
    ds = summary["datasets"]["d"]
    assert ds["best"] == "iterkey" and ds["primary"] == "f1"
    it = ds["methods"]["iterkey"]
    assert it["n"] == 5 and it["errors"] == 1  # the failed q6 is not in the means
    assert it["f1"]["mean"] == pytest.approx(0.8)
    vs = it["vs_baseline"]
    assert vs["n"] == 3  # q2, q3, q4: the questions both answered
    assert vs["f1"]["mean"] == pytest.approx(2 / 3)
    assert (vs["f1"]["wins"], vs["f1"]["losses"], vs["f1"]["ties"]) == (2, 0, 1)
    lo, hi = vs["f1"]["ci"]
    assert 0.0 <= lo <= 2 / 3 <= hi <= 1.0
    assert it["stop_reasons"] == {"validated": 4, "error": 1, "answered": 1}
    assert it["miss_rate"] == 1.0  # only q7 reports `missing`
    assert it["by_iterations"] == {"1": {"n": 1, "mean": 0.0}, "2": {"n": 4, "mean": 1.0}}
    assert vs["cost_ratio"]["tokens"] == pytest.approx(3.0)
    # same seed, same intervals
    again = write_report([base, other], tmp_path / "again", seed=1)
    assert again["datasets"]["d"]["methods"]["iterkey"]["vs_baseline"]["f1"]["ci"] == [lo, hi]

    md = (out / "summary.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| method"))
    for column in ("n", "EM", "F1", "Acc", "Support recall", "ΔF1 vs standard_rag", "LLM calls",
                   "prompt tok", "completion tok", "retrievals", "iterations", "wall s", "errors"):  # fmt: skip
        assert f"| {column} |" in header
    assert "**Best F1: `iterkey`" in md and "on 3 shared questions" in md
    assert "miss rate 1.000" in md
    for plot in summary["plots"]["d"]:
        assert (out / plot).stat().st_size > 1000 and (out / plot).read_bytes()[:4] == b"\x89PNG"
    assert (
        json.loads((out / "summary.json").read_text())["datasets"]["d"]["methods"]["iterkey"]["n"]
        == 5
    )


def test_report_needs_results(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"no results\.jsonl"):
        write_report([tmp_path])


# -- command line --------------------------------------------------------------------------
def test_cli_eval_and_report(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gaprag.cli import main
    from gaprag.stores import Store
    from gaprag.stores.documents import Document
    from tests.fake_openai import FakeOpenAI

    docs = [Document(id=p, title=t, text=x) for p, (t, x) in PARAS.items()]
    store = Store.build(tmp_path / "store", docs, embedder=HashingEmbedder(), progress=False)
    out = tmp_path / "cli"
    with FakeOpenAI(reply="Paris") as server:
        code = main([
            "eval", "--methods", "standard_rag", "--dataset", str(dataset), "--limit", "2",
            "--out", str(out), "--store", str(store.root), "--base-url", server.base_url,
            "--set", "top_k=1", "--quiet",
        ])  # fmt: skip
        assert code == 0
        assert len(server.requests) == 2
    rows = read_results(out)
    assert [r["prediction"] for r in rows] == ["Paris", "Paris"] and [r["em"] for r in rows] == [
        1.0,
        0.0,
    ]
    assert "| **standard_rag** | 2 |" in capsys.readouterr().out
    assert main(["report", str(out), "--out", str(tmp_path / "rep")]) == 0
    assert (tmp_path / "rep" / "summary.md").is_file()
    assert main(["eval", "--methods", "standard_rag", "--dataset", "nope", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "no bundled dataset or file named 'nope'" in err and "Traceback" not in err
