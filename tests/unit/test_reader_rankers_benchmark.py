"""benchmarks/reader_rankers.py: what it rebuilds from a run's trace is what the shared reader
is handed, its split guard, its answers and its report."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gaprag import build_graph
from gaprag.datasets import Dataset, Example
from gaprag.errors import InputError
from gaprag.eval.planning import resolved_settings
from gaprag.eval.results import ResultsWriter
from gaprag.eval.runner import run_one
from gaprag.llm.client import LLM
from gaprag.stores.documents import Document
from gaprag.stores.embeddings import HashingEmbedder
from gaprag.stores.store import Store
from gaprag.testing import ScriptedChatModel
from gaprag.traces import TraceWriter
from tests.golden.snapshot import DOCS, pick
from tests.scripts import load_script

rr = load_script("benchmarks/reader_rankers.py")

READER = "The passages are ordered from least to most relevant"  # the reader's prompt
QUESTIONS = {
    60: ("Who built the Eiffel Tower, and in which city is it?", ["Gustave Eiffel"], ["eiffel", "gustave"]),
    61: ("Who wrote Hamlet?", ["William Shakespeare"], ["hamlet", "shakes"]),
}  # fmt: skip

PARAGRAPHS = [Document(id=d["id"], title=d["title"], text=d["text"]) for d in DOCS]


def _dataset(tmp_path: Path) -> Dataset:
    examples = [
        Example(id=f"q{i}", question=f"Reserved question {i}?", answers=["x"], paragraphs=[])
        for i in range(60)
    ]
    for i, (question, answers, supporting) in QUESTIONS.items():
        examples.append(
            Example(id=f"q{i}", question=question, answers=answers, supporting=supporting,
                    paragraphs=PARAGRAPHS)
        )  # fmt: skip
    return Dataset(name="tiny", path=tmp_path / "tiny.jsonl", examples=examples, sha256="x")


@pytest.fixture
def dataset(tmp_path: Path) -> Dataset:
    return _dataset(tmp_path)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.build(tmp_path / "s", PARAGRAPHS, embedder=HashingEmbedder(), progress=False)


def _options(gate: bool) -> dict[str, Any]:
    return {"calibration": True, **({"gate": "logprob_mean"} if gate else {})}


def golden_model() -> ScriptedChatModel:
    return ScriptedChatModel(default=pick)


def calibration_run(
    out: Path, dataset: Dataset, store: Store, methods: list[str], *, gate: bool = False,
    indices: tuple[int, ...] = (60, 61), model: Callable[[], ScriptedChatModel] = golden_model,
) -> Path:  # fmt: skip
    """A calibration run directory of ``methods`` as ``gaprag eval`` writes it, with the
    hash-scripted model of the golden snapshot."""
    out.mkdir(parents=True, exist_ok=True)
    traces = TraceWriter(out)
    writer = ResultsWriter(out / "results.jsonl")
    options = _options(gate)
    for method in methods:
        graph = build_graph(method, llm=model(), retriever=store, **options)
        for i in indices:
            ex = dataset.examples[i]
            row = asyncio.run(run_one(graph, method, dataset, ex, options, traces))
            assert row["error"] is None, row["error"]
            writer.write(row)
    writer.close()
    info = {
        "dataset": dataset.name,
        "corpus": {"embedder": store.embedder.name},
        "settings": {m: resolved_settings(m, options) for m in methods},
    }
    (out / "run.json").write_text(json.dumps(info), encoding="utf-8")
    return out


def open_tiny(path: Path, dataset: Dataset) -> Any:
    return rr.open_run(path, load=lambda name: dataset)


def assert_reader_input_rebuilt(
    run_dir: Path, dataset: Dataset, store: Store, method: str, gate: bool,
    model: Callable[[], ScriptedChatModel] = golden_model,
) -> list[dict[str, Any]]:  # fmt: skip
    """Each ranker's passages chosen from the rebuilt input are those the graph's own reader
    shows when the method runs again with ``reader="ranked"``; returns the measured rows."""
    bench = open_tiny(run_dir, dataset)
    rows = []
    for task in rr.plan([bench], [method]):
        ex = task.example
        measured = asyncio.run(rr.measure(task, rr.RANKERS, budget=3, embedder=HashingEmbedder()))
        assert measured["gate"] is gate and measured["index"] == task.index
        assert not measured["rebuild_notes"], measured["rebuild_notes"]
        for ranker in rr.RANKERS:
            graph = build_graph(
                method, llm=model(), retriever=store, reader="ranked", reader_ranker=ranker,
                reader_budget=3, **_options(gate),
            )  # fmt: skip
            out = graph.invoke({"question": ex.prompt()})
            record = next(t for t in out["trace"] if t.get("call") == "reader")
            assert measured["rankers"][ranker]["ids"] == record["ids"], (ranker, ex.id)
            assert measured["gathered"]["n"] == record["gathered"]
            got = measured["rankers"][ranker]["support_recall"]
            assert got == len(set(record["ids"]) & set(ex.supporting)) / len(ex.supporting)
        rows.append(measured)
    return rows


CASES = [(m, False) for m in rr.METHODS] + [("ircot", True), ("migres", True)]


@pytest.mark.parametrize(("method", "gate"), CASES)
def test_the_rebuilt_reader_input_shows_what_the_graphs_reader_shows(
    tmp_path: Path, dataset: Dataset, store: Store, method: str, gate: bool
) -> None:
    run_dir = calibration_run(tmp_path / "run", dataset, store, [method], gate=gate)
    assert_reader_input_rebuilt(run_dir, dataset, store, method, gate)


LEAF = (
    '{"useful_information": [{"info": "The Eiffel Tower was built by Gustave Eiffel.", '
    '"support_passages": [0, 1]}, {"info": "Hamlet was written by William Shakespeare.", '
    '"support_passages": [1]}]}'
)


def citing_model() -> ScriptedChatModel:
    """MIGRES's extraction cites the first passages and its verifier accepts every fact, so
    the reader gets evidence snippets from several rounds."""
    return ScriptedChatModel(
        rules=[("Pull out every piece of information", LEAF), ("Statement:", "Yes")],
        default=pick,
    )


def test_migres_evidence_snippets_are_rebuilt_round_by_round(
    tmp_path: Path, dataset: Dataset, store: Store
) -> None:
    run_dir = calibration_run(tmp_path / "run", dataset, store, ["migres"], model=citing_model)
    rows = assert_reader_input_rebuilt(run_dir, dataset, store, "migres", False, citing_model)
    assert rows[0]["own"]["answer_ids"] == ["eiffel", "fr"]  # the passages behind the facts


def test_a_run_with_a_reserved_question_is_refused(
    tmp_path: Path, dataset: Dataset, store: Store
) -> None:
    run_dir = calibration_run(tmp_path / "run", dataset, store, ["ircot"], indices=(61, 5))
    with pytest.raises(InputError, match="reserved"):
        open_tiny(run_dir, dataset)


def test_main_says_a_refusal_in_one_line(tmp_path: Path, dataset: Dataset, store: Store) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "results.jsonl").write_text(json.dumps({"dataset": "hotpotqa", "id": "nope"}) + "\n")
    with pytest.raises(SystemExit) as exit_:
        rr.main([str(bad), "--out", str(tmp_path / "rows.jsonl"), "--quiet"])
    message = str(exit_.value.code)
    assert message.startswith("reader_rankers: ") and "\n" not in message


def test_offline_rows_resume_and_answers_are_added_later(
    tmp_path: Path, dataset: Dataset, store: Store
) -> None:
    run_dir = calibration_run(tmp_path / "run", dataset, store, ["ircot", "iterkey"])
    bench = open_tiny(run_dir, dataset)
    out = tmp_path / "rows.jsonl"
    counts = rr.run([bench], out=out, resume=False, rankers=["retrieval", "bm25"],
                    progress=False, budget=2)  # fmt: skip
    assert counts == {"written": 4, "skipped": 0, "errors": 0}
    with pytest.raises(InputError, match="--resume"):
        rr.run([bench], out=out, resume=False, rankers=["bm25"], progress=False)
    again = rr.run([bench], out=out, resume=True, rankers=["bm25"], progress=False)
    assert again["written"] == 0  # every row is there

    # the reader answers the first question; its empty reply to the second falls back to the
    # method's own answer, as the graph's reader does
    eiffel_q = "Question: Who built the Eiffel Tower"
    chat = ScriptedChatModel(rules=[(eiffel_q, "Answer: Gustave Eiffel.")], default="")
    answered = rr.run([bench], out=out, resume=True, rankers=["retrieval", "bm25"],
                      progress=False, budget=2, llm=lambda: LLM(chat))  # fmt: skip
    assert answered["written"] == 4
    rows = [r for r in rr.read_rows(out) if r["answered"]]
    assert len(rows) == 4 and sum(READER in p for p in chat.prompts()) == 8  # row x ranker
    eiffel = next(r for r in rows if r["index"] == 60)["rankers"]["bm25"]
    assert eiffel["answer"] == "Gustave Eiffel" and eiffel["f1"] == 1.0
    assert eiffel["short_answer"] == "kept" and eiffel["llm_calls"] == 1
    offline = next(r for r in rr.read_rows(out) if r["index"] == 60 and not r["answered"])
    same = next(r for r in rows if r["method"] == offline["method"] and r["index"] == 60)
    assert same["rankers"]["bm25"]["ids"] == offline["rankers"]["bm25"]["ids"]
    assert same["rankers"]["bm25"]["scores"] == offline["rankers"]["bm25"]["scores"]
    assert len(eiffel["ids"]) <= 2 and eiffel["support_recall"] is not None
    hamlet = next(r for r in rows if r["index"] == 61 and r["method"] == "ircot")
    reply = hamlet["rankers"]["retrieval"]
    assert reply["fell_back"] and reply["reader_answer"] == ""
    assert reply["answer"] == hamlet["own"]["prediction"]

    report = rr.summarize(rr.read_rows(out))
    assert "| ircot | 2 |" in report and "## F1 of the answer" in report
    assert "bm25 - own" in report


def test_the_llm_ranker_needs_answer_mode(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="llm ranker"):
        rr.main([str(tmp_path), "--out", str(tmp_path / "x.jsonl"), "--rankers", "bm25,llm"])


def test_a_question_met_in_two_directories_counts_once() -> None:
    row = {"dataset": "d", "method": "ircot", "id": "q60"}
    kept, dropped = rr.latest([{**row, "run": "a"}, {**row, "run": "b"}])
    assert dropped == 1 and kept[0]["run"] == "b"


def test_leaf_snippets_find_the_paragraph_of_each_snippet() -> None:
    docs = {
        "a": {"id": "a", "title": "Mad Season (band)", "text": "One. Mad Season was a band."},
        "b": {"id": "b", "title": "Mad Season (band)", "text": "Another text entirely."},
        "c": {"id": "c", "title": "Other", "text": "Other things."},
    }
    prompt = (
        "Read the passages.\n\nPassage 0: (Title: Mad Season (band)) Mad Season was a band.\n"
        "Passage 1: (Title: Other) Other things.\nQuestion: Who?\nYour response:"
    )
    got = rr.leaf_snippets(prompt, ["a", "b", "c"], docs)
    assert [s["id"] for s in got] == ["a", "c"] and got[0]["text"] == "Mad Season was a band."
    assert rr.leaf_snippets("Question: no passages here", ["a"], docs) is None
