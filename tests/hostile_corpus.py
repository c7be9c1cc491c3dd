"""A corpus of malformed, hostile and failing replies from an OpenAI-compatible endpoint.

Each case is a reply for :class:`tests.fake_openai.FakeOpenAI` (a message text, a
:class:`~tests.fake_openai.RawReply`, or a callable for replies that change between requests)
and what a method may do with it:

* ``"answer"``: the method must return its output (failed decisions recorded as ``default``);
* ``"endpoint_error"``: it must raise :class:`gaprag.errors.EndpointError` naming the endpoint;
* ``"either"``: one of the two (transport-level garbage that a client may reasonably treat
  as a reply or as a failed request).

Nothing else is allowed: no other exception, no traceback.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from tests.fake_openai import MODEL_ID, RawReply

Outcome = Literal["answer", "endpoint_error", "either"]
ReplyFn = Callable[[dict[str, Any]], "str | RawReply"]

#: A fake key the tests set as OPENAI_API_KEY: it must never appear in any output.
FAKE_KEY = "sk-gaprag-test-KEY-0123456789abcdef"


def completion(content: Any = "Paris", **overrides: Any) -> dict[str, Any]:
    """A well-formed chat.completion body, with ``overrides`` applied at the top level."""
    body: dict[str, Any] = {
        "id": "chatcmpl-hostile",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": MODEL_ID,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
    }
    body.update(overrides)
    return body


def with_choice(**choice: Any) -> dict[str, Any]:
    body = completion()
    body["choices"] = [{"index": 0, "finish_reason": "stop", **choice}]
    return body


def raw(body: Any, status: int = 200, **kw: Any) -> RawReply:
    return RawReply(body=body, status=status, **kw)


def error_body(message: str, code: str = "error") -> dict[str, Any]:
    return {"error": {"message": message, "type": code, "code": code}}


def first_then(first: str | RawReply, rest: str | RawReply, n: int = 1) -> ReplyFn:
    """``first`` for the first ``n`` requests, then ``rest``: a transient failure."""
    counter = itertools.count()
    lock = threading.Lock()

    def reply(_body: dict[str, Any]) -> str | RawReply:
        with lock:
            i = next(counter)
        return first if i < n else rest

    return reply


def every_other(bad: str | RawReply, good: str = "Paris") -> ReplyFn:
    """Alternate a bad and a good reply (so later calls of a method see both)."""
    counter = itertools.count()
    lock = threading.Lock()

    def reply(_body: dict[str, Any]) -> str | RawReply:
        with lock:
            i = next(counter)
        return bad if i % 2 == 0 else good

    return reply


WORDS_20K = " ".join(f"word{i % 97}" for i in range(20_000))
THINK_LONG = "<think>" + "Let me think step by step. " * 400 + "</think>Paris"


@dataclass(frozen=True)
class Case:
    """``make()`` returns a fresh reply (stateful replies restart for every run)."""

    name: str
    make: Callable[[], str | RawReply | ReplyFn]
    outcome: Outcome

    def __str__(self) -> str:
        return self.name


def _cases() -> list[Case]:
    c: list[Case] = []

    def add(name: str, reply: str | RawReply | Callable[[], ReplyFn], outcome: Outcome) -> None:
        if isinstance(reply, str | RawReply):
            value: str | RawReply = reply
            c.append(Case(name, lambda: value, outcome))
        else:
            c.append(Case(name, reply, outcome))

    # -- message content that is not what was asked for (HTTP 200, well-formed envelope) --
    add("content_empty", "", "answer")
    add("content_whitespace", "  \n\t ", "answer")
    add("content_truncated_json_open", "{", "answer")
    add("content_truncated_json", '{"answer": "Par', "answer")
    add("content_truncated_nested", '{"queries": ["a", "b', "answer")
    add("content_wrong_keys", '{"wrong": 1, "other": [2]}', "answer")
    add("content_list_not_object", '["a", "b", "c"]', "answer")
    add("content_list_of_objects", '[{"answer": "Paris"}]', "answer")
    add("content_json_null", "null", "answer")
    add("content_json_true", "true", "answer")
    add("content_json_number", "42", "answer")
    add("content_null_values", '{"answer": null, "sufficient": null, "queries": null}', "answer")
    add("content_wrong_types", '{"answer": [1], "sufficient": "maybe", "queries": 7}', "answer")
    add("content_20000_words", WORDS_20K, "answer")
    add("content_one_huge_token", "a" * 100_000, "answer")
    add("content_think_then_answer", THINK_LONG, "answer")
    add("content_think_unclosed", "<think>" + "hmm " * 2000, "answer")
    add("content_think_json", '<think>{"x": 1}</think>{"answer": "Paris"}', "answer")
    add("content_fence_broken", '```json\n{"answer":\n```', "answer")
    add("content_deep_nesting_brackets", "[" * 50_000, "answer")
    add("content_deep_nesting_objects", '{"a": ' * 20_000, "answer")
    add("content_braces_only", "{" * 5000 + "}" * 10, "answer")
    add("content_control_chars", "\x00\x1b[31mParis\x07\x08", "answer")
    add("content_lone_surrogate", "Paris \ud800 \udfff", "answer")
    add("content_ambiguous_choice", "True False yes no maybe", "answer")
    add("content_prose_json_mix", 'Sure! Here: {"a": 1} and also {"b": [}', "answer")
    add("content_python_repr", "{'answer': 'Paris', 'ok': True, 'x': None}", "answer")
    add("content_alternating_garbage", lambda: every_other("{{{", "Paris"), "answer")
    add("content_html", "<html><body><h1>502 Bad Gateway</h1></body></html>", "answer")

    # -- a well-formed status, a broken envelope -------------------------------------------
    add("body_not_json_html", raw(b"<html>oops</html>", content_type="text/html"), "either")
    add("body_not_json_as_json", raw(b"this is not json"), "either")
    add("body_empty", raw(b""), "either")
    add("body_truncated_json", raw(b'{"id": "x", "choices": [{"mess'), "either")
    add("body_json_list", raw([1, 2, 3]), "either")
    add("body_json_string", raw("just a string"), "either")
    add("body_json_null", raw(None), "either")
    add("body_empty_object", raw({}), "either")
    add("body_wrong_keys", raw({"result": "Paris"}), "either")
    add("body_choices_empty", raw(completion(choices=[])), "either")
    add("body_choices_null", raw(completion(choices=None)), "either")
    add("body_message_null", raw(with_choice(message=None)), "either")
    add("body_message_missing", raw(with_choice()), "either")
    add("body_content_null", raw(completion(content=None)), "answer")
    add("body_content_number", raw(completion(content=42)), "either")
    add(
        "body_content_parts", raw(completion(content=[{"type": "text", "text": "Paris"}])), "either"
    )
    add("body_usage_garbage", raw(completion(usage="lots")), "either")
    add("body_usage_negative", raw(completion(usage={"prompt_tokens": -5, "completion_tokens": -1, "total_tokens": -6})), "either")  # fmt: skip
    add("body_logprobs_garbage", raw(with_choice(message={"role": "assistant", "content": "True"}, logprobs={"content": "x"})), "either")  # fmt: skip
    add("body_finish_length", raw(with_choice(message={"role": "assistant", "content": '{"ans'}, finish_reason="length")), "answer")  # fmt: skip
    add("body_finish_content_filter", raw(with_choice(message={"role": "assistant", "content": ""}, finish_reason="content_filter")), "either")  # fmt: skip
    add("body_sse_when_not_streaming", raw(b'data: {"choices": []}\n\ndata: [DONE]\n\n', content_type="text/event-stream"), "either")  # fmt: skip
    add("body_trailing_garbage", raw(json.dumps(completion()).encode() + b"xyz"), "either")
    add("body_invalid_utf8", raw(b'{"choices": [{"message": {"content": "\xff\xfe"}}]}'), "either")
    add("body_deep_json", raw(b"[" * 100_000 + b"]" * 100_000), "either")
    add("body_20000_words", raw(completion(content=WORDS_20K)), "answer")

    # -- HTTP errors -------------------------------------------------------------------------
    add("http_429_retry_after", raw(error_body("slow down", "rate_limit"), 429, headers={"Retry-After": "0.2"}), "endpoint_error")  # fmt: skip
    add("http_429_no_retry_after", raw(error_body("slow down", "rate_limit"), 429), "endpoint_error")  # fmt: skip
    add("http_500_retry_after", raw(error_body("boom"), 500, headers={"Retry-After": "0.2"}), "endpoint_error")  # fmt: skip
    add("http_500_no_retry_after", raw(error_body("boom"), 500), "endpoint_error")
    add("http_502_html", raw(b"<html>Bad Gateway</html>", 502, content_type="text/html"), "endpoint_error")  # fmt: skip
    add("http_503_empty", raw(b"", 503), "endpoint_error")
    add("http_400_context_length", raw(error_body("This model's maximum context length is 4096 tokens", "context_length_exceeded"), 400), "endpoint_error")  # fmt: skip
    add("http_401_echoes_key", raw(error_body(f"Incorrect API key provided: {FAKE_KEY}", "invalid_api_key"), 401), "endpoint_error")  # fmt: skip
    add("http_404_model", raw(error_body("model 'x' not found", "model_not_found"), 404), "endpoint_error")  # fmt: skip
    add("http_429_once_then_ok", lambda: first_then(raw(error_body("slow"), 429, headers={"Retry-After": "0.1"}), "Paris"), "answer")  # fmt: skip
    add(
        "http_500_once_then_ok", lambda: first_then(raw(error_body("boom"), 500), "Paris"), "answer"
    )
    add("http_503_retry_after_ms", lambda: first_then(raw(error_body("busy"), 503, headers={"retry-after-ms": "50"}), "Paris"), "answer")  # fmt: skip

    # -- the connection itself ---------------------------------------------------------------
    add("reset_mid_body", raw(completion(content="Paris is the capital"), reset_after=40), "endpoint_error")  # fmt: skip
    add("reset_before_body", raw(completion(), reset_after=0), "endpoint_error")
    add(
        "reset_once_then_ok",
        lambda: first_then(raw(completion(), reset_after=10), "Paris"),
        "answer",
    )
    return c


CASES: list[Case] = _cases()
