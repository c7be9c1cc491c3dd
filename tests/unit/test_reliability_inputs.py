"""Oversized and malformed input, a strict Python API, private files, no keys in messages,
quiet by default.
The public-API tests rely on ``build_graph`` calling :mod:`gaprag.validate` for the injected
objects and on the first node of every graph checking the question.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document as LCDocument
from langchain_core.embeddings import Embeddings
from langchain_core.language_models.fake import FakeListLLM
from langchain_core.vectorstores import InMemoryVectorStore
from langgraph.errors import EmptyInputError

from gaprag import build_graph, list_methods
from gaprag.cli import main
from gaprag.config import gaprag_home, private_file
from gaprag.errors import EndpointError, GapragError, InputError, redact
from gaprag.stores import HashingEmbedder, Store
from gaprag.stores.documents import read_jsonl
from gaprag.stores.loaders import load_documents
from gaprag.stores.pairs import PairStore
from gaprag.testing import scripted
from gaprag.validate import (
    check_llm,
    check_question,
    check_retriever,
)
from tests.hostile_corpus import FAKE_KEY

METHODS = list_methods()


class _HashEmbeddings(Embeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [list(map(float, v)) for v in HashingEmbedder(16).embed(texts)]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


# -- errors ------------------------------------------------------------------------------------
def test_gaprag_error_str_includes_hint_and_survives_pickling() -> None:
    import pickle

    err = InputError("the question is empty", hint="ask something")
    assert str(err) == "the question is empty (hint: ask something)"
    assert err.message == "the question is empty" and err.hint == "ask something"
    again = pickle.loads(pickle.dumps(err))
    assert isinstance(again, InputError) and str(again) == str(err)
    assert str(GapragError("no hint")) == "no hint"


def test_keys_are_redacted_from_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    err = EndpointError(f"refused: Incorrect API key provided: {FAKE_KEY}", hint=f"key {FAKE_KEY}")
    assert FAKE_KEY not in str(err) and "***" in str(err)
    # key-shaped strings are redacted even when they are not the configured key
    assert "sk-otherkey12345678" not in redact("Bearer sk-otherkey12345678 failed")
    assert redact("Authorization: Bearer abcdefgh12345678") == "Authorization: Bearer ***"


# -- the question ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "needle"),
    [
        (None, "no question given"),
        ("", "the question is empty"),
        ("  \n\t ", "the question is empty"),
        ("\x00\x00", "the question is empty"),
        (42, "must be a string, got int"),
        (b"bytes?", "bytes, not text"),
        (["a list"], "must be a string, got list"),
        ("x" * 100_000, "100,000 characters long; the limit is 4,000"),
    ],
)
def test_check_question_refuses(value: object, needle: str) -> None:
    with pytest.raises(InputError) as err:
        check_question(value)
    assert needle in err.value.message and err.value.hint


def test_check_question_cleans_and_respects_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    assert check_question("  Who wrote\x00 Hamlet? \ud800 ") == "Who wrote  Hamlet?"
    assert check_question("a\nb\tc") == "a\nb\tc"
    monkeypatch.setenv("GAPRAG_MAX_QUESTION_CHARS", "10")
    with pytest.raises(InputError, match="limit is 10"):
        check_question("x" * 11)
    assert check_question("x" * 10) == "x" * 10


# -- injected objects --------------------------------------------------------------------------
def test_check_llm() -> None:
    check_llm(None)
    check_llm(scripted("x"))
    with pytest.raises(InputError) as err:
        check_llm("gpt-4o")
    assert "string" in err.value.message and "ChatOpenAI(model='gpt-4o'" in err.value.hint
    with pytest.raises(InputError, match="completion model"):
        check_llm(FakeListLLM(responses=["x"]))
    with pytest.raises(InputError, match="got dict"):
        check_llm({"model": "x"})


def test_check_retriever(store: Store, tmp_path: Path) -> None:
    check_retriever(None)
    check_retriever(store)
    vs = InMemoryVectorStore(_HashEmbeddings())
    vs.add_documents([LCDocument(page_content="Paris is in France.")])
    check_retriever(vs.as_retriever())
    with pytest.raises(InputError) as err:
        check_retriever(vs)
    assert "VectorStore" in err.value.message and ".as_retriever(" in err.value.hint
    pairs = PairStore.open(tmp_path / "p.sqlite", embedder=HashingEmbedder(16))
    with pytest.raises(InputError, match="PairStore") as err:
        check_retriever(pairs)
    assert ".as_retriever()" in err.value.hint
    check_retriever(pairs.as_retriever())
    with pytest.raises(InputError, match="is a path") as err:
        check_retriever(str(tmp_path / "s"))
    assert "Store.open" in err.value.hint
    with pytest.raises(InputError, match="got int"):
        check_retriever(5)


# -- the same checks through the public API (needs_wiring) -------------------------------------
@pytest.mark.parametrize("method", METHODS)
def test_build_graph_refuses_bad_objects(method: str, store: Store) -> None:
    with pytest.raises(InputError, match="string"):
        build_graph(method, llm="gpt-4o", retriever=store)  # type: ignore[arg-type]
    vs = InMemoryVectorStore(_HashEmbeddings())
    with pytest.raises(InputError) as err:
        build_graph(method, llm=scripted("x"), retriever=vs)
    assert ".as_retriever(" in str(err.value)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(
    "inputs", [{"question": ""}, {"question": None}, {"question": "x" * 100_000}, None]
)
def test_invoke_refuses_bad_questions_before_any_llm_call(
    method: str, inputs: Any, store: Store
) -> None:
    fake = scripted(default="Paris")
    graph = build_graph(method, llm=fake, retriever=store)
    # no input at all never reaches a node: LangGraph's own one-line EmptyInputError
    with pytest.raises(InputError if inputs is not None else EmptyInputError):
        graph.invoke(inputs)
    assert fake.calls == []


def test_as_tool_checks_its_arguments_and_questions(store: Store) -> None:
    from gaprag import as_tool

    with pytest.raises(InputError, match="VectorStore"):
        as_tool("standard_rag", llm=scripted("x"), retriever=InMemoryVectorStore(_HashEmbeddings()))
    with pytest.raises(InputError, match="string"):
        as_tool("standard_rag", llm="gpt-4o", retriever=store)
    tool = as_tool("standard_rag", llm=scripted("x"), retriever=store)
    with pytest.raises(InputError, match="the question is empty"):
        tool.invoke({"question": "  "})


def test_rag_ef_review_without_checkpointer_is_refused(store: Store) -> None:
    """Refused at the first run, before any model call: a graph built without a checkpointer
    may still run as a subgraph of one that has it, and Studio builds graphs without one."""
    fake = scripted("x")
    graph = build_graph("rag_ef", llm=fake, retriever=store, review=True)
    with pytest.raises(InputError, match="checkpointer"):
        graph.invoke({"question": "Who wrote Hamlet?"})
    assert fake.calls == []


def test_readme_chat_openai_example_needs_no_environment_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The README's ChatOpenAI example passes api_key, so it works without OPENAI_API_KEY."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    start = readme.index("ChatOpenAI(base_url=")
    call = readme[start : readme.index(")", start) + 1]
    assert "api_key=" in call
    from langchain_openai import ChatOpenAI

    ns: dict[str, Any] = {"ChatOpenAI": ChatOpenAI}
    chat = eval(call, ns)
    assert isinstance(chat, ChatOpenAI)


# -- oversized and malformed files -------------------------------------------------------------
def test_10mb_jsonl_line_is_refused_with_bounded_memory(tmp_path: Path) -> None:
    corpus = tmp_path / "big.jsonl"
    with corpus.open("w") as fh:
        fh.write('{"id": "a", "text": "ok"}\n')
        fh.write(json.dumps({"id": "b", "text": "word " * 2_000_000}) + "\n")  # 10 MB
    assert corpus.stat().st_size > 10_000_000
    tracemalloc.start()
    try:
        with pytest.raises(InputError) as err:
            list(read_jsonl(corpus))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert f"{corpus}:2: line longer than 4,194,304 bytes" in err.value.message
    assert "GAPRAG_MAX_LINE_BYTES" in err.value.hint
    assert peak < 12 * 1024 * 1024, peak  # the 4 MiB read buffer, never the 10 MB line


def test_line_limit_is_configurable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "' + "x" * 3000 + '"}\n{"text": "short"}\n')
    monkeypatch.setenv("GAPRAG_MAX_LINE_BYTES", "2048")
    with pytest.raises(InputError, match=r"c\.jsonl:1: line longer than 2,048 bytes"):
        list(read_jsonl(corpus))
    monkeypatch.setenv("GAPRAG_MAX_LINE_BYTES", "4096")
    assert len(list(read_jsonl(corpus))) == 2


def test_binary_files_are_skipped_and_other_encodings_read_and_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gaprag.stores import HashingEmbedder
    from gaprag.stores import store as store_module

    monkeypatch.setattr(store_module, "default_embedder", lambda: HashingEmbedder())
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "good.txt").write_text("Paris is the capital of France. " * 5)
    (folder / "latin1.txt").write_bytes("Le café crème coûte deux euros à Paris.".encode("latin-1"))
    (folder / "image.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00binary")
    (folder / "other.bin").write_bytes(os.urandom(64))
    skipped: list[str] = []
    docs = load_documents([folder], skipped=skipped)
    assert {d["title"] for d in docs} == {"good", "latin1"}
    assert "Le café crème coûte deux euros à Paris." in {d["text"] for d in docs}
    assert sorted(Path(s).name for s in skipped) == [
        "image.md (binary, not text)",
        "other.bin (unknown type .bin)",
    ]
    # the CLI reports each file, and the store holds the readable ones
    assert main(["index", str(folder), "--store", str(tmp_path / "s"), "--bm25", "bm25s"]) == 0
    out = capsys.readouterr().out
    assert "latin1.txt: 1 passage(s) (read as cp1252)" in out
    assert "image.md: binary, not text (hint:" in out and "other.bin: unknown type .bin" in out


def test_cli_refuses_a_100kb_question(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ask", "x" * 100_000]) == 2
    err = capsys.readouterr().err
    assert "100,000 characters long" in err and "GAPRAG_MAX_QUESTION_CHARS" in err
    assert len(err.splitlines()) == 2 and "Traceback" not in err


def test_dataset_line_without_answers_names_file_and_line(tmp_path: Path) -> None:
    from gaprag.datasets import load_dataset

    data = tmp_path / "set.jsonl"
    data.write_text(
        '{"id": "1", "question": "q?", "answers": ["a"]}\n{"id": "2", "question": "q2?"}\n'
    )
    with pytest.raises(InputError) as err:
        load_dataset(str(data))
    assert f"{data}:2" in str(err.value) and "answers" in str(err.value)


# -- owner-only files --------------------------------------------------------------------------
def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_gaprag_home_and_checkpoints_are_owner_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gaprag.persistence import sqlite_checkpointer

    home = tmp_path / "fresh-home"
    monkeypatch.setenv("GAPRAG_HOME", str(home))
    assert gaprag_home() == home and _mode(home) == 0o700
    saver = sqlite_checkpointer()
    assert _mode(home / "checkpoints.sqlite") == 0o600
    saver.conn.close()
    log = private_file(home / "logs" / "server.log")
    assert _mode(log) == 0o600


def test_server_log_is_owner_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """EmbeddedServer.start creates its log 0600 in a 0700 folder, binding 127.0.0.1."""
    from gaprag.llm import server as srv

    monkeypatch.setattr(srv, "ensure_model", lambda *_a, **_k: tmp_path / "model.gguf")
    # a stand-in server: a command that exits at once, so start() fails fast after the log exists
    monkeypatch.setattr(
        srv.EmbeddedServer, "command", lambda self, _f: [sys.executable, "-c", "pass"]
    )
    server = srv.EmbeddedServer(model="m", engine="xllamacpp", port=srv.free_port())
    with pytest.raises(EndpointError):
        server.start(timeout_s=20, quiet=True)
    assert server.log_path is not None
    assert _mode(server.log_path) == 0o600 and _mode(server.log_path.parent) == 0o700


def test_embedded_server_commands_bind_loopback() -> None:
    from gaprag.llm.server import EmbeddedServer

    cmd = EmbeddedServer(model="m", engine="llama-cpp-python", port=1234).command(Path("x"))
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
    launcher = (Path(__file__).resolve().parents[2] / "gaprag/llm/_xllama_launcher.py").read_text()
    assert 'params.hostnames = ["127.0.0.1"]' in launcher


# -- quiet by default --------------------------------------------------------------------------
def test_quiet_flag_silences_gaprag_progress(tmp_path: Path) -> None:
    """`gaprag index` loads MiniLM (the source of the "Loading weights" bar) in a subprocess."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "1", "text": "Paris is the capital of France."}\n')
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("GAPRAG_QUIET", None)

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gaprag.cli", *extra, "index", str(corpus), "--store",
             str(tmp_path / "s")],
            capture_output=True, text=True, env=env, timeout=300,
        )  # fmt: skip

    loud = run()
    assert loud.returncode == 0, loud.stderr
    assert "gaprag: 1 passages" in loud.stderr and "gaprag: indexing" in loud.stderr
    # nothing from the libraries: no "Loading weights" bar, no warnings
    assert "Loading weights" not in loud.stderr and "warn" not in loud.stderr.lower()
    quiet = run("--quiet")
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == "", quiet.stderr
    assert "is up to date (1 passages" in quiet.stdout  # the second run found nothing new
