"""The evaluation harness: datasets, runner (resume, errors, concurrency, traces), report, CLI."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage

from gaprag.datasets import bundled
from gaprag.errors import GapragError, InputError
from gaprag.eval import load_dataset, read_results, write_report
from gaprag.eval.planning import parse_variant
from gaprag.eval.results import RESULT_FIELDS, ResultsWriter
from gaprag.eval.runner import TooManyErrors
from gaprag.graphs import METHODS
from gaprag.llm.client import LLM
from gaprag.llm.memo import SharedReplies, shared_scope
from gaprag.stores import HashingEmbedder
from gaprag.testing import ScriptedChatModel
from gaprag.traces import method_traces
from tests.capitals import PARAS, QUESTIONS, oracle, oracle_reply, record_of, run
from tests.methods import contract as contract_method


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    path = tmp_path / "capitals.jsonl"
    path.write_text("\n".join(json.dumps(record_of(*q)) for q in QUESTIONS) + "\n")
    return path


@pytest.fixture
def contract(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setitem(METHODS, "contract", lambda: contract_method)
    return "contract"


@pytest.fixture
def two_methods(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A second registered method name (the baseline's module) so runs compare two methods."""
    monkeypatch.setitem(METHODS, "standard_rag_k1", METHODS["standard_rag"])
    return ["standard_rag", "standard_rag_k1"]


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
    assert by_id["q1"]["em"] == 1.0 and by_id["q1"]["retrieval_recall"] == 1.0
    for row in rows:  # support recall only where the graph reports the passages it showed
        assert (row["support_recall"] is None) == (row["shown_ids"] is None)
    assert (
        by_id["q3"]["prediction"] == "Milan"
        and by_id["q3"]["em"] == 0.0
        and by_id["q3"]["f1"] == 0.0
    )
    assert by_id["q5"]["em"] == 1.0 and by_id["q5"]["acc"] == 1.0  # alias match
    assert by_id["q5"]["retrieval_recall"] == 0.5  # "pt" is not retrieved for a Hamlet question
    trace = method_traces(out, "standard_rag")["q2"]
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


def test_contract_fields_give_two_recalls_decisions_and_token_parts(
    dataset: Path, tmp_path: Path, contract: str
) -> None:
    out = tmp_path / "run"
    summary = run(dataset, out, methods=[contract])
    rows = {r["id"]: r for r in read_results(out)}
    for row in rows.values():
        assert set(RESULT_FIELDS) <= set(row) and row["error"] is None
        assert len(row["retrieved_ids"]) == 6 and len(row["shown_ids"]) == 1
        assert row["retrieval_recall"] == 1.0  # every paragraph was retrieved
        assert [d["decision"] for d in row["decisions"]] == ["reject", "accept", "sufficient"]
        assert row["decisions"][0] == {
            "node": "validate_answer", "round": 1, "decision": "reject", "p": 0.2,
            "path": "logprobs", "threshold": 0.5,
        }  # fmt: skip
        assert row["cached_tokens"] == 3 and row["instruction_tokens"] == 2
        assert row["passage_tokens"] == row["prompt_tokens"] - 12
        assert row["base_method"] == "contract"
    # support recall: only the one passage shown counts (q1: its gold is ranked first)
    assert rows["q1"]["shown_ids"] == ["fr"] and rows["q1"]["support_recall"] == 1.0
    assert rows["q5"]["shown_ids"] == ["hamlet"] and rows["q5"]["support_recall"] == 0.5
    trace = method_traces(out, "contract")["q5"]
    assert trace["shown_ids"] == ["hamlet"] and len(trace["retrieved_ids"]) == 6
    assert trace["titles"]["hamlet"] == "Hamlet" and trace["decisions"] == rows["q5"]["decisions"]
    assert trace["metrics"]["retrieval_recall"] == 1.0

    entry = summary["datasets"]["capitals"]["methods"]["contract"]
    assert entry["support_recall"]["mean"] == pytest.approx(0.9) and entry["support_recall"]["ci"]
    assert entry["retrieval_recall"] == {"mean": 1.0, "ci": [1.0, 1.0], "n": 5}
    validate = entry["decisions"]["validate_answer"]
    assert validate["n"] == 10 and validate["decisions"] == {"reject": 5, "accept": 5}
    assert validate["mean_p"] == pytest.approx(0.55) and validate["default"] == 0
    judge = entry["decisions"]["judge"]
    assert judge["mean_p"] is None and judge["default"] == 5 and judge["default_rate"] == 1.0
    cost = entry["cost"]
    assert cost["cached_tokens"] == 3 and cost["instruction_tokens"] == 2
    assert cost["instruction_tokens"] + cost["passage_tokens"] + cost["other_tokens"] == (
        pytest.approx(cost["prompt_tokens"])
    )
    assert cost["shown_passages"] == 1 and cost["retrieved_passages"] == 6
    assert entry["settings"] == {
        "method": "contract", "retrieval_mode": "dense", "passages_per_prompt": 6,
        "options": {}, "recorded": True,
    }  # fmt: skip
    md = (out / "summary.md").read_text()
    assert "| **contract** | 5 |" in md and "Retrieval recall" in md
    assert (
        "| contract | validate_answer | 10 | reject 5, accept 5 | 0.550 (10) | logprobs 10 | 0 |"
        in md
    )
    assert "| contract | judge | 5 | sufficient 5 | – (0) | default 5 | 5 |" in md
    assert "| contract | dense | 6 |" in md  # retrieval mode and passages per prompt


def test_variants_run_side_by_side(dataset: Path, tmp_path: Path, contract: str) -> None:
    out = tmp_path / "run"
    fake = oracle()
    summary = run(
        dataset, out, methods=[contract, "shown3"], llm=fake, limit=2,
        variants=["shown3=contract:shown=3,retrieval_mode=hybrid", "top2=contract:top_k=2"],
        sets=["top2.shown=2"],
    )  # fmt: skip
    rows = read_results(out)
    assert sorted({r["method"] for r in rows}) == ["contract", "shown3", "top2"]
    assert len(rows) == 6 and len(fake.calls) == 6
    by = {(r["method"], r["id"]): r for r in rows}
    assert len(by["shown3", "q1"]["shown_ids"]) == 3 and len(by["contract", "q1"]["shown_ids"]) == 1
    assert len(by["top2", "q1"]["retrieved_ids"]) == 2 and len(by["top2", "q1"]["shown_ids"]) == 2
    assert by["shown3", "q1"]["base_method"] == "contract"
    assert by["shown3", "q1"]["options"] == {"shown": 3, "retrieval_mode": "hybrid"}
    info = json.loads((out / "run.json").read_text())
    assert info["variants"] == {"shown3": "contract", "top2": "contract"}
    assert info["settings"]["top2"]["top_k"] == 2 and info["settings"]["top2"]["shown"] == 2
    assert info["settings"]["contract"]["top_k"] == 6
    methods = summary["datasets"]["capitals"]["methods"]
    assert methods["shown3"]["settings"]["retrieval_mode"] == "hybrid"
    assert methods["top2"]["settings"]["passages_per_prompt"] == 2
    assert "q1" in method_traces(tmp_path / "run", "shown3")
    assert (tmp_path / "run" / "traces" / "shown3.jsonl.xz").is_file()
    md = (out / "summary.md").read_text()
    assert "| shown3 (`contract`) | hybrid | 6 |" in md and "`shown3` = `contract`" in md
    # resuming with a variant redefined on another method is refused
    with pytest.raises(InputError, match="top2 was a variant of contract"):
        run(dataset, out, methods=[contract], llm=fake, limit=2, resume=True,
            variants=["top2=standard_rag:top_k=2"])  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("iterkey", "expects NAME=METHOD:KEY=VALUE"),
        ("x=iterkey:top_k", "expected key=value"),
        ("x=nosuch:top_k=1", "unknown method 'nosuch'"),
        ("iterkey=iterkey:top_k=1", "is a method's name"),
        ("x=iterkey:top_kk=1", "unknown option 'top_kk'"),
        ("x=iterkey:top_k=many", "not a valid int"),
    ],
)
def test_bad_variants_are_refused(dataset: Path, tmp_path: Path, spec: str, needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        run(dataset, tmp_path / "run", methods=["standard_rag"], variants=[spec])
    assert not (tmp_path / "run" / "results.jsonl").exists()


def test_parse_variant() -> None:
    assert parse_variant("ik_hybrid=iterkey:top_k=5,retrieval_mode=hybrid") == (
        "ik_hybrid", "iterkey", {"top_k": "5", "retrieval_mode": "hybrid"},
    )  # fmt: skip
    assert parse_variant("plain=migres") == ("plain", "migres", {})


def test_default_llm_is_served_repeatably_and_settings_are_recorded(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gaprag.llm.factory as factory
    from gaprag.llm.client import LLM

    asked: list[bool] = []

    def default_llm(repeatable: bool = False) -> LLM:
        asked.append(repeatable)
        return LLM(oracle())

    settings = {"engine": "xllamacpp", "slots": 1, "seed": 42, "cache_prompt": False}

    def serving_settings(*, repeatable: bool = False) -> dict[str, Any]:
        assert repeatable  # the settings of the repeatable mode, the one the run uses
        return dict(settings)

    monkeypatch.setattr(factory, "default_llm", default_llm)
    monkeypatch.setattr(factory, "serving_settings", serving_settings, raising=False)
    monkeypatch.delenv("GAPRAG_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    out = tmp_path / "run"
    summary = run(dataset, out, llm=None, limit=2)
    assert asked == [True]
    expected = {**settings, "repeatable": True}
    assert json.loads((out / "run.json").read_text())["serving"] == {
        **expected,
        "temperature": None,
    }
    assert summary["serving"]["capitals"]["seed"] == 42
    assert (
        "Serving: engine=xllamacpp, slots=1, seed=42, cache_prompt=False"
        in (out / "summary.md").read_text()
    )
    assert [r["em"] for r in read_results(out)] == [1.0, 1.0]


def test_a_second_writer_is_refused(dataset: Path, tmp_path: Path) -> None:
    from gaprag.eval.results import RunLock

    out = tmp_path / "run"
    out.mkdir()
    held = RunLock(out)  # as another `gaprag eval` on this directory would hold it
    try:
        with pytest.raises(InputError, match="being written by another `gaprag eval`") as err:
            run(dataset, out, limit=1)
        assert "another --out" in err.value.hint
        assert not (out / "results.jsonl").exists()
    finally:
        held.release()
    run(dataset, out, limit=1)  # released: the directory is usable again
    assert len(read_results(out)) == 1


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


@pytest.mark.parametrize(
    "tail",
    [
        '{"dataset": "capitals", "id": "q3", "meth',  # killed mid-write
        '{"dataset": "capitals", "id": "q3", "meth\n',  # as versions before 0.2 left it
    ],
)
def test_torn_last_line_is_cut_and_its_question_rerun(
    dataset: Path, tmp_path: Path, tail: str
) -> None:
    out = tmp_path / "run"
    run(dataset, out, limit=2)
    with (out / "results.jsonl").open("a") as fh:
        fh.write(tail)
    with pytest.warns(UserWarning, match="skipped 1 incomplete line"):
        assert [r["id"] for r in read_results(out)] == ["q1", "q2"]
    fake = oracle()
    with pytest.warns(UserWarning, match="dropped an incomplete last line"):
        run(dataset, out, limit=3, resume=True, llm=fake)
    lines = (out / "results.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["q1", "q2", "q3"]  # no torn line left
    assert len(fake.calls) == 1  # only q3 ran again


def test_rows_follow_a_results_file_replaced_during_the_run(tmp_path: Path) -> None:
    """A git stash or checkout replaces results.jsonl under a running eval: later rows must
    land in the file at the path, not in the replaced one."""
    path = tmp_path / "results.jsonl"
    writer = ResultsWriter(path)
    writer.write({"id": "q1"})
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(path.read_bytes())
    os.replace(copy, path)  # what git does: a new file, renamed over the old one
    with pytest.warns(UserWarning, match="replaced or removed during the run"):
        writer.write({"id": "q2"})
    writer.write({"id": "q3"})  # no second warning: the new file is the open one now
    writer.close()
    assert [json.loads(line)["id"] for line in path.read_text().splitlines()] == ["q1", "q2", "q3"]


def test_a_torn_line_inside_the_file_is_skipped(dataset: Path, tmp_path: Path) -> None:
    """Older versions started a new line after a torn one: such lines are skipped on reading."""
    out = tmp_path / "run"
    run(dataset, out, limit=1)
    text = (out / "results.jsonl").read_text()
    (out / "results.jsonl").write_text('{"id": "q2", "meth\n' + text)
    with pytest.warns(UserWarning, match="skipped 1 incomplete line"):
        assert [r["id"] for r in read_results(out)] == ["q1"]


_KILLED_RUN = """
import os, signal, sys
from gaprag.cli import main
kill_at = int(os.environ.get("KILL_AT_ROW") or 0)
if kill_at:
    real, rows = os.write, []
    def write(fd, data):
        if bytes(data[:11]) == b'{"dataset":':
            rows.append(1)
            if len(rows) == kill_at:  # killed in the middle of writing this row
                real(fd, bytes(data[: len(data) // 2]))
                os.kill(os.getpid(), signal.SIGKILL)
        return real(fd, data)
    os.write = write
sys.exit(main(sys.argv[1:]))
"""


def _big_dataset(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "many.jsonl"
    lines = []
    for i in range(n):
        qid, question, answers, supporting = QUESTIONS[i % len(QUESTIONS)]
        lines.append(json.dumps(record_of(f"{qid}-{i}", question, answers, supporting)))
    path.write_text("\n".join(lines) + "\n")
    return path


def _eval_subprocess(argv: list[str], env: dict[str, str] | None = None) -> Any:
    import os
    import subprocess
    import sys

    import gaprag

    root = str(Path(gaprag.__file__).resolve().parents[1])
    environ = {**os.environ, "PYTHONPATH": root, **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-c", _KILLED_RUN, *argv],
        env=environ,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _complete_lines(path: Path) -> tuple[list[dict[str, Any]], bool]:
    """The rows of a results file and whether it ends in a torn line."""
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    torn = lines[-1] != b""
    rows = [json.loads(line) for line in lines[:-1] if line]  # the last is "" or torn
    return rows, torn


@pytest.mark.parametrize("how", ["mid_write", "any_moment"])
def test_kill_9_then_resume_keeps_every_finished_question_and_repeats_none(
    tmp_path: Path, how: str
) -> None:
    """``kill -9`` during ``gaprag eval`` (inside a row's write, or at a random moment), then
    ``--resume``: finished rows are kept, none is asked again, no torn line remains."""
    import signal

    from gaprag.cli import main
    from gaprag.stores import Store
    from gaprag.stores.documents import Document
    from tests.fake_openai import FakeOpenAI

    n = 30
    data = _big_dataset(tmp_path, n)
    docs = [Document(id=p, title=t, text=x) for p, (t, x) in PARAS.items()]
    store = Store.build(tmp_path / "store", docs, embedder=HashingEmbedder(), progress=False)
    out = tmp_path / "out"

    def slow(body: dict[str, Any]) -> str:
        time.sleep(0.05)
        return "Paris"

    with FakeOpenAI(reply=slow) as server:
        argv = [
            "eval", "--methods", "standard_rag", "--dataset", str(data), "--out", str(out),
            "--store", str(store.root), "--base-url", server.base_url, "--quiet",
        ]  # fmt: skip
        proc = _eval_subprocess(argv, {"KILL_AT_ROW": "6" if how == "mid_write" else ""})
        if how == "any_moment":
            results = out / "results.jsonl"
            for _ in range(1200):  # bounded: at most 120 s
                if results.is_file() and results.read_bytes().count(b"\n") >= 8:
                    break
                if proc.poll() is not None:
                    break
                time.sleep(0.1)
            proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == -signal.SIGKILL, err.decode()[-2000:]
        rows, torn = _complete_lines(out / "results.jsonl")
        if how == "mid_write":
            assert torn and len(rows) == 5  # the sixth row was cut in half
        assert 0 < len(rows) < n
        assert len(server.requests) >= len(rows)
    with FakeOpenAI(reply="Paris") as again:  # its own server: count only the resumed run's calls
        argv[argv.index("--base-url") + 1] = again.base_url
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the dropped torn line is announced
            assert main([*argv, "--resume"]) == 0
        asked_again = len(again.requests)
    final, torn = _complete_lines(out / "results.jsonl")
    assert not torn
    assert sorted(r["id"] for r in final) == sorted(f"{q[0]}-{i}" for i, q in enumerate(
        QUESTIONS[i % len(QUESTIONS)] for i in range(n)))  # fmt: skip
    assert asked_again == n - len(rows)  # every finished question kept, none asked again


def test_two_eval_processes_on_one_directory(tmp_path: Path) -> None:
    """A second ``gaprag eval`` on a directory in use is refused with a clear message."""
    from gaprag.stores import Store
    from gaprag.stores.documents import Document
    from tests.fake_openai import FakeOpenAI

    data = _big_dataset(tmp_path, 10)
    docs = [Document(id=p, title=t, text=x) for p, (t, x) in PARAS.items()]
    store = Store.build(tmp_path / "store", docs, embedder=HashingEmbedder(), progress=False)
    out = tmp_path / "out"
    release = threading.Event()

    def held(body: dict[str, Any]) -> str:
        release.wait(timeout=120)  # the first run stays inside its first question
        return "Paris"

    with FakeOpenAI(reply=held) as server:
        argv = [
            "eval", "--methods", "standard_rag", "--dataset", str(data), "--out", str(out),
            "--store", str(store.root), "--base-url", server.base_url, "--quiet",
        ]  # fmt: skip
        first = _eval_subprocess(argv)
        try:
            for _ in range(1200):  # bounded: at most 120 s, until the first run asks the model
                if server.requests:
                    break
                assert first.poll() is None
                time.sleep(0.1)
            second = _eval_subprocess([*argv, "--resume"])
            _, err = second.communicate(timeout=300)
            assert second.returncode == 2
            assert "is being written by another `gaprag eval`" in err.decode()
            assert "Traceback" not in err.decode()
        finally:
            release.set()
        assert first.wait(timeout=300) == 0
    rows, torn = _complete_lines(out / "results.jsonl")
    assert len(rows) == 10 and not torn and len(server.requests) == 10


def _failing(bad: set[str]) -> ScriptedChatModel:
    def reply(messages: list[BaseMessage]) -> str:
        text = str(messages[-1].content)
        if any(b in text.rsplit("Question:", 1)[-1] for b in bad):
            raise RuntimeError("model exploded")
        return oracle_reply(messages)

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
    trace = method_traces(out, "standard_rag")["q2"]
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
    """Questions in flight at once, seen by an HTTP endpoint (whatever the client's async path)."""
    from tests.fake_openai import FakeOpenAI

    lock = threading.Lock()
    state = {"now": 0, "peak": 0}

    def slow(body: dict[str, Any]) -> str:
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.3)
        with lock:
            state["now"] -= 1
        return "Paris"

    with FakeOpenAI(reply=slow) as server:
        run(
            dataset, tmp_path / "run", methods=two_methods, concurrency=3, llm=None,
            base_url=server.base_url,
        )  # fmt: skip
        assert len(server.requests) == 10
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
    metrics, costs = [line for line in md.splitlines() if line.startswith("| method |")][:2]
    for column in ("n", "EM", "F1", "Acc", "Support recall", "Retrieval recall",
                   "ΔF1 vs standard_rag", "errors"):  # fmt: skip
        assert f"| {column} |" in metrics
    for column in ("retrieval", "passages/prompt", "LLM calls", "prompt tok",
                   "instructions / passages / other", "cached", "completion tok", "retrievals",
                   "shown", "retrieved", "iterations", "s/question"):  # fmt: skip
        assert f"| {column} |" in costs
    assert "**Best F1: `iterkey`" in md and "on 3 shared questions" in md
    assert "miss rate 1.000" in md
    for plot in summary["plots"]["d"]:
        assert (out / plot).stat().st_size > 1000 and (out / plot).read_bytes()[:4] == b"\x89PNG"
    assert (
        json.loads((out / "summary.json").read_text())["datasets"]["d"]["methods"]["iterkey"]["n"]
        == 5
    )


def test_pooled_table_pairs_per_dataset_and_question(tmp_path: Path) -> None:
    # the same id "q1" in two sets is two questions: pairing must not cross datasets
    rows = [
        _row("standard_rag", "q1", 1.0, dataset="a"),
        _row("standard_rag", "q1", 0.0, dataset="b"),
        _row("standard_rag", "q2", 0.0, dataset="b"),
        _row("migres", "q1", 1.0, dataset="a", llm_calls=4),
        _row("migres", "q1", 1.0, dataset="b", llm_calls=6),
        _row("migres", "q2", 0.0, dataset="b", llm_calls=8),
        _row("mc", "q1", 1.0, dataset="c", choice_correct=1.0),  # multiple choice: not pooled
    ]
    summary = write_report([_write_rows(tmp_path / "runs", rows)], tmp_path / "out", seed=0)
    table = summary["pooled"]
    assert list(table) == ["standard_rag", "migres"]
    mig = table["migres"]
    assert mig["n"] == 3 and mig["datasets"] == ["a", "b"]
    assert mig["f1"]["mean"] == pytest.approx(2 / 3)
    assert mig["cost"]["llm_calls"] == pytest.approx(6.0)
    vs = mig["vs_baseline"]["f1"]
    assert vs["mean"] == pytest.approx(1 / 3)  # b/q1 won, a/q1 and b/q2 tied
    assert (vs["wins"], vs["losses"], vs["ties"]) == (1, 0, 2)
    md = (tmp_path / "out" / "summary.md").read_text()
    assert "## Pooled over 2 datasets (a, b)" in md
    line = next(x for x in md.splitlines() if x.startswith("| migres | 3 |"))
    assert "+0.333 [" in line and "| 1 / 0 |" in line and "| 6.00 |" in line
    html = (tmp_path / "out" / "report.html").read_text()
    assert "Pooled over 2 datasets" in html and "+0.333" in html
    one = write_report([_write_rows(tmp_path / "one", rows[:1])], tmp_path / "o1")
    assert one["pooled"] == {}
    assert "Pooled" not in (tmp_path / "o1" / "summary.md").read_text()


def test_paired_rows_pairs_any_two_methods_by_set_and_question() -> None:
    from gaprag.eval.stats import paired_rows

    plain = [_row("standard_rag", "q1", 0.0, llm_calls=1), _row("standard_rag", "q2", 1.0),
             _row("standard_rag", "q1", 1.0, dataset="e")]  # fmt: skip
    paper = [_row("iterkey_paper", "q1", 1.0, llm_calls=5), _row("iterkey_paper", "q2", 1.0),
             _row("iterkey_paper", "q1", 0.0, dataset="e"),
             _row("iterkey_paper", "q9", 1.0)]  # fmt: skip
    entry = paired_rows(plain, paper)
    # d/q1 won, d/q2 tied, e/q1 lost; q9 has no plain RAG row
    assert entry["n"] == 3 and entry["f1"]["mean"] == pytest.approx(0.0)
    assert (entry["f1"]["wins"], entry["f1"]["losses"], entry["f1"]["ties"]) == (1, 1, 1)
    assert entry["before"]["f1"] == pytest.approx(2 / 3)
    assert entry["after"]["f1"] == pytest.approx(2 / 3)
    assert entry["after"]["llm_calls"] > entry["before"]["llm_calls"]
    with pytest.raises(ValueError, match="after holds rows of iterkey_paper, standard_rag"):
        paired_rows(plain, paper + plain)


def test_report_against_a_before_run(tmp_path: Path) -> None:
    before = _write_rows(tmp_path / "before", [
        _row("iterkey", "q1", 0.0, llm_calls=3), _row("iterkey", "q2", 1.0, llm_calls=3),
        _row("iterkey", "q1", 0.0, dataset="e", llm_calls=3),
        _row("iterkey", "q3", 0.0, llm_calls=3),  # not in the after run
    ])  # fmt: skip
    after = _write_rows(tmp_path / "after", [
        _row("iterkey", "q1", 1.0, llm_calls=9), _row("iterkey", "q2", 1.0, llm_calls=9),
        _row("iterkey", "q1", 1.0, dataset="e", llm_calls=6),
        _row("migres", "q1", 1.0),  # no before rows: left out
    ])  # fmt: skip
    summary = write_report([after], tmp_path / "out", before=[before])
    vb = summary["versus_before"]
    assert vb["dirs"] == ["../before"]  # relative to the report, never a machine path
    d = vb["datasets"]["d"]["iterkey"]
    assert d["n"] == 2 and d["f1"]["mean"] == pytest.approx(0.5)
    assert d["before"]["f1"] == pytest.approx(0.5) and d["after"]["f1"] == pytest.approx(1.0)
    assert d["before"]["llm_calls"] == 3 and d["after"]["llm_calls"] == 9
    assert "migres" not in vb["datasets"]["d"]
    pooled = vb["pooled"]["iterkey"]
    assert pooled["n"] == 3 and (pooled["f1"]["wins"], pooled["f1"]["ties"]) == (2, 1)
    md = (tmp_path / "out" / "summary.md").read_text()
    assert "## Against the before run" in md
    assert "| iterkey | pooled | 3 | 0.333 | 1.000 | +0.667 [" in md and "| 3.00 → 8.00 |" in md
    html = (tmp_path / "out" / "report.html").read_text()
    assert "Against the before run" in html and "3.00 → 8.00" in html
    # the CLI flag, and a wrong directory refused in one line
    from gaprag.cli import main as cli_main

    assert cli_main(["report", str(after), "--before", str(before), "--out",
                     str(tmp_path / "cli")]) == 0  # fmt: skip
    assert "Against the before run" in (tmp_path / "cli" / "summary.md").read_text()
    with pytest.raises(InputError, match=r"no results\.jsonl"):
        write_report([after], tmp_path / "x", before=[tmp_path / "nowhere"])


def test_rows_from_older_runs_still_report(tmp_path: Path) -> None:
    """Committed rows from before the two recalls: their recall becomes retrieval recall."""
    old = Path(__file__).resolve().parents[2] / "docs" / "results" / "musique.results.jsonl"
    rows = read_results(old)
    assert rows and all("retrieval_recall" not in r and "decisions" not in r for r in rows)
    d = _write_rows(tmp_path / "old", rows)
    summary = write_report([d], tmp_path / "rep", n_boot=200)
    ds = summary["datasets"]["musique"]
    for method, entry in ds["methods"].items():
        ok = [r for r in rows if r["method"] == method and not r.get("error")]
        values = [r["support_recall"] for r in ok if r.get("support_recall") is not None]
        assert entry["retrieval_recall"]["mean"] == pytest.approx(sum(values) / len(values))
        assert entry["support_recall"]["mean"] is None and entry["legacy_recall"]
        assert entry["decisions"] == {} and entry["cost"]["instruction_tokens"] is None
        assert entry["settings"]["method"] == method
    md = (tmp_path / "rep" / "summary.md").read_text()
    assert "support recall is unknown" in md


def test_calibration_may_not_touch_the_reported_questions() -> None:
    from gaprag.datasets import calibration_slice, check_no_overlap

    examples = list(range(100))
    assert calibration_slice(examples) == list(range(60, 100))
    assert calibration_slice(examples, 70, 5) == [70, 71, 72, 73, 74]
    with pytest.raises(InputError, match="may not start at question 50"):
        calibration_slice(examples, 50)
    with pytest.raises(InputError, match=r"2 reserved question\(s\) \(index 3, 49\)"):
        check_no_overlap([3, 49, 60, 61])
    check_no_overlap([60, 99])
    with pytest.raises(InputError, match="no questions from index 60"):
        calibration_slice(list(range(40)))


def test_calibration_script_refuses_an_overlap(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.scripts import load_script

    module = load_script("benchmarks/calibrate_migres_filter.py")
    assert module.main(["--start", "0", "--embedder", "hashing"]) == 2
    assert "questions 0-59 are reserved" in capsys.readouterr().err
    rows = module.held_out(module.DATA / "hotpotqa.dev.jsonl", 60, 3)
    ids = [e.id for e in load_dataset("hotpotqa").examples]
    assert [r["id"] for r in rows] == ids[60:63]


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
    assert (tmp_path / "rep" / "report.html").is_file()
    assert "report.html" in capsys.readouterr().out
    # a named variant from the command line, without --methods
    with FakeOpenAI(reply="Paris") as server:
        code = main([
            "eval", "--variant", "k1=standard_rag:top_k=1,retrieval_mode=bm25", "--dataset",
            str(dataset), "--limit", "1", "--out", str(tmp_path / "var"), "--store",
            str(store.root), "--base-url", server.base_url, "--quiet",
        ])  # fmt: skip
        assert code == 0
    (row,) = read_results(tmp_path / "var")
    assert row["method"] == "k1" and row["base_method"] == "standard_rag"
    assert row["options"] == {"top_k": 1, "retrieval_mode": "bm25"}
    assert len(row["retrieved_ids"]) == 1
    assert main(["eval", "--dataset", str(dataset), "--quiet"]) == 2
    assert "no methods given" in capsys.readouterr().err
    assert main(["eval", "--methods", "standard_rag", "--dataset", "nope", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "no bundled dataset or file named 'nope'" in err and "Traceback" not in err


def test_a_limit_beyond_the_dataset_is_reported(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(dataset, tmp_path / "run", methods=["standard_rag"], limit=2000)
    err = capsys.readouterr().err
    assert "--limit 2000 but capitals has 5 question(s)" in err
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["limit"] == 2000 and info["selected"] == 5


def test_run_json_keeps_no_machine_paths(dataset: Path, tmp_path: Path) -> None:
    from gaprag.config import gaprag_home
    from gaprag.eval.record import portable_path

    assert portable_path(gaprag_home() / "stores" / "s1") == "$GAPRAG_HOME/stores/s1"
    bundled_file = Path(__file__).resolve().parents[2] / "gaprag" / "data" / "eval" / "x.jsonl"
    assert portable_path(bundled_file) == "gaprag/data/eval/x.jsonl"
    assert portable_path(Path.cwd() / "runs" / "a") == "./runs/a"
    assert portable_path("") == ""


def test_short_answer_calls_count_every_call_the_step_made(dataset: Path, tmp_path: Path) -> None:
    long = "The answer, as far as these passages go, is given in the first passage."

    def reply(messages: list[BaseMessage]) -> str:
        last = str(messages[-1].content)
        if not last.endswith("Shortest answer:"):
            return long
        # the step's reply is used for q1 only; elsewhere it is no shorter and the answer is kept
        return "Paris" if "France" in last else long + " Longer."

    out = tmp_path / "run"
    run(dataset, out, llm=ScriptedChatModel(default=reply))
    rows = {r["id"]: r for r in read_results(out)}
    assert rows["q1"]["prediction"] == "Paris" and rows["q2"]["prediction"] == long.rstrip(".")
    for row in rows.values():
        assert row["llm_calls"] == 2 and row["short_answer_calls"] == 1, row["id"]


def test_protocol_names_only_the_methods_with_rows(dataset: Path, tmp_path: Path) -> None:
    """A resumed run's run.json keeps an earlier method list; the report's protocol line names
    the methods its tables show, not one that never wrote a row."""
    out = tmp_path / "run"
    run(dataset, out, llm=oracle())
    info = json.loads((out / "run.json").read_text())
    info["methods"]["ircot"] = {}
    (out / "run.json").write_text(json.dumps(info))
    write_report([out])
    protocol = next(
        line for line in (out / "summary.md").read_text().splitlines() if "methods `" in line
    )
    assert "`standard_rag`" in protocol and "ircot" not in protocol


# -- replies shared across methods in one run ---------------------------------------------
#: plain RAG, and an iterative method whose gate sends plain RAG's request again
GATED = [
    "iterkey.gate=logprob_mean",
    "iterkey.max_passage_words=150",
    "iterkey.max_iterations=1",
    "iterkey.answer_max_tokens=48",
]


def _costs(out: Path) -> dict[tuple[str, str], tuple[Any, ...]]:
    keys = ("prediction", "llm_calls", "prompt_tokens", "completion_tokens", "f1")
    return {(r["method"], r["id"]): tuple(r[k] for k in keys) for r in read_results(out)}


def _run(dataset: Path, out: Path, reuse: bool, **kwargs: Any) -> ScriptedChatModel:
    fake = ScriptedChatModel(default=oracle_reply, latency=kwargs.pop("latency", 0.0))
    run(dataset, out, llm=fake, reuse=reuse, **kwargs)
    return fake


def test_reuse_keeps_predictions_and_costs_and_sends_fewer_requests(
    dataset: Path, tmp_path: Path
) -> None:
    methods = ["standard_rag", "iterkey"]
    plain = _run(dataset, tmp_path / "plain", False, methods=methods, sets=GATED)
    shared = _run(dataset, tmp_path / "shared", True, methods=methods, sets=GATED)
    assert _costs(tmp_path / "shared") == _costs(tmp_path / "plain")
    saved = len(plain.calls) - len(shared.calls)
    assert saved >= 5  # at least the gate's first call on each of the five questions
    reuse = json.loads((tmp_path / "shared" / "run.json").read_text())["reuse"]
    assert reuse["on"] is True and reuse["reused_calls"] == saved
    off = json.loads((tmp_path / "plain" / "run.json").read_text())["reuse"]
    assert off == {"on": False, "reused_calls": 0, "seconds_saved": 0.0}
    traces = list(method_traces(tmp_path / "shared", "iterkey").values())
    assert sum(t["reused_calls"] for t in traces) == saved
    for trace in traces:  # the reused call is in the trace like a sent one
        assert len(trace["llm_calls"]) == trace["usage"]["llm_calls"]


def test_escalating_rag_answers_its_plain_call_from_standard_rags_and_costs_the_same(
    dataset: Path, tmp_path: Path
) -> None:
    methods = ["standard_rag", "escalating_rag"]
    sets = ["escalating_rag.calibration=true", "escalating_rag.second_loop=none"]
    plain = _run(dataset, tmp_path / "plain", False, methods=methods, sets=sets)
    shared = _run(dataset, tmp_path / "shared", True, methods=methods, sets=sets)
    assert _costs(tmp_path / "shared") == _costs(tmp_path / "plain")
    assert len(plain.calls) - len(shared.calls) >= 5  # plain RAG's call, once per question
    rows = [r for r in read_results(tmp_path / "shared") if r["method"] == "escalating_rag"]
    assert rows and all(r["candidates"][0]["method"] == "standard_rag" for r in rows)


def test_a_second_identical_request_waits_for_the_first_and_reports_its_time(
    dataset: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    fake = _run(
        dataset,
        out,
        True,
        methods=[],
        variants=["a=standard_rag", "b=standard_rag"],
        concurrency=2,
        limit=2,
        latency=0.3,
    )
    assert len(fake.calls) == 2  # one per question: the twin request waited for it
    rows = read_results(out)
    assert len(rows) == 4 and all(r["llm_calls"] == 1 for r in rows)
    assert all(r["wall_s"] >= 0.3 for r in rows)  # as if sent
    assert json.loads((out / "run.json").read_text())["reuse"]["reused_calls"] == 2


def test_reuse_is_off_by_default_for_a_model_gaprag_does_not_serve(
    dataset: Path, tmp_path: Path
) -> None:
    fake = ScriptedChatModel(default=oracle_reply)
    run(dataset, tmp_path, llm=fake, methods=[], variants=["a=standard_rag", "b=standard_rag"])
    assert len(fake.calls) == 10
    assert json.loads((tmp_path / "run.json").read_text())["reuse"]["on"] is False


def test_shared_replies_are_per_question_and_count_as_calls() -> None:
    fake = ScriptedChatModel(default="Paris")
    llm, store = LLM(fake), SharedReplies()

    async def ask(question: str) -> int:
        with shared_scope(store, question) as tally:
            await llm.agenerate("Capital of France?", max_tokens=8)
        return tally.reused

    assert asyncio.run(ask("q1")) == 0
    assert asyncio.run(ask("q1")) == 1
    assert asyncio.run(ask("q2")) == 0  # another question: sent again
    assert len(fake.calls) == 2 and store.reused == 1


def test_a_failed_first_request_is_sent_again_by_the_next() -> None:
    class Flaky(ScriptedChatModel):
        fail: bool = True

        async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
            if self.fail:
                self.fail = False
                raise ValueError("boom")
            return await super()._agenerate(*args, **kwargs)

    llm, store = LLM(Flaky(default="Paris")), SharedReplies()

    async def ask() -> str:
        with shared_scope(store, "q1"):
            return await llm.agenerate("Capital of France?", max_tokens=8)

    with pytest.raises(ValueError):
        asyncio.run(ask())
    assert asyncio.run(ask()) == "Paris"


def test_a_reused_call_reports_the_seconds_of_the_call_it_stands_for(
    dataset: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    variants = ["a=standard_rag", "b=standard_rag"]
    fake = _run(dataset, out, True, methods=[], variants=variants, limit=2, latency=0.3)
    assert len(fake.calls) == 2
    second = [r for r in read_results(out) if r["method"] == "b"]
    assert len(second) == 2 and all(r["wall_s"] >= 0.3 for r in second)
    assert json.loads((out / "run.json").read_text())["reuse"]["seconds_saved"] >= 0.5


@pytest.mark.parametrize(("flags", "reuse"), [([], None), (["--no-reuse"], False)])
def test_no_reuse_on_the_command_line_turns_reuse_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, flags: list[str], reuse: bool | None
) -> None:
    from gaprag.cli import main
    from gaprag.eval import runner

    seen: list[Any] = []

    def fake_evaluate(settings: Any) -> dict[str, Any]:
        seen.append(settings)
        return {"new_rows": 0, "skipped": 0, "errors": 0}

    monkeypatch.setattr(runner, "evaluate", fake_evaluate)
    args = ["eval", "--methods", "standard_rag", "--dataset", "hotpotqa", "--quiet"]
    assert main([*args, "--out", str(tmp_path), *flags]) == 0
    assert seen[0].reuse is reuse


def test_two_identical_requests_in_flight_are_sent_once() -> None:
    fake = ScriptedChatModel(default="Paris", latency=0.2)
    llm, store = LLM(fake), SharedReplies()

    async def ask(method: str) -> tuple[str, int]:
        with shared_scope(store, "q1") as tally:
            return await llm.agenerate("Capital of France?", max_tokens=8), tally.reused

    async def both() -> list[tuple[str, int]]:
        return list(await asyncio.gather(ask("a"), ask("b")))

    assert sorted(asyncio.run(both())) == [("Paris", 0), ("Paris", 1)]
    assert len(fake.calls) == 1


def test_the_paper_table_pairs_each_run_with_its_own_plain_rag(tmp_path: Path) -> None:
    from tests.scripts import load_script

    module = load_script("scripts/paper_table.py")
    hp = "hotpotqa"
    _write_rows(tmp_path / "paper" / hp, [
        _row("standard_rag", "q1", 0.0, dataset=hp), _row("standard_rag", "q2", 0.0, dataset=hp),
        _row("iterkey_paper", "q1", 1.0, dataset=hp, llm_calls=4),
        _row("iterkey_paper", "q2", 0.0, dataset=hp, llm_calls=4),
    ])  # fmt: skip
    _write_rows(tmp_path / "shipped" / hp, [
        _row("standard_rag", "q1", 1.0, dataset=hp), _row("standard_rag", "q2", 1.0, dataset=hp),
        _row("iterkey", "q1", 1.0, dataset=hp, llm_calls=3),
        _row("standard_rag", "q3", 1.0, dataset=hp), _row("iterkey", "q3", 0.0, dataset=hp),
    ])  # fmt: skip
    paper, shipped = module.rows_of(tmp_path / "paper"), module.rows_of(tmp_path / "shipped")
    text = module.table(module.comparisons(paper, shipped))
    row = next(line for line in text.splitlines() if line.startswith("| IterKey"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # questions, plain RAG, paper F1, ΔF1, calls | the paper's | shipped run's plain RAG (on
    # the paper run's questions only: q3 is left out), shipped F1, ΔF1, calls
    assert cells[1:5] == ["2", "0.000", "0.500", "+0.500 [+0.000, +1.000]"] and cells[5] == "4.0"
    assert cells[8:11] == ["1.000 (n = 1)", "1.000", "+0.000 [+0.000, +0.000]"]
    assert cells[11] == "3.0"
    assert not any(line.startswith("| MIGRES") for line in text.splitlines())  # no rows


def test_the_paper_table_writes_each_method_page_section_once(tmp_path: Path) -> None:
    from tests.scripts import load_script

    module = load_script("scripts/paper_table.py")
    hp = "hotpotqa"
    _write_rows(tmp_path / "paper" / hp, [
        _row("standard_rag", "q1", 0.0, dataset=hp),
        _row("ircot_paper", "q1", 1.0, dataset=hp, stop_reason="empty_step"),
    ])  # fmt: skip
    _write_rows(tmp_path / "shipped" / hp, [_row("standard_rag", "q1", 1.0, dataset=hp)])
    page = tmp_path / "ircot.md"
    page.write_text("# IRCoT\n\n## Measured\n\n### Older rows\n\ntext\n")
    paper, shipped = module.rows_of(tmp_path / "paper"), module.rows_of(tmp_path / "shipped")
    ircot = module.compare(paper, shipped, "ircot")
    for _ in range(2):  # a second run replaces the section
        module.write_page_section(page, module.page_section(ircot, "1 of HotpotQA", "abc", "def"))
    text = page.read_text()
    assert text.count(module.PAGE_HEADING) == 1
    assert text.index("## Measured") < text.index(module.PAGE_HEADING) < text.index("### Older")
    assert "| paper mode | 1 | 1.000 | +1.000 [+1.000, +1.000] |" in text
    assert "Where paper mode stopped (1 questions): `empty_step` 1." in text
    assert "(commit `def`, prompt cache off" in text  # the shipped run's commit, as given
    assert module.compare(paper, shipped, "migres") is None


def test_the_paper_table_pairs_each_rag_ef_ladder_with_its_own_plain_rag(tmp_path: Path) -> None:
    from tests.scripts import load_script

    module = load_script("scripts/paper_table.py")
    hp, ladder = "hotpotqa", module.LADDER_VARIANT
    _write_rows(tmp_path / "paper" / hp, [
        _row("standard_rag", "q1", 0.0, dataset=hp), _row("standard_rag", "q2", 1.0, dataset=hp),
        _row(ladder, "q1", 1.0, dataset=hp), _row(ladder, "q2", 1.0, dataset=hp),
        _row("rag_ef_S", "q1", 0.0, dataset=hp), _row("rag_ef_S", "q2", 0.0, dataset=hp),
    ])  # fmt: skip
    _write_rows(tmp_path / "shipped" / hp, [
        _row("standard_rag", "q1", 1.0, dataset=hp), _row("standard_rag", "q2", 1.0, dataset=hp),
        _row(ladder, "q1", 0.0, dataset=hp), _row(ladder, "q2", 1.0, dataset=hp),
    ])  # fmt: skip
    rag_ef = module.ladder(tmp_path / "paper", tmp_path / "shipped")
    row = next(line for line in module.table([rag_ef]).splitlines() if line.startswith("| RAG-EF"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:5] == ["2", "0.500", "1.000", "+0.500 [+0.000, +1.000]"]
    assert cells[7] == "1"  # the paper's one answer call
    assert cells[8:11] == ["1.000", "0.500", "-0.500 [-1.000, +0.000]"]
    assert module.ladder(tmp_path / "shipped" / "none", tmp_path / "shipped") is None
    section = module.readme_section([rag_ef], "done", "abc")
    assert "RAG-EF on its HotpotQA ladder" in section


def test_the_paper_table_names_only_intervals_that_exclude_zero(tmp_path: Path) -> None:
    from tests.scripts import load_script

    module = load_script("scripts/paper_table.py")
    hp, rows = "hotpotqa", []
    for i in range(6):
        rows += [_row("standard_rag", f"q{i}", 0.0, dataset=hp),
                 _row("iterkey_paper", f"q{i}", 1.0, dataset=hp),
                 _row("migres_paper", f"q{i}", 0.0, dataset=hp)]  # fmt: skip
    _write_rows(tmp_path / "paper" / hp, rows)
    found = module.comparisons(module.rows_of(tmp_path / "paper"), [])
    assert module.verdict(found) == "IterKey above plain RAG"


def test_the_paper_table_says_when_its_run_is_complete() -> None:
    from tests.scripts import load_script

    module = load_script("scripts/paper_table.py")
    complete = {"HotpotQA": 20, "2Wiki": 20, "MuSiQue": 20}
    assert module.covered(complete) == "questions 0-19 of each set, 60 paired"
    partial = module.covered({"HotpotQA": 20, "2Wiki": 9})
    assert partial == "20 of HotpotQA, 9 of 2Wiki; 0-19 of each set when complete"


def test_run_json_records_the_code_each_methods_rows_were_made_with(
    dataset: Path, tmp_path: Path
) -> None:
    import subprocess

    from gaprag import __version__

    out = tmp_path / "run"
    run(dataset, out, methods=["standard_rag"], limit=1)
    code = json.loads((out / "run.json").read_text())["code"]
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
        cwd=Path(__file__).resolve().parents[2],
    ).stdout.strip()  # fmt: skip
    assert [v["gaprag"] for v in code["standard_rag"]] == [__version__]
    assert [v["commit"] for v in code["standard_rag"]] == [head]
    info = json.loads((out / "run.json").read_text())
    info["code"]["standard_rag"] = [{"gaprag": "0.1.0", "commit": "0000000", "changed": False}]
    (out / "run.json").write_text(json.dumps(info))
    run(dataset, out, methods=["standard_rag", "iterkey"], limit=2, resume=True)
    code = json.loads((out / "run.json").read_text())["code"]
    assert [v["commit"] for v in code["standard_rag"]] == ["0000000", head]
    assert [v["commit"] for v in code["iterkey"]] == [head]
