"""The LLM layer: caps, usage counting, structured-output repair and defaults, choices, errors."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from gaprag.accounting import metered
from gaprag.errors import EndpointError
from gaprag.llm.client import LLM
from gaprag.llm.factory import openai_llm
from gaprag.testing import ScriptedChatModel, scripted


class Judge(BaseModel):
    sufficient: bool
    missing: str = ""


DEFAULT = Judge(sufficient=False, missing="")


def test_generate_caps_output_and_counts_usage() -> None:
    fake = scripted("<think>hmm</think>Paris")
    llm = LLM(fake)
    with metered() as meter:
        assert llm.generate("Capital of France?", max_tokens=7) == "Paris"
    assert fake.calls[0]["kwargs"]["max_tokens"] == 7
    assert meter.llm_calls == 1
    assert meter.prompt_tokens > 0 and meter.completion_tokens > 0


def test_openai_models_get_max_tokens_in_body_too() -> None:
    llm = openai_llm("http://127.0.0.1:9/v1", "m")
    kwargs = llm._call_kwargs(12)
    assert kwargs["max_tokens"] == 12 and kwargs["extra_body"] == {"max_tokens": 12}
    assert llm.structured_mode == "json_schema"


def test_structured_parsed_first_time() -> None:
    llm = LLM(scripted('```json\n{"sufficient": true, "missing": ""}\n```'))
    out = llm.structured("judge", Judge, default=DEFAULT)
    assert out.value.sufficient is True and out.path == "parsed"


def test_structured_repair_retry_shows_the_bad_reply() -> None:
    fake = scripted("I think it is sufficient.", '{"sufficient": true}')
    out = LLM(fake).structured("judge", Judge, default=DEFAULT)
    assert out.path == "repaired" and out.value.sufficient is True
    assert len(fake.calls) == 2
    repair_prompt = fake.prompts()[1]
    assert "I think it is sufficient." in repair_prompt and '"sufficient"' in repair_prompt


def test_structured_falls_back_to_default_never_raises() -> None:
    fake = scripted("nope", "still nope")
    out = LLM(fake).structured("judge", Judge, default=DEFAULT)
    assert out.path == "default" and out.value == DEFAULT
    assert len(fake.calls) == 2  # one try, one repair, then the default


def test_constrained_mode_sends_response_format() -> None:
    fake = scripted('{"sufficient": false, "missing": "x"}')
    llm = LLM(fake, structured_mode="json_object")
    out = llm.structured("judge", Judge, default=DEFAULT)
    assert out.path == "constrained"
    fmt = fake.calls[0]["kwargs"]["response_format"]
    assert fmt["type"] == "json_object" and fmt["schema"]["required"] == ["sufficient"]


JUDGED = '{"sufficient": true, "missing": ""}'


def test_a_structured_reply_carries_its_token_logprobs_when_asked() -> None:
    pieces = [('{"sufficient": ', -0.1), ("true", -0.3), (', "missing": ""}', -0.1)]
    fake = ScriptedChatModel(replies=[JUDGED] * 2, reply_logprobs={JUDGED: [[p] for p in pieces]})
    llm = LLM(fake, structured_mode="json_object", supports_logprobs=True)
    plain = asyncio.run(llm.astructured("judge", Judge, default=DEFAULT))
    scored = asyncio.run(llm.astructured("judge", Judge, default=DEFAULT, logprobs=True))
    assert plain.tokens is None and "logprobs" not in fake.calls[0]["kwargs"]
    assert scored.value == plain.value and scored.path == "constrained"
    assert [(t.token, t.logprob) for t in scored.tokens or []] == pieces
    # the same request, constrained as before, with logprobs asked for
    first, second = (call["kwargs"] for call in fake.calls)
    assert second == {**first, "logprobs": True, "top_logprobs": 2}


def test_a_structured_call_on_an_endpoint_refusing_logprobs_falls_back() -> None:
    class Refuses(ScriptedChatModel):
        def _result(self, messages: Any, **kw: Any) -> Any:
            if kw.get("logprobs"):
                raise ValueError("logprobs are not supported")
            return super()._result(messages, **kw)

    llm = LLM(Refuses(default=JUDGED), supports_logprobs=True)
    out = asyncio.run(llm.astructured("judge", Judge, default=DEFAULT, logprobs=True))
    assert out.value.sufficient is True and out.tokens is None
    assert llm.supports_logprobs is False  # not asked again


def test_choose_by_logprobs() -> None:
    fake = ScriptedChatModel(replies=["False"], logprobs={"True": -0.1, "False": -2.5, "the": -4.0})
    choice = LLM(fake, supports_logprobs=True).choose("valid?", ["True", "False"], default="False")
    assert choice.value == "True" and choice.path == "logprobs"
    assert choice.probs["True"] > choice.probs["False"]
    assert fake.calls[0]["kwargs"]["logprobs"] is True


def test_choose_falls_back_to_text_then_default() -> None:
    llm = LLM(scripted("False, the answer is wrong", "banana"))
    first = llm.choose("valid?", ["True", "False"], default="True")
    assert (first.value, first.path) == ("False", "parsed")
    second = llm.choose("valid?", ["True", "False"], default="True")
    assert (second.value, second.path) == ("True", "default")


def test_endpoint_down_is_a_clear_error() -> None:
    llm = openai_llm("http://127.0.0.1:9/v1", "m")
    llm.chat.max_retries = 0  # type: ignore[attr-defined]
    with pytest.raises(EndpointError) as err:
        llm.generate("hi", max_tokens=2)
    assert "127.0.0.1:9" in str(err.value) and "GAPRAG_BASE_URL" in err.value.hint


def test_constrained_reply_cut_at_the_cap_is_repaired_not_raised() -> None:
    """With a response_format the OpenAI SDK raises LengthFinishReasonError on a reply cut at
    max_tokens; the layer must treat it as a bad reply (repair, then default), count its tokens
    and note it in the trace (seen on a real run: a 1.5B model looping to the 256-token cap)."""
    from tests.fake_openai import FakeOpenAI

    replies = iter(['{"sufficient": true, "missing": "the the the', '{"sufficient": true}'])
    finishes = iter(["length", "stop"])
    with FakeOpenAI(lambda body: next(replies), finish_reason=lambda body: next(finishes)) as srv:
        llm = openai_llm(srv.base_url, "m", structured_mode="json_object")
        with metered() as meter:
            out = llm.structured("judge", Judge, default=DEFAULT, max_tokens=8)
        assert [r["response_format"]["type"] for r in srv.requests] == ["json_object"] * 2
    assert out.path == "repaired" and out.value.sufficient is True
    assert meter.llm_calls == 2 and meter.completion_tokens > 0
    assert {"event": "length_limit", "max_tokens": 8} in meter.decisions


def test_constrained_reply_always_cut_falls_back_to_default() -> None:
    from tests.fake_openai import FakeOpenAI

    with FakeOpenAI('{"sufficient": tr', finish_reason="length") as srv:
        llm = openai_llm(srv.base_url, "m", structured_mode="json_object")
        out = llm.structured("judge", Judge, default=DEFAULT, max_tokens=8)
    assert out.path == "default" and out.value == DEFAULT and len(srv.requests) == 2


def test_server_rejecting_response_format_falls_back_to_unconstrained() -> None:
    class BadRequestError(Exception):
        pass

    def reply(messages: object) -> str:
        return '{"sufficient": true}'

    fake = scripted(reply)
    original = fake._generate

    def generate(messages, stop=None, run_manager=None, **kwargs):  # type: ignore[no-untyped-def]
        if "response_format" in kwargs:
            raise BadRequestError("Input should be 'text' or 'json_object'")
        return original(messages, stop=stop, run_manager=run_manager, **kwargs)

    object.__setattr__(fake, "_generate", generate)
    llm = LLM(fake, structured_mode="json_schema")
    out = llm.structured("judge", Judge, default=DEFAULT)
    assert out.value.sufficient is True and out.path == "parsed"
    assert llm.structured_mode == "none"  # remembered for later calls


def test_choose_sums_case_variants_and_breaks_ties_to_default() -> None:
    fake = ScriptedChatModel(replies=["x"], logprobs={"True": -1.2, " true": -1.2, "False": -0.9})
    choice = LLM(fake, supports_logprobs=True).choose("valid?", ["True", "False"], default="False")
    assert choice.value == "True"  # 2 * e^-1.2 = 0.60 > e^-0.9 = 0.41
    assert abs(choice.probs["True"] - 2 * 2.718281828**-1.2) < 1e-6
    tie = ScriptedChatModel(replies=["x"], logprobs={"True": -0.7, "False": -0.7})
    assert (
        LLM(tie, supports_logprobs=True).choose("?", ["True", "False"], default="False").value
        == "False"
    )
