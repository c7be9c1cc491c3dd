"""Test helpers shipped with the package: a scripted fake chat model, and a served config.

``ScriptedChatModel`` answers from a list of replies in order, or from rules
``(substring_of_last_user_message, reply)``, and records every prompt it saw. Replies carry
``usage_metadata`` (characters / 4) so usage accounting is exercised.

:func:`served_config` writes a copy of a ``langgraph.json`` that serves only some of its graphs,
for ``langgraph dev --config`` started from another folder (tests and load benchmarks).
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LangSmithParams
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field, PrivateAttr

from gaprag.accounting import estimate_tokens

Reply = str | Callable[[list[BaseMessage]], str]


class ScriptedChatModel(BaseChatModel):
    """A deterministic chat model for tests."""

    replies: list[Reply] = Field(default_factory=list)
    rules: list[tuple[str, Reply]] = Field(default_factory=list)
    default: Reply = ""
    logprobs: dict[str, float] | None = None  # token -> logprob for every reply, if set
    # reply text -> its generated tokens, each a list of (token, logprob) alternatives with the
    # generated token first; used (before ``logprobs``) when a call asks for logprobs
    reply_logprobs: dict[str, list[list[tuple[str, float]]]] = Field(default_factory=dict)
    latency: float = 0.0  # seconds each call takes (time.sleep, or asyncio.sleep when async)
    # the model it stands for: a build with profile="auto" applies that model's shipped profile
    model: str | None = None
    _calls: list[dict[str, Any]] = PrivateAttr(default_factory=list)
    _index: int = PrivateAttr(default=0)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        """Tracing parameters: provider ``scripted``, the model name a call names, else
        ``scripted``."""
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"] = "scripted"
        model = kwargs.get("model")
        params["ls_model_name"] = model if isinstance(model, str) and model else "scripted"
        return params

    @property
    def calls(self) -> list[dict[str, Any]]:
        """Every call: ``messages`` (list of (role, text)), ``kwargs``, ``reply``."""
        return self._calls

    def prompts(self) -> list[str]:
        """The full text of each call's messages, joined."""
        return ["\n".join(text for _, text in c["messages"]) for c in self._calls]

    def _pick(self, messages: list[BaseMessage]) -> str:
        last = str(messages[-1].content) if messages else ""
        full = "\n".join(str(m.content) for m in messages)
        for needle, reply in self.rules:
            if needle in last or needle in full:
                return reply(messages) if callable(reply) else reply
        if self._index < len(self.replies):
            reply = self.replies[self._index]
            self._index += 1
            return reply(messages) if callable(reply) else reply
        return self.default(messages) if callable(self.default) else self.default

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.latency:
            time.sleep(self.latency)
        return self._result(messages, **kwargs)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        """The native async path: the latency is awaited (no worker thread), so concurrent
        runs really overlap. Reply callables may block, so with any of them the reply is
        computed in a worker thread."""
        if self.latency:
            await asyncio.sleep(self.latency)
        scripted = [self.default, *self.replies, *(r for _, r in self.rules)]
        if not any(callable(r) for r in scripted):
            return self._result(messages, **kwargs)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(self._result, messages, **kwargs))

    def _result(self, messages: list[BaseMessage], **kwargs: Any) -> ChatResult:
        text = self._pick(messages)
        self._calls.append(
            {
                "messages": [(m.type, str(m.content)) for m in messages],
                "kwargs": kwargs,
                "reply": text,
            }
        )
        prompt_tokens = sum(estimate_tokens(str(m.content)) for m in messages)
        meta: dict[str, Any] = {}
        if kwargs.get("logprobs") and text in self.reply_logprobs:
            meta["logprobs"] = {
                "content": [
                    {
                        "token": position[0][0],
                        "logprob": position[0][1],
                        "top_logprobs": [{"token": t, "logprob": lp} for t, lp in position],
                    }
                    for position in self.reply_logprobs[text]
                ]
            }
        elif self.logprobs and kwargs.get("logprobs"):
            top = [{"token": t, "logprob": lp} for t, lp in self.logprobs.items()]
            meta["logprobs"] = {
                "content": [
                    {"token": top[0]["token"], "logprob": top[0]["logprob"], "top_logprobs": top}
                ]
            }
        msg = AIMessage(
            content=text,
            response_metadata=meta,
            usage_metadata={
                "input_tokens": prompt_tokens,
                "output_tokens": estimate_tokens(text),
                "total_tokens": prompt_tokens + estimate_tokens(text),
            },
        )
        return ChatResult(generations=[ChatGeneration(message=msg)])


def scripted(
    *replies: Reply, rules: Sequence[tuple[str, Reply]] = (), default: Reply = ""
) -> ScriptedChatModel:
    return ScriptedChatModel(replies=list(replies), rules=list(rules), default=default)


def served_config(source: str | Path, methods: Sequence[str], out_dir: str | Path) -> Path:
    """A copy of the ``langgraph.json`` at ``source`` that serves only ``methods``, written to
    ``out_dir/langgraph.json``, with every graph path and dependency made absolute (relative to
    ``source``'s folder) so the copy works from any folder. Returns the copy's path."""
    root = Path(source).resolve().parent
    config = json.loads(Path(source).read_text(encoding="utf-8"))
    graphs = {}
    for name in methods:
        spec = dict(config["graphs"][name])
        rel, _, attr = spec["path"].partition(":")
        spec["path"] = f"{(root / rel).resolve()}:{attr}"
        graphs[name] = spec
    config["graphs"] = graphs
    config["dependencies"] = [str((root / d).resolve()) for d in config.get("dependencies", ["."])]
    path = Path(out_dir) / "langgraph.json"
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return path
