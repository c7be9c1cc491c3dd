"""CLI: user errors are one line plus a hint, non-zero exit, no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gaprag.cli import main
from gaprag.stores import HashingEmbedder, Store
from gaprag.stores.documents import Document


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "gaprag.cli", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["ask", "   "], "the question is empty"),
        (["ask", "q", "--store", "/nonexistent/store"], "no gaprag store at /nonexistent/store"),
        (["index", "/nonexistent/corpus.jsonl", "--store", "/tmp/x"], "no such file or folder"),
        (["ask", "q", "--set", "top_k"], "--set expects key=value"),
        (["ask", "q", "--set", "top_k=many"], "not a valid int"),
        (["ask", "q", "--set", "bogus=1"], "unknown option 'bogus'"),
    ],
)
def test_user_errors(args: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert needle in err and "hint:" in err and "Traceback" not in err


def test_malformed_jsonl_line_number_no_traceback(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "1", "text": "ok"}\n{"id": "2", "text": "ok"}\n{"id": 3, text}\n')
    proc = run_cli("index", str(corpus), "--store", str(tmp_path / "s"))
    assert proc.returncode == 2
    assert "c.jsonl:3: not valid JSON" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "s" / "CURRENT").exists()


def test_binary_corpus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_bytes(b'{"text": "ok"}\n\xff\xfe\x00garbage\n')
    assert main(["index", str(corpus), "--store", str(tmp_path / "s")]) == 2
    assert "c.jsonl:2: not UTF-8 text" in capsys.readouterr().err


def test_unreadable_corpus(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "x"}\n')
    corpus.chmod(0)
    if os.access(corpus, os.R_OK):  # root can read anything
        pytest.skip("running as root: permissions are not enforced")
    assert main(["index", str(corpus), "--store", str(tmp_path / "s")]) == 2


def test_endpoint_down(tmp_path: Path, tiny_docs: list[Document]) -> None:
    Store.build(tmp_path / "s", tiny_docs, embedder=HashingEmbedder(), progress=False)
    proc = run_cli(
        "ask", "Who wrote Hamlet?", "--store", str(tmp_path / "s"), "--set", "retrieval_mode=bm25",
        env={"GAPRAG_BASE_URL": "http://127.0.0.1:9/v1"},
    )  # fmt: skip
    assert proc.returncode == 2
    assert "cannot reach the LLM endpoint at http://127.0.0.1:9/v1" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_ask_json_with_a_fake_endpoint(tmp_path: Path, tiny_docs: list[Document]) -> None:
    from tests.fake_openai import FakeOpenAI

    Store.build(tmp_path / "s", tiny_docs, embedder=HashingEmbedder(), progress=False)
    with FakeOpenAI(reply="William Shakespeare") as server:
        proc = run_cli(
            "ask", "Who wrote Hamlet?", "--store", str(tmp_path / "s"), "--json", "--set", "retrieval_mode=bm25",
            env={"GAPRAG_BASE_URL": server.base_url},
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["answer"] == "William Shakespeare" and out["stop_reason"] == "answered"
    assert out["usage"]["llm_calls"] == 1 and out["evidence"][0]["id"] == "hamlet"
    # every effective setting with where it came from
    assert out["settings"]["retrieval_mode"] == {"value": "bm25", "source": "explicit"}
    assert out["settings"]["top_k"] == {"value": 5, "source": "default"}
    sent = server.requests[0]
    assert sent["max_tokens"] == 48  # the cap travels in the body


def test_stream_prints_node_updates(tmp_path: Path, tiny_docs: list[Document]) -> None:
    from tests.fake_openai import FakeOpenAI

    Store.build(tmp_path / "s", tiny_docs, embedder=HashingEmbedder(), progress=False)
    with FakeOpenAI(reply="Paris") as server:
        proc = run_cli(
            "ask", "capital of France", "--store", str(tmp_path / "s"), "--stream", "--set", "retrieval_mode=bm25",
            env={"GAPRAG_BASE_URL": server.base_url},
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (
        "[retrieve] evidence=[France" in proc.stderr
        and "[generate_answer] answer=Paris" in proc.stderr
    )
    assert proc.stdout.startswith("Paris")


def test_graph_draw_mermaid(tmp_path: Path) -> None:
    out = tmp_path / "g.mmd"
    assert main(["graph", "draw", "standard_rag", "--out", str(out)]) == 0
    text = out.read_text()
    assert "retrieve --> generate_answer" in text


def test_optional_numbers_coerce() -> None:
    from dataclasses import dataclass

    from gaprag.options import coerce

    @dataclass
    class Ctx:
        threshold: float | None = None
        rounds: int | None = 3

    assert coerce(Ctx, "threshold", "0.5") == 0.5
    assert coerce(Ctx, "threshold", "none") is None
    assert coerce(Ctx, "rounds", "4") == 4


@pytest.mark.parametrize("command", ["replay", "rfm"])
def test_a_command_moved_to_the_lab_says_where_it_went(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--quiet", command, "select", "runs/x"]) == 2
    err = capsys.readouterr().err
    assert f"`gaprag {command}` is no longer part of gaprag" in err
    assert f"python -m lab {command} --help" in err and "Traceback" not in err


def test_the_installed_packages_are_gaprags_and_not_the_lab() -> None:
    import tomllib

    from setuptools import find_packages

    root = Path(__file__).resolve().parents[2]
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    packages = find_packages(str(root), **config["tool"]["setuptools"]["packages"]["find"])
    assert "gaprag" in packages and "gaprag.graphs.rfm_rag.feedback_model" in packages
    assert not [p for p in packages if p.split(".")[0] != "gaprag"]
