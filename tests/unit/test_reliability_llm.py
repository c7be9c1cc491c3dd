"""The LLM layer under a hostile endpoint: one EndpointError per failure, malformed replies
retried once, hostile text made safe, prompts cut to the context window, keys redacted."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI
from pydantic import BaseModel

from gaprag.accounting import metered
from gaprag.errors import EndpointError
from gaprag.llm.client import LLM
from gaprag.llm.factory import openai_llm
from gaprag.llm.failures import CUT_MARK, clean_text, fit_to_window
from gaprag.testing import scripted
from tests.fake_openai import FakeOpenAI, RawReply
from tests.hostile_corpus import FAKE_KEY, completion, error_body, first_then


class Verdict(BaseModel):
    sufficient: bool


def _llm(server: FakeOpenAI, **kw: object) -> LLM:
    chat = ChatOpenAI(base_url=server.base_url, model="m", api_key=FAKE_KEY, max_retries=1,
                      timeout=5)  # type: ignore[arg-type]  # fmt: skip
    return LLM(chat, endpoint=server.base_url, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("reply", "needle", "hint"),
    [
        (RawReply(b"<html>oops</html>", content_type="text/html"), "not a chat completion", "/v1"),
        (RawReply(b"{not json"), "not a chat completion", "/v1"),
        (RawReply(error_body("slow down"), 429), "answered HTTP 429: slow down", "concurrency"),
        (RawReply(error_body("boom"), 500), "answered HTTP 500: boom", "server failed"),
        (
            RawReply(error_body(f"bad key {FAKE_KEY}"), 401),
            "HTTP 401: bad key ***",
            "OPENAI_API_KEY",
        ),
        (RawReply(error_body("context_length_exceeded"), 400), "HTTP 400", "GAPRAG_CONTEXT_WINDOW"),
        (RawReply(completion("Paris"), reset_after=30), "connection to the LLM endpoint", "start"),
    ],
)
def test_each_failure_is_one_endpoint_error(reply: RawReply, needle: str, hint: str) -> None:
    with FakeOpenAI(reply) as server:
        url = server.base_url
        with pytest.raises(EndpointError) as err:
            _llm(server).generate("q")
    message = err.value.message
    assert needle in message and url in message and "\n" not in message
    assert hint in err.value.hint and FAKE_KEY not in str(err.value)


def test_a_malformed_reply_is_tried_once_more() -> None:
    with FakeOpenAI(first_then(RawReply(b"garbage"), "Paris")) as server:
        with metered() as meter:
            assert _llm(server).generate("q") == "Paris"
        assert len(server.requests) == 2
    assert any(d.get("event") == "malformed_reply" for d in meter.decisions)


def test_timeouts_name_the_limit() -> None:
    with FakeOpenAI(RawReply(completion("late"), delay_s=2.0)) as server:
        chat = ChatOpenAI(base_url=server.base_url, model="m", api_key=FAKE_KEY, max_retries=0,
                          timeout=0.3)  # type: ignore[arg-type]  # fmt: skip
        with pytest.raises(EndpointError, match=r"did not answer within 0\.3 s"):
            LLM(chat, endpoint=server.base_url).generate("q")


def test_retry_after_is_honoured_and_retries_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GAPRAG_MAX_RETRIES", "2")
    monkeypatch.setenv("GAPRAG_TIMEOUT", "7")
    busy = RawReply(error_body("busy"), 429, headers={"Retry-After": "0.3"})
    with FakeOpenAI(first_then(busy, "Paris", n=2)) as server:
        llm = openai_llm(server.base_url, "m")
        assert llm.chat.max_retries == 2 and llm.chat.request_timeout == 7  # type: ignore[attr-defined]
        assert llm.generate("q") == "Paris"
        assert len(server.requests) == 3


def test_hostile_text_is_made_safe_to_send_back() -> None:
    assert clean_text("a\x00b \ud800c") == "ab ?c"
    # a lone surrogate in a reply must not break the repair request that quotes it
    with FakeOpenAI(first_then("{\ud800", '{"sufficient": true}')) as server:
        out = _llm(server, structured_mode="none").structured(
            "q", Verdict, default=Verdict(sufficient=False)
        )
    assert out.path == "repaired" and out.value.sufficient is True


def test_prompt_is_cut_to_the_context_window_and_the_cut_recorded() -> None:
    passages = " ".join(f"passage{i}" for i in range(3000))  # ~27k characters
    prompt = f"Answer from the passages.\n{passages}\nQuestion: Who?\nAnswer:"
    with FakeOpenAI("Paris") as server:
        with metered() as meter:
            assert _llm(server, context_window=1000).generate(prompt, max_tokens=50) == "Paris"
        sent = server.user_prompts()[0]
    assert len(sent) <= (1000 - 50) * 3
    assert sent.startswith("Answer from the passages.") and sent.endswith("Question: Who?\nAnswer:")
    assert CUT_MARK.strip() in sent
    cut = next(d for d in meter.decisions if d.get("event") == "prompt_cut")
    assert cut["context_window"] == 1000 and cut["removed_chars"] > 20_000
    # a prompt that fits is sent as is
    with FakeOpenAI("Paris") as server:
        _llm(server, context_window=100_000).generate(prompt)
        assert server.user_prompts()[0] == prompt


def test_fit_to_window_cuts_the_longest_message_only() -> None:
    msgs = [SystemMessage(content="system rules"), HumanMessage(content="x" * 9000)]
    out, cut = fit_to_window(msgs, 1000, 100)
    assert cut is not None and cut.message == 1 and out[0].content == "system rules"
    assert len(str(out[1].content)) < 9000
    assert fit_to_window(msgs, None, 100) == (msgs, None)


def test_context_window_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GAPRAG_CONTEXT_WINDOW", "2048")
    assert LLM(scripted("x")).context_window == 2048


def test_keys_never_reach_the_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    with FakeOpenAI(f"my key is {FAKE_KEY}") as server, metered() as meter:
        out = _llm(server, structured_mode="none").structured(
            "q", Verdict, default=Verdict(sufficient=False)
        )
    assert out.path == "default"
    assert FAKE_KEY not in json.dumps(meter.decisions)
