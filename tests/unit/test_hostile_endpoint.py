"""A hostile endpoint never produces a traceback.

Every reply of :mod:`tests.hostile_corpus` (malformed bodies, malformed messages, HTTP
errors with and without ``Retry-After``, connection resets, 20,000-word and ``<think>``
replies) is replayed through every method via the public API against the fake OpenAI server
(``build_graph(method, llm=ChatOpenAI(base_url=fake))``), and through ``gaprag ask --json``.
Each run must either return the method's output (failed decisions recorded as ``default``)
or raise :class:`~gaprag.errors.EndpointError` naming the endpoint; the CLI must exit 0 with
exactly one JSON object on stdout, or non-zero with one error line (and a hint line) naming
the endpoint. The fake API key never appears anywhere.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_openai import ChatOpenAI

from gaprag import build_graph, list_methods
from gaprag.cli import main
from gaprag.errors import EndpointError
from gaprag.stores import HashingEmbedder, Store
from gaprag.stores.documents import Document
from gaprag.stores.pairs import PairStore
from tests.fake_openai import FakeOpenAI, RawReply
from tests.hostile_corpus import CASES, FAKE_KEY, Case, completion

METHODS = list_methods()
#: What a method needs here besides the model and the store, by method (default: nothing), as
#: settings; ``{pairs}`` is an empty hashing pair store. A method that needs more and is not
#: listed fails its runs (nothing is skipped): add it here.
EXTRA: dict[str, dict[str, str]] = {
    "rag_ef": {"feedback_store": "{pairs}"},  # a pair store without a model to load
    "rfm_rag": {"feedback_mode": "llm_judge"},  # sufficiency by the (hostile) LLM, not the MLP
}
DECISION_PATHS = {
    "logprobs", "constrained-no-logprobs", "parsed-no-logprobs", "no-logprobs", "constrained",
    "parsed", "repaired", "model", "rule", "default", "agreement", "agreement_fallback",
}  # fmt: skip
QUESTION = "Who wrote Hamlet and where was he born?"


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A hashing-embedder store (no model to load) and an empty hashing pair store."""
    root = tmp_path_factory.mktemp("hostile")
    docs: list[Document] = [
        {"id": "hamlet", "title": "Hamlet", "text": "Hamlet is a tragedy by William Shakespeare."},
        {"id": "shakes", "title": "Shakespeare", "text": "Shakespeare was born in Stratford."},
        {"id": "paris", "title": "Paris", "text": "Paris is the capital of France."},
    ]
    Store.build(root / "store", docs, embedder=HashingEmbedder(), progress=False)
    PairStore.open(root / "pairs.sqlite", embedder=HashingEmbedder(64)).close()
    return root / "store", root / "pairs.sqlite"


def _options(method: str, pairs: Path) -> dict[str, Any]:
    """``method``'s :data:`EXTRA` settings, with the pair store's path filled in."""
    return {k: v.format(pairs=pairs) for k, v in EXTRA.get(method, {}).items()}


def _chat(server: FakeOpenAI) -> ChatOpenAI:
    return ChatOpenAI(
        base_url=server.base_url,
        model="fake-model",
        api_key=FAKE_KEY,  # type: ignore[arg-type]
        max_retries=1,
        timeout=10,
    )


def _check_result(out: Any) -> None:
    assert isinstance(out, dict)
    assert isinstance(out.get("answer"), str) and isinstance(out.get("stop_reason"), str)
    for decision in out.get("decisions", []):
        assert decision.get("path") in DECISION_PATHS, decision
    assert FAKE_KEY not in json.dumps(out, default=str)


def _check_endpoint_error(err: EndpointError, server: FakeOpenAI) -> None:
    text = str(err)
    assert server.base_url in err.message, text
    assert "\n" not in err.message and len(err.message) <= 600, text
    assert FAKE_KEY not in text


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_every_method_survives_every_hostile_reply(
    method: str, case: Case, server: FakeOpenAI, corpus: tuple[Path, Path]
) -> None:
    store, pairs = corpus
    server.reply = case.make()
    graph = build_graph(
        method, llm=_chat(server), retriever=Store.open(store), **_options(method, pairs)
    )
    try:
        out = graph.invoke({"question": QUESTION})
    except EndpointError as err:
        assert case.outcome != "answer", f"{case.name}: expected an answer, got {err}"
        _check_endpoint_error(err, server)
        return
    assert case.outcome != "endpoint_error", f"{case.name}: expected an EndpointError"
    _check_result(out)


def test_the_corpus_is_large_enough() -> None:
    assert len(CASES) >= 50
    assert len({c.name for c in CASES}) == len(CASES)


def test_a_reply_after_8_seconds_is_waited_for(
    server: FakeOpenAI, corpus: tuple[Path, Path]
) -> None:
    store, _ = corpus
    server.reply = RawReply(body=completion("William Shakespeare"), delay_s=8.0)
    started = time.monotonic()
    out = build_graph("standard_rag", llm=_chat(server), retriever=Store.open(store)).invoke(
        {"question": QUESTION}
    )
    assert time.monotonic() - started >= 8.0
    assert "Shakespeare" in out["answer"]


def test_a_reply_slower_than_the_timeout_is_an_endpoint_error(
    server: FakeOpenAI, corpus: tuple[Path, Path]
) -> None:
    store, _ = corpus
    server.reply = RawReply(body=completion("late"), delay_s=3.0)
    chat = ChatOpenAI(base_url=server.base_url, model="m", api_key=FAKE_KEY, max_retries=0,
                      timeout=0.5)  # type: ignore[arg-type]  # fmt: skip
    with pytest.raises(EndpointError) as err:
        build_graph("standard_rag", llm=chat, retriever=Store.open(store)).invoke(
            {"question": QUESTION}
        )
    _check_endpoint_error(err.value, server)
    assert "timed out" in err.value.message or "Timeout" in err.value.message


# -- the command line ------------------------------------------------------------------------
CLI_CASES = [c for c in CASES if c.name in {
    "content_empty", "content_20000_words", "content_think_unclosed", "content_lone_surrogate",
    "content_deep_nesting_objects", "body_not_json_html", "body_content_null", "body_choices_empty",
    "body_truncated_json", "http_429_retry_after", "http_500_no_retry_after", "http_401_echoes_key",
    "reset_mid_body", "http_500_once_then_ok",
}]  # fmt: skip


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("case", CLI_CASES, ids=str)
def test_cli_json_is_one_object_or_one_error_line(
    method: str,
    case: Case,
    server: FakeOpenAI,
    corpus: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from gaprag.llm import factory

    store, pairs = corpus
    monkeypatch.setattr(factory, "_defaults", {})  # a fresh default LLM for this endpoint
    monkeypatch.setenv("GAPRAG_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    monkeypatch.setenv("GAPRAG_MAX_RETRIES", "1")
    server.reply = case.make()
    args = ["ask", QUESTION, "--method", method, "--store", str(store), "--json"]
    for key, value in _options(method, pairs).items():
        args += ["--set", f"{key}={value}"]
    code = main(args)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert FAKE_KEY not in out + err
    if code == 0:
        data = json.loads(out)  # exactly one JSON object: json.loads refuses trailing text
        assert isinstance(data, dict) and isinstance(data["answer"], str)
        assert case.outcome != "endpoint_error"
    else:
        assert code == 2 and out == ""
        lines = err.strip().splitlines()
        errors = [line for line in lines if line.startswith("gaprag: error:")]
        assert len(errors) == 1, err
        assert server.base_url in errors[0], err
        assert case.outcome != "answer", err
