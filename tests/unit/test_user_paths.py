"""Documented user paths do what their documents say, through the user's entry points: the
``gaprag`` command (``gaprag.cli.main``) and the public Python API."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gaprag import build_graph
from gaprag.cli import main
from gaprag.errors import InputError
from gaprag.stores import HashingEmbedder, Store
from gaprag.stores.documents import Document
from gaprag.testing import ScriptedChatModel
from tests.fake_openai import MODEL_ID, FakeOpenAI

BAR = "%|"  # what every tqdm progress bar draws


@pytest.fixture
def store_path(store: Store) -> Path:
    """The ``store`` fixture's folder, as the command line takes it."""
    return store.root


@pytest.fixture
def vllm_like(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    """An endpoint that refuses any model name but its own (as vLLM does), in the environment
    with no model named."""
    from gaprag.llm import endpoint

    monkeypatch.setattr(endpoint, "_models", {})
    monkeypatch.delenv("GAPRAG_MODEL", raising=False)
    with FakeOpenAI(reply="William Shakespeare", check_model=True) as server:
        monkeypatch.setenv("GAPRAG_BASE_URL", server.base_url)
        yield server


def ask_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["ask", *args, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


# -- any endpoint's model ----------------------------------------------------------------
def test_endpoint_without_a_named_model_gets_its_listed_model(
    vllm_like: FakeOpenAI, store_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = ask_json(
        capsys, "Who wrote Hamlet?", "--store", str(store_path), "--set", "retrieval_mode=bm25"
    )
    assert out["answer"] == "William Shakespeare"
    assert {r["model"] for r in vllm_like.requests} == {MODEL_ID}
    # --json reports the settings really in use, and where each comes from
    assert out["settings"]["model"] == {"value": MODEL_ID, "source": "endpoint"}
    assert out["settings"]["base_url"] == {"value": vllm_like.base_url, "source": "environment"}
    assert out["settings"]["store"] == {"value": str(store_path), "source": "explicit"}
    assert out["settings"]["retrieval_mode"] == {"value": "bm25", "source": "explicit"}


def test_endpoint_models_are_asked_once_per_endpoint(vllm_like: FakeOpenAI) -> None:
    from gaprag.llm.endpoint import endpoint_model

    assert [endpoint_model(vllm_like.base_url) for _ in range(3)] == [MODEL_ID] * 3
    assert vllm_like.model_lookups == 1


def test_an_endpoint_that_lists_no_models_gets_default_and_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from gaprag.llm import endpoint
    from gaprag.llm.factory import openai_llm

    monkeypatch.setattr(endpoint, "_models", {})
    with FakeOpenAI(list_models=False) as server, caplog.at_level(logging.WARNING, "gaprag"):
        llm = openai_llm(server.base_url)
        assert llm.generate("hi", max_tokens=4) == "canned answer"
    assert server.requests[0]["model"] == "default"
    assert "named no model" in caplog.text and "GAPRAG_MODEL" in caplog.text


def test_a_named_model_is_sent_as_named(
    vllm_like: FakeOpenAI, store_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("GAPRAG_MODEL", "other-model")
    assert (
        main(
            ["ask", "Who wrote Hamlet?", "--store", str(store_path), "--set", "retrieval_mode=bm25"]
        )
        == 2
    )
    assert vllm_like.requests[0]["model"] == "other-model"  # the endpoint refuses it
    assert vllm_like.model_lookups == 0


def test_eval_records_the_endpoints_model_in_run_json(
    vllm_like: FakeOpenAI, store_path: Path, tmp_path: Path, tiny_docs: list[Document]
) -> None:
    dataset = tmp_path / "d.jsonl"
    record = {"id": "q1", "question": "Who wrote Hamlet?", "answers": ["Shakespeare"],
              "supporting": ["hamlet"], "paragraphs": tiny_docs}  # fmt: skip
    dataset.write_text(json.dumps(record) + "\n")
    out = tmp_path / "run"
    argv = ["eval", "--methods", "standard_rag", "--dataset", str(dataset), "--store", str(store_path),
            "--out", str(out), "--set", "retrieval_mode=bm25", "--quiet"]  # fmt: skip
    assert main(argv) == 0
    run = json.loads((out / "run.json").read_text())
    assert run["serving"]["model"] == MODEL_ID and run["serving"]["endpoint"] == vllm_like.base_url


# -- endpoints without logprobs ------------------------------------------------------------
@pytest.mark.parametrize(
    ("setting", "stop_reason", "decisions"),
    [
        ("retrieve_more", "max_iterations", ["reject", "reject"]),
        ("trust_answer", "validated", ["accept"]),
    ],
)
def test_no_logprobs_decisions_retrieve_more_unless_told_to_trust_the_answer(
    store_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    setting: str, stop_reason: str, decisions: list[str],
) -> None:  # fmt: skip
    """An endpoint without logprobs whose validator answers "True" every time."""
    with FakeOpenAI(reply="True") as server:
        monkeypatch.setenv("GAPRAG_BASE_URL", server.base_url)
        out = ask_json(
            capsys, "Who wrote Hamlet?", "--method", "iterkey", "--store", str(store_path),
            "--set", "max_iterations=2", "--set", f"no_logprobs={setting}",
        )  # fmt: skip
    assert out["stop_reason"] == stop_reason
    assert [d["decision"] for d in out["decisions"]] == decisions
    assert {(d["p"], d["path"]) for d in out["decisions"]} == {(None, "constrained-no-logprobs")}
    assert out["settings"]["no_logprobs"] == {"value": setting, "source": "explicit"}


def test_no_logprobs_setting_is_honoured_by_every_model_decision_helper() -> None:
    from gaprag.llm.client import Choice
    from gaprag.nodes import read_choice, should_stop

    said_yes = read_choice(Choice("Yes", "constrained"), "Yes")
    assert tuple(said_yes) == (None, "constrained-no-logprobs", True)
    assert not should_stop(said_yes.p, 0.5, says_stop=said_yes.says_stop)
    assert should_stop(said_yes.p, 0.5, says_stop=True, no_logprobs="trust_answer")
    assert not should_stop(None, 0.5, calibration=True, says_stop=True, no_logprobs="trust_answer")
    said_no = read_choice(Choice("No", "parsed"), "Yes")
    assert said_no.path == "parsed-no-logprobs"
    assert not should_stop(said_no.p, 0.5, says_stop=said_no.says_stop, no_logprobs="trust_answer")
    on_logprobs = read_choice(Choice("Yes", "logprobs", {"Yes": 0.3, "No": 0.7}), "Yes")
    assert on_logprobs.path == "logprobs" and not should_stop(
        on_logprobs.p, 0.5, says_stop=True, no_logprobs="trust_answer"
    )


# -- --quiet and GAPRAG_QUIET ----------------------------------------------------------------
def _eval_argv(tmp_path: Path, store: Path, tiny_docs: list[Document]) -> list[str]:
    dataset = tmp_path / "d.jsonl"
    records = [{"id": f"q{i}", "question": q, "answers": ["x"], "supporting": [],
                "paragraphs": tiny_docs} for i, q in enumerate(["Who wrote Hamlet?", "Capital?"])]  # fmt: skip
    dataset.write_text("".join(json.dumps(r) + "\n" for r in records))
    return ["eval", "--methods", "standard_rag", "--dataset", str(dataset), "--store", str(store),
            "--out", str(tmp_path / "run"), "--set", "retrieval_mode=bm25"]  # fmt: skip


def _qa_pairs_argv(tmp_path: Path, tiny_docs: list[Document], historical: bool) -> list[str]:
    corpus = tmp_path / "c.jsonl"
    rows = (
        [{"question": d["title"], "answer": d["text"][:10]} for d in tiny_docs]
        if historical
        else tiny_docs
    )
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    extra = ["--historical"] if historical else []
    return ["kb", "qa-pairs", str(corpus), "--out", str(tmp_path / "kb.sqlite"),
            "--embedder", "hashing", *extra]  # fmt: skip


COMMANDS = ["eval", "kb qa-pairs", "kb qa-pairs --historical"]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("how", ["none", "global --quiet", "GAPRAG_QUIET=1", "command --quiet"])
def test_quiet_silences_every_command(
    command: str, how: str, store_path: Path, tmp_path: Path, tiny_docs: list[Document],
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.delenv("GAPRAG_QUIET", raising=False)
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    if command == "eval":
        argv = _eval_argv(tmp_path, store_path, tiny_docs)
    else:
        argv = _qa_pairs_argv(tmp_path, tiny_docs, historical="historical" in command)
    if how == "global --quiet":
        argv = ["--quiet", *argv]
    elif how == "command --quiet":
        argv = [*argv, "--quiet"]
    elif how == "GAPRAG_QUIET=1":
        monkeypatch.setenv("GAPRAG_QUIET", "1")
    reply = '{"pairs": [{"question": "Who?", "answer": "Him"}]}'
    with FakeOpenAI(reply=reply) as server:
        monkeypatch.setenv("GAPRAG_BASE_URL", server.base_url)
        assert main(argv) == 0
    err = capsys.readouterr().err
    assert (BAR in err) is (how == "none"), err
    # the switch lasts for the command only
    assert ("GAPRAG_QUIET" in os.environ) is (how == "GAPRAG_QUIET=1")


# -- --stream --------------------------------------------------------------------------------
def test_stream_lines_show_decisions_readably(
    store_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeOpenAI(reply="True") as server:
        monkeypatch.setenv("GAPRAG_BASE_URL", server.base_url)
        argv = ["ask", "Who wrote Hamlet?", "--method", "iterkey", "--store", str(store_path),
                "--set", "max_iterations=1", "--stream"]  # fmt: skip
        assert main(argv) == 0
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if x.startswith("[validate_answer]"))
    assert "decisions=[reject (constrained-no-logprobs)]" in line and "[None" not in err


# -- settings discovery ----------------------------------------------------------------------
def test_settings_command_lists_values_sources_and_descriptions(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["settings", "iterkey", "--json", "--profile", "none", "--set", "top_k=4"]) == 0
    settings = json.loads(capsys.readouterr().out)
    assert settings["top_k"]["value"] == 4 and settings["top_k"]["source"] == "explicit"
    assert settings["max_iterations"]["source"] == "default"
    assert settings["max_iterations"]["minimum"] == 1
    assert settings["max_iterations"]["maximum"] == 25
    assert settings["store"]["operator"] is True and "operator" not in settings["top_k"]
    assert settings["no_logprobs"]["value"] == "retrieve_more"
    assert all(entry["description"] for entry in settings.values())
    assert settings["base_url"]["source"] == "embedded server"
    assert main(["settings", "iterkey", "--profile", "qwen2.5-coder-1.5b"]) == 0
    text = capsys.readouterr().out
    assert "max_iterations" in text and "[profile " in text  # the shipped profile applies


def test_unknown_set_key_names_the_settings_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ask", "q", "--method", "iterkey", "--set", "topk=3"]) == 2
    err = capsys.readouterr().err
    assert "unknown option 'topk'" in err and "`gaprag settings iterkey`" in err


# -- the Python API refuses what it does not know --------------------------------------------
@pytest.fixture
def graph(tmp_path: Path, tiny_docs: list[Document]) -> Any:
    retriever = Store.build(tmp_path / "g", tiny_docs, embedder=HashingEmbedder(), progress=False)
    return build_graph(
        "standard_rag", llm=ScriptedChatModel(replies=["x"] * 4), retriever=retriever
    )


def test_unknown_run_time_setting_is_refused_with_the_valid_names(graph: Any) -> None:
    with pytest.raises(
        InputError, match=r"unknown setting\(s\) 'topk' \(did you mean top_k\?\)"
    ) as err:
        graph.invoke({"question": "Who wrote Hamlet?"}, context={"topk": 3})
    assert "top_k" in err.value.hint and "gaprag settings standard_rag" in err.value.hint


def test_unknown_run_time_setting_is_refused_in_async_runs_too(graph: Any) -> None:
    import asyncio

    with pytest.raises(InputError, match="topk"):
        asyncio.run(graph.ainvoke({"question": "Who wrote Hamlet?"}, context={"topk": 3}))


def test_an_input_without_a_question_is_refused_with_the_inputs(graph: Any) -> None:
    with pytest.raises(InputError, match=r"no 'question'.*'dataset_id'"):
        graph.invoke({"q": "Who wrote Hamlet?"})
    assert graph.invoke({"question": "Who wrote Hamlet?"}, context={"top_k": 2})["answer"] == "x"


def test_resolve_context_refuses_unknown_dict_keys_but_matches_a_parent_object() -> None:
    from dataclasses import dataclass

    from gaprag.context import resolve_context
    from gaprag.graphs import context_class

    cls = context_class("standard_rag")
    with pytest.raises(InputError, match="topk"):
        resolve_context(cls, {"topk": 3})

    @dataclass
    class Parent:
        top_k: int = 2
        parent_only: str = "kept out"

    assert resolve_context(cls, Parent()).top_k == 2


# -- errors ----------------------------------------------------------------------------------
def test_argparse_errors_are_one_line_and_a_hint(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["ask", "--method", "nope", "q"])
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("gaprag: error: argument --method")
    assert lines[1] == "  hint: run `gaprag ask --help`"


def test_an_unreachable_endpoint_is_not_remembered_and_not_warned_about(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from gaprag.llm import endpoint

    monkeypatch.setattr(endpoint, "_models", {})
    with caplog.at_level(logging.WARNING, "gaprag"):
        assert endpoint.endpoint_model("http://127.0.0.1:9/v1") == "default"
    assert endpoint.known_model("http://127.0.0.1:9/v1") is None and not caplog.text
