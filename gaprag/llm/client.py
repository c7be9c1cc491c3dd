"""The one LLM client layer every chat call goes through.

:class:`LLM` wraps any LangChain ``BaseChatModel`` and adds what the methods need from it:
an output-length cap on every call, usage accounting, endpoint errors turned into clear
messages, and robust structured output:

1. a server-side constraint where the endpoint supports one (``json_schema`` on vLLM and
   llama.cpp's server, ``json_object`` with a schema on llama-cpp-python);
2. the tolerant parser in :mod:`gaprag.llm.parse`;
3. one repair retry that shows the model its reply and the schema;
4. the caller's documented safe default. A malformed reply never raises.

At temperature 0 a call that repeats one already made in the same question's run is answered
from :mod:`gaprag.llm.memo` instead of the endpoint (``reuse_replies``).

An endpoint with few slots (``turns``) gets at most that many calls at once; the others wait
their turn, round robin across clients and runs (:mod:`gaprag.llm.turns`).

Each call is written once, as a coroutine (``agenerate``, ``astructured``, ``achoose``); the
synchronous ``generate``, ``structured`` and ``choose`` run the same code through
:func:`gaprag.aio.run_sync`, which makes it use the chat model's blocking API.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages.ai import UsageMetadata
from pydantic import BaseModel

from gaprag.accounting import estimate_tokens, record_decision, record_llm_call
from gaprag.aio import run_sync, sync_mode
from gaprag.config import context_window as configured_context_window
from gaprag.errors import EndpointError, one_line, redact
from gaprag.llm.failures import (
    clean_text,
    endpoint_error,
    fit_to_window,
    is_malformed,
    is_transport,
    status_of,
)
from gaprag.llm.memo import (
    ReplyMemo,
    Shared,
    SharedReplies,
    SharedTally,
    current_run,
    current_shared,
    deterministic,
    memo_key,
)
from gaprag.llm.parse import parse_choice, parse_model, strip_thinking
from gaprag.llm.spend import call_cost
from gaprag.llm.spend import current as current_ledger
from gaprag.llm.turns import Turns, caller
from gaprag.prompts import prompt_parts

M = TypeVar("M", bound=BaseModel)
StructuredMode = Literal["json_schema", "json_object", "none"]
Messages = Sequence[BaseMessage] | Sequence[tuple[str, str]] | str

DEFAULT_MAX_TOKENS = 256


@dataclass
class Structured(Generic[M]):
    """A structured reply: the value, how it was obtained, the reply it was read from and,
    when they were asked for and the endpoint gave them, that reply's token logprobs."""

    value: M
    path: Literal["constrained", "parsed", "repaired", "default"]
    raw: str = ""
    tokens: list[TokenLogprob] | None = None


@dataclass
class TokenLogprob:
    """One generated token, its logprob and the top alternatives at its position."""

    token: str
    logprob: float
    top: list[tuple[str, float]] = field(default_factory=list)


@dataclass
class Scored:
    """Free text with its tokens' logprobs; ``tokens`` is None when the endpoint gave none."""

    text: str
    tokens: list[TokenLogprob] | None = None


@dataclass
class Choice:
    """A closed-set decision, with the path that decided it and option probabilities if known."""

    value: str
    path: Literal["logprobs", "constrained", "parsed", "default"]
    probs: dict[str, float] = field(default_factory=dict)
    raw: str = ""


def to_messages(messages: Messages) -> list[BaseMessage]:
    if isinstance(messages, str):
        return [HumanMessage(content=messages)]
    out: list[BaseMessage] = []
    for m in messages:
        if isinstance(m, BaseMessage):
            out.append(m)
        else:
            role, content = m
            if role == "system":
                out.append(SystemMessage(content=content))
            elif role == "assistant":
                out.append(AIMessage(content=content))
            else:
                out.append(HumanMessage(content=content))
    return out


def _text(msg: BaseMessage) -> str:
    content = msg.content
    if isinstance(content, str):
        return content
    return "".join(c if isinstance(c, str) else str(c.get("text", "")) for c in content)


def _truncated_reply(exc: Exception) -> AIMessage | None:
    """The partial reply inside an OpenAI ``LengthFinishReasonError``, else ``None``.

    With a ``response_format`` langchain-openai parses the reply through the OpenAI SDK, which
    raises instead of returning when the output cap was reached.
    """
    if type(exc).__name__ != "LengthFinishReasonError":
        return None
    completion = getattr(exc, "completion", None)
    choices = getattr(completion, "choices", None)
    if not choices:
        return None
    content = getattr(getattr(choices[0], "message", None), "content", None) or ""
    usage = getattr(completion, "usage", None)
    metadata: UsageMetadata | None = None
    if usage is not None:
        prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
        output = int(getattr(usage, "completion_tokens", 0) or 0)
        metadata = UsageMetadata(
            input_tokens=prompt, output_tokens=output, total_tokens=prompt + output
        )
    return AIMessage(
        content=str(content), usage_metadata=metadata, response_metadata={"finish_reason": "length"}
    )


def _content_filtered(exc: Exception) -> bool:
    """The OpenAI SDK refuses a constrained reply stopped by a content filter: an empty reply."""
    return type(exc).__name__ == "ContentFilterFinishReasonError"


#: Statuses with which a server refuses a ``response_format`` it does not support.
_CONSTRAINT_REFUSED = {400, 422, 500, 501}
_REFUSAL_NAMES = {"BadRequestError", "InternalServerError", "UnprocessableEntityError"}


Parts = tuple[int, int, int] | None


class LLM:
    """Chat access with caps, accounting and structured output. Thread-safe; share one."""

    def __init__(
        self,
        chat: BaseChatModel,
        *,
        structured_mode: StructuredMode | None = None,
        endpoint: str = "",
        supports_logprobs: bool | None = None,
        context_window: int | None = None,
        reuse_replies: bool | None = None,
        turns: Turns | None = None,
    ) -> None:
        self.chat = chat
        #: The endpoint's slots, taken in turns by the calls waiting for one
        #: (:mod:`gaprag.llm.turns`); None: the endpoint serves every call at once.
        self.turns = turns
        #: Replies reused within a question's run (:mod:`gaprag.llm.memo`); by default on when
        #: the chat model samples at temperature 0, where a repeated prompt gets the same reply.
        reuse = deterministic(chat) if reuse_replies is None else reuse_replies
        self.memo: ReplyMemo | None = ReplyMemo() if reuse else None
        self.endpoint = endpoint or str(getattr(chat, "openai_api_base", "") or "")
        #: The endpoint's context in tokens (``GAPRAG_CONTEXT_WINDOW``; the embedded server's
        #: ``n_ctx``): a longer prompt is cut before sending, and the cut is recorded.
        self.context_window = context_window or configured_context_window()
        self._is_openai = type(chat).__name__ == "ChatOpenAI"
        # an OpenAI-compatible HTTP client: anything it raises is the endpoint's failure
        self._http = self._is_openai or type(chat).__module__.startswith("langchain_openai")
        if structured_mode is None:
            structured_mode = "json_schema" if self._is_openai else "none"
        self.structured_mode: StructuredMode = structured_mode
        self.supports_logprobs = self._is_openai if supports_logprobs is None else supports_logprobs

    # -- plumbing -------------------------------------------------------------------------
    def _call_kwargs(self, max_tokens: int) -> dict[str, Any]:
        if self._is_openai:
            # langchain-openai sends max_completion_tokens, which llama-cpp-python ignores;
            # send max_tokens in the body too so every server stops at the cap.
            return {"max_tokens": max_tokens, "extra_body": {"max_tokens": max_tokens}}
        return {"max_tokens": max_tokens}

    async def _ainvoke(
        self, messages: list[BaseMessage], max_tokens: int, parts: Parts = None, **extra: Any
    ) -> AIMessage:
        kwargs = {**self._call_kwargs(max_tokens), **extra}
        if "extra_body" in extra and self._is_openai:
            kwargs["extra_body"] = {
                **self._call_kwargs(max_tokens)["extra_body"],
                **extra["extra_body"],
            }
        run = current_run() if self.memo is not None else ""
        key = memo_key(messages, kwargs) if run else ""
        if self.memo is not None and key:
            reused = self.memo.get(run, key)
            if reused is not None:  # the same prompt earlier in this run: the same reply
                record_decision(event="reply_reused")
                return reused
        shared = current_shared()
        if shared is None:
            reply = (await self._send(messages, max_tokens, parts, kwargs)).reply
        else:
            reply = await self._send_shared(shared, messages, max_tokens, parts, kwargs)
        if self.memo is not None and key:
            self.memo.put(run, key, reply)
        return reply

    async def _send(
        self, messages: list[BaseMessage], max_tokens: int, parts: Parts, kwargs: dict[str, Any]
    ) -> Shared:
        """Send one request (cut to the context window, admitted by the run's ledger, retried
        once after a malformed reply) and account for it."""
        start = time.perf_counter()
        messages, cut = fit_to_window(messages, self.context_window, max_tokens)
        if cut is not None:
            record_decision(
                event="prompt_cut",
                message=cut.message,
                removed_chars=cut.removed_chars,
                estimated_tokens=cut.estimated_tokens,
                context_window=cut.window,
            )
        reply: BaseMessage | None = None
        ledger = current_ledger()
        cost = call_cost(sum(len(_text(m)) for m in messages), max_tokens)
        held = 0
        for attempt in range(2):  # one more try after a malformed reply; transport retries
            # the run's limits, before anything is sent (SpendLimit: not sent, run stopped)
            held = ledger.admit(cost) if ledger is not None else 0
            try:  # (connection errors, 429, 5xx) happen inside the client, with Retry-After
                try:
                    if sync_mode():
                        with self._sync_turn():
                            reply = self.chat.invoke(messages, **kwargs)
                    else:
                        async with self._turn():
                            reply = await self.chat.ainvoke(messages, **kwargs)
                except BaseException:  # no reply (an error, a cancelled run): nothing held
                    if ledger is not None:
                        ledger.release(held)
                    held = 0
                    raise
                break
            except Exception as exc:  # every failure becomes one clear EndpointError
                truncated = _truncated_reply(exc)
                if truncated is not None:
                    # a constrained reply cut at the cap: the OpenAI SDK refuses to parse it,
                    # but the text is a reply like any other (the parser or the repair cope)
                    record_decision(event="length_limit", max_tokens=max_tokens)
                    reply = truncated
                    break
                if _content_filtered(exc):
                    record_decision(event="content_filter")
                    reply = AIMessage(
                        content="", response_metadata={"finish_reason": "content_filter"}
                    )
                    break
                if not (self._http or status_of(exc) is not None or is_transport(exc)):
                    raise  # a non-HTTP chat model's own error (e.g. a bug) keeps its type
                if attempt == 0 and is_malformed(exc):
                    record_decision(
                        event="malformed_reply", error=one_line(f"{type(exc).__name__}: {exc}", 200)
                    )
                    continue
                raise endpoint_error(exc, self.endpoint, timeout=self._timeout()) from exc
        if not isinstance(reply, AIMessage):
            raise EndpointError(
                f"the LLM ({type(self.chat).__name__}) returned {type(reply).__name__}, not a chat message",
                hint="pass a LangChain chat model (BaseChatModel)",
            )
        # a hostile reply's text must not break what comes after (printing it, sending it back)
        text = _text(reply)
        safe = clean_text(text)
        if safe != text or not isinstance(reply.content, str):
            reply = reply.model_copy(update={"content": safe})
        usage = reply.usage_metadata
        if usage:
            details = usage.get("input_token_details") or {}
            prompt = max(0, int(usage.get("input_tokens", 0) or 0))
            completion = max(0, int(usage.get("output_tokens", 0) or 0))
            cached = max(0, int(details.get("cache_read", 0) or 0))
        else:
            prompt = sum(estimate_tokens(_text(m)) for m in messages)
            completion, cached = estimate_tokens(_text(reply)), 0
        if ledger is not None:
            ledger.settle(held, prompt, completion)
        record_llm_call(prompt, completion, cached_tokens=cached, parts=parts)
        return Shared(reply, prompt, completion, cached, time.perf_counter() - start)

    async def _send_shared(
        self,
        shared: tuple[SharedReplies, str, SharedTally],
        messages: list[BaseMessage],
        max_tokens: int,
        parts: Parts,
        kwargs: dict[str, Any],
    ) -> AIMessage:
        """:meth:`_send`, or the reply to the identical request already answered (or in
        flight) for the same question of the evaluation run, accounted as if sent."""
        store, question, _ = shared
        future, owner = store.claim(question, f"{id(self.chat)}:{memo_key(messages, kwargs)}")
        if not owner:
            start = time.perf_counter()
            if sync_mode():
                found = future.result()
            else:
                found = await asyncio.shield(asyncio.wrap_future(future))
            if found is None:  # its first sending failed: send it
                return (await self._send(messages, max_tokens, parts, kwargs)).reply
            waited = time.perf_counter() - start
            self._account_shared(found, messages, max_tokens, parts, waited, shared)
            return found.reply.model_copy(deep=True)
        try:
            sent = await self._send(messages, max_tokens, parts, kwargs)
        except BaseException:
            future.set_result(None)
            raise
        future.set_result(dataclasses.replace(sent, reply=sent.reply.model_copy(deep=True)))
        return sent.reply

    @staticmethod
    def _account_shared(
        found: Shared,
        messages: list[BaseMessage],
        max_tokens: int,
        parts: Parts,
        waited: float,
        shared: tuple[SharedReplies, str, SharedTally],
    ) -> None:
        """A shared reply counted as the call it stands for: the ledger, usage, trace, tally."""
        store, _, tally = shared
        ledger = current_ledger()
        if ledger is not None:
            cost = call_cost(sum(len(_text(m)) for m in messages), max_tokens)
            ledger.settle(ledger.admit(cost), found.prompt_tokens, found.completion_tokens)
        record_llm_call(
            found.prompt_tokens,
            found.completion_tokens,
            cached_tokens=found.cached_tokens,
            parts=parts,
        )
        saved = max(0.0, found.seconds - waited)
        record_decision(event="reply_shared", seconds=round(found.seconds, 4))
        store.count(saved)
        tally.reused += 1
        tally.seconds_saved += saved
        tally.calls.append(
            {
                "messages": [{"role": m.type, "content": _text(m)} for m in messages],
                "reply": _text(found.reply),
                "prompt_tokens": found.prompt_tokens,
                "completion_tokens": found.completion_tokens,
                "cached_tokens": found.cached_tokens,
                "seconds": round(found.seconds, 4),
                "shared": True,
            }
        )

    def _turn(self) -> contextlib.AbstractAsyncContextManager[None]:
        """The caller's turn at the endpoint (nothing to wait for without slots)."""
        if self.turns is None:
            return contextlib.nullcontext()
        return self.turns.aturn(*caller())

    def _sync_turn(self) -> contextlib.AbstractContextManager[None]:
        """:meth:`_turn` for a blocking call; a blocking call made on a running event loop's
        thread takes no turn (waiting there would stop the calls that hold the slots)."""
        if self.turns is None:
            return contextlib.nullcontext()
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self.turns.turn(*caller())
        return contextlib.nullcontext()

    def _timeout(self) -> float | None:
        timeout = getattr(self.chat, "request_timeout", None)
        return float(timeout) if isinstance(timeout, int | float) else None

    # -- public calls: one implementation each, as a coroutine ---------------------------
    def generate(
        self,
        messages: Messages,
        *,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        stop: list[str] | None = None,
        temperature: float | None = None,
        seed: int | None = None,
    ) -> str:
        """Free text, capped at ``max_tokens``; ``<think>`` blocks removed; see
        :meth:`agenerate`."""
        return run_sync(
            self.agenerate(
                messages, max_tokens=max_tokens, stop=stop, temperature=temperature, seed=seed
            )
        )

    def structured(
        self,
        messages: Messages,
        schema: type[M],
        *,
        default: M,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        call: str = "",
    ) -> Structured[M]:
        """A reply validated against ``schema``; ``default`` if nothing valid comes back."""
        return run_sync(
            self.astructured(messages, schema, default=default, max_tokens=max_tokens, call=call)
        )

    def choose(
        self,
        messages: Messages,
        options: Sequence[str],
        *,
        default: str,
        max_tokens: int = 8,
        call: str = "",
    ) -> Choice:
        """Pick one of ``options``; see :meth:`achoose`."""
        return run_sync(
            self.achoose(messages, options, default=default, max_tokens=max_tokens, call=call)
        )

    async def agenerate(
        self,
        messages: Messages,
        *,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        stop: list[str] | None = None,
        temperature: float | None = None,
        seed: int | None = None,
    ) -> str:
        """Free text, capped at ``max_tokens``; ``<think>`` blocks removed. ``temperature``
        and ``seed`` override the chat model's for this call (a sampled call with a fixed
        seed is repeatable on a repeatable endpoint); None keeps the model's own."""
        extra: dict[str, Any] = {"stop": stop} if stop else {}
        if temperature is not None:
            extra["temperature"] = temperature
        if seed is not None:
            extra["seed"] = seed
        reply = await self._ainvoke(
            to_messages(messages), max_tokens, prompt_parts(messages), **extra
        )
        return strip_thinking(_text(reply)).strip()

    async def agenerate_scored(
        self, messages: Messages, *, max_tokens: int = DEFAULT_MAX_TOKENS, top_logprobs: int = 2
    ) -> Scored:
        """Free text like :meth:`agenerate`, with each generated token's logprob and its
        ``top_logprobs`` alternatives where the endpoint returns them (``tokens`` None where
        it does not; after one refusal the endpoint is not asked again)."""
        msgs, parts = to_messages(messages), prompt_parts(messages)
        scored = await self._with_logprobs(
            lambda **s: self._ainvoke(msgs, max_tokens, parts, **s), top_logprobs=top_logprobs
        )
        if scored is not None:
            return Scored(strip_thinking(_text(scored)).strip(), _token_logprobs(scored))
        reply = await self._ainvoke(msgs, max_tokens, parts)
        return Scored(strip_thinking(_text(reply)).strip(), None)

    async def _with_logprobs(
        self,
        send: Callable[..., Awaitable[AIMessage]],
        *,
        note: Mapping[str, Any] | None = None,
        **scoring: Any,
    ) -> AIMessage | None:
        """``send(logprobs=True, **scoring)``'s reply, or None when the endpoint is known to give
        no logprobs or refuses them now: the refusal is recorded (with ``note``'s fields) and
        the endpoint is not asked again. An endpoint error is raised as it is."""
        if not self.supports_logprobs:
            return None
        try:
            return await send(logprobs=True, **scoring)
        except EndpointError:
            raise
        except Exception as exc:  # the endpoint has no logprobs: stop asking
            record_decision(
                **(note or {}), event="logprobs_unavailable", error=one_line(str(exc), 200)
            )
            self.supports_logprobs = False
            return None

    async def ascore_continuation(
        self, messages: Messages, prefix: str, text: str, *, top_logprobs: int = 2
    ) -> Scored | None:
        """``text``'s tokens with their logprobs, as the model's reply to ``messages`` that
        continues after ``prefix`` (the start of that reply; may be empty).

        The request ends with an assistant message holding ``prefix``, which llama.cpp's
        server continues (its assistant prefill; the reply may repeat the prefix), and is
        answered at temperature 0: the tokens are the model's own, as it generates ``text``.
        None when the endpoint gives no logprobs or its continuation does not start with
        ``text`` (another model, or a reply that was constrained when it was made)."""
        msgs = to_messages(messages)
        if prefix:
            msgs = [*msgs, AIMessage(content=prefix)]
        parts = prompt_parts(messages)
        reply = await self._with_logprobs(
            lambda **s: self._ainvoke(msgs, len(text) + 2, parts, **s),
            top_logprobs=top_logprobs,
            temperature=0.0,
        )
        if reply is None:
            return None
        tokens = _token_logprobs(reply)
        content = _text(reply)
        if prefix and content.startswith(prefix):
            content = content[len(prefix) :]
        target = text.strip()
        if tokens is None or not content.lstrip().startswith(target):
            return None
        kept: list[TokenLogprob] = []
        for token in tokens:
            if len("".join(t.token for t in kept).strip()) >= len(target):
                break
            kept.append(token)
        return Scored(content, kept)

    def _constraint(self, schema: Mapping[str, Any]) -> dict[str, Any]:
        if self.structured_mode == "json_schema":
            return {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "reply", "schema": dict(schema)},
                }
            }
        if self.structured_mode == "json_object":
            return {"response_format": {"type": "json_object", "schema": dict(schema)}}
        return {}

    async def _ainvoke_constrained(
        self,
        messages: list[BaseMessage],
        max_tokens: int,
        schema: Mapping[str, Any],
        parts: Parts = None,
        **scoring: Any,
    ) -> AIMessage:
        extra = self._constraint(schema)
        try:
            return await self._ainvoke(messages, max_tokens, parts, **extra, **scoring)
        except Exception as err:
            cause = err.__cause__ if isinstance(err, EndpointError) else err
            refused = cause is not None and (
                status_of(cause) in _CONSTRAINT_REFUSED
                or bool({c.__name__ for c in type(cause).__mro__} & _REFUSAL_NAMES)
            )
            if not extra or not refused:
                raise
            # the server does not take this response_format: remember and go unconstrained
            record_decision(
                event="structured_mode_fallback",
                mode=self.structured_mode,
                error=one_line(str(err), 200),
            )
            self.structured_mode = "none"
            return await self._ainvoke(messages, max_tokens, parts, **scoring)

    async def _ainvoke_structured(
        self,
        messages: list[BaseMessage],
        max_tokens: int,
        schema: Mapping[str, Any],
        parts: Parts,
        logprobs: bool,
    ) -> tuple[str, list[TokenLogprob] | None]:
        """A constrained reply's text, and its token logprobs when ``logprobs`` is asked and the
        endpoint gives them (after one refusal the endpoint is not asked again)."""
        if logprobs:
            reply = await self._with_logprobs(
                lambda **s: self._ainvoke_constrained(messages, max_tokens, schema, parts, **s),
                top_logprobs=2,
            )
            if reply is not None:
                return _text(reply), _token_logprobs(reply)
        return _text(await self._ainvoke_constrained(messages, max_tokens, schema, parts)), None

    async def astructured(
        self,
        messages: Messages,
        schema: type[M],
        *,
        default: M,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        call: str = "",
        logprobs: bool = False,
    ) -> Structured[M]:
        """A reply validated against ``schema``; ``default`` if nothing valid comes back. With
        ``logprobs``, the same request also asks for the reply's token logprobs (``tokens``:
        those of the reply the value was read from; None where the endpoint gives none)."""
        msgs = to_messages(messages)
        json_schema = schema.model_json_schema()
        constrained = self.structured_mode != "none"
        raw, tokens = await self._ainvoke_structured(
            msgs, max_tokens, json_schema, prompt_parts(messages), logprobs
        )
        parsed = parse_model(raw, schema)
        if parsed is not None:
            path: Literal["constrained", "parsed"] = (
                "constrained" if constrained and self.structured_mode != "none" else "parsed"
            )
            record_decision(call=call, path=path)
            return Structured(parsed, path, raw, tokens)
        repair = [
            *msgs,
            AIMessage(content=raw),
            HumanMessage(
                content="Your reply was not valid. Reply again with only one JSON object matching this "
                f"schema, no other text:\n{json.dumps(json_schema)}"
            ),
        ]
        raw2, tokens = await self._ainvoke_structured(
            repair, max_tokens, json_schema, None, logprobs
        )
        parsed = parse_model(raw2, schema)
        if parsed is not None:
            record_decision(call=call, path="repaired")
            return Structured(parsed, "repaired", raw2, tokens)
        record_decision(call=call, path="default", raw=redact(raw2[:300]))
        return Structured(default, "default", raw2, tokens)

    async def achoose(
        self,
        messages: Messages,
        options: Sequence[str],
        *,
        default: str,
        max_tokens: int = 8,
        call: str = "",
    ) -> Choice:
        """Pick one of ``options`` (e.g. ``["True", "False"]``).

        Decides by the options' first-token probabilities where the endpoint returns logprobs,
        then by a constrained JSON choice, then by parsing free text, then ``default``.
        """
        msgs = to_messages(messages)
        parts = prompt_parts(messages)
        # a few tokens: some models open with a whitespace or newline token
        reply = await self._with_logprobs(
            lambda **s: self._ainvoke(msgs, 3, parts, **s), note={"call": call}, top_logprobs=20
        )
        probs = self._option_probs(reply, options) if reply is not None else {}
        if reply is not None and probs:
            # ties go to the caller's safe default
            best = max(probs, key=lambda k: (probs[k], k == default))
            record_decision(call=call, path="logprobs", probs=probs)
            return Choice(best, "logprobs", probs, _text(reply))
        schema = {
            "type": "object",
            "properties": {"answer": {"type": "string", "enum": list(options)}},
            "required": ["answer"],
        }
        raw = _text(await self._ainvoke_constrained(msgs, max_tokens + 16, schema, parts))
        picked = parse_choice(raw, options)
        if picked is not None:
            path: Literal["constrained", "parsed"] = (
                "constrained" if self.structured_mode != "none" else "parsed"
            )
            record_decision(call=call, path=path, value=picked)
            return Choice(picked, path, {}, raw)
        record_decision(call=call, path="default", value=default, raw=redact(raw[:200]))
        return Choice(default, "default", {}, raw)

    @staticmethod
    def _option_probs(reply: AIMessage, options: Sequence[str]) -> dict[str, float]:
        """Probability of each option at the first non-whitespace generated position.

        Case and spacing variants of a token (``True``, `` true``, ``TRUE``) are summed; a token
        counts for an option when it is a prefix of it (``Tr`` for ``True``).
        """
        tokens = _token_logprobs(reply) or []
        position = next((t for t in tokens if t.token.strip()), None)
        if position is None:
            return {}
        probs: dict[str, float] = {}
        for alternative, logprob in position.top:
            token = alternative.strip().lower()
            if not token:
                continue
            for option in options:
                if option.lower().startswith(token):
                    probs[option] = probs.get(option, 0.0) + math.exp(logprob)
                    break
        return probs


def _token_logprobs(reply: AIMessage) -> list[TokenLogprob] | None:
    """The reply's generated tokens with their logprobs, or None when it carries none (or
    only malformed ones)."""
    logprobs = reply.response_metadata.get("logprobs") or {}
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    items = [i for i in content if isinstance(i, dict)] if isinstance(content, list) else []
    try:
        tokens = [
            TokenLogprob(
                token=str(item.get("token", "")),
                logprob=float(item.get("logprob", -100.0)),
                top=[
                    (str(t.get("token", "")), float(t.get("logprob", -100.0)))
                    for t in item.get("top_logprobs") or []
                    if isinstance(t, dict)
                ],
            )
            for item in items
        ]
    except (TypeError, ValueError):  # a logprob that is not a number
        return None
    return tokens or None
