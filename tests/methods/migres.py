"""MIGRES's test corpus (the Levity films), its prompt-routed scripted model and a fake scorer."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult

from gaprag import build_graph
from gaprag.graphs.migres.filter import ScoreDoc
from gaprag.llm.client import LLM
from gaprag.stores import HashingEmbedder, Store
from gaprag.testing import ScriptedChatModel

# substrings that route a prompt to its scripted reply
LEAF = "Pull out every piece of information"
MAIN = "Answer the question using only the information"
QUERY = "New queries:"
KNOW = "from what you know"
FINAL = "If the information is not enough, answer from your own knowledge"
VERIFY = "Answer (Yes or No):"
SUFF = "enough to answer the question, with no needed fact"

Q0 = "Do the directors of Levity and I Come with the Rain share a nationality?"
UNANSWERABLE = json.dumps(
    {
        "answer": {"text": "unanswerable", "confidence": 1},
        "explanation": "The nationality of the director is not known.",
        "missing_information": "the director of Levity",
    }
)
FINAL_REPLY = json.dumps({"answer": {"text": "No", "confidence": 3}, "explanation": "guess"})

LEVITY = [
    {
        "id": "lev",
        "title": "Levity (film)",
        "text": "Levity is a 2003 drama film written and directed by Ed Solomon.",
    },
    {
        "id": "sol",
        "title": "Ed Solomon",
        "text": "Edward James Solomon is an American filmmaker and screenwriter of film comedies.",
    },
    {
        "id": "rain",
        "title": "I Come with the Rain",
        "text": "I Come with the Rain is a 2009 thriller film directed by Vietnamese-born French director Tran Anh Hung.",
    },
    {
        "id": "tran",
        "title": "Tran Anh Hung",
        "text": "Tran Anh Hung is a Vietnamese-born French film director and screenwriter.",
    },
    {
        "id": "d1",
        "title": "Levity (album)",
        "text": "Levity is an album released by a jazz band, unrelated to any film.",
    },
    {
        "id": "d2",
        "title": "Rain (film)",
        "text": "Rain is a 1932 film directed by Lewis Milestone about a small island.",
    },
]


class FakeScorer:
    """Scores from a function of (query, doc); records what it was asked to score."""

    def __init__(self, fn: Callable[[str, ScoreDoc], float] | float = 1.0) -> None:
        self.fn = fn
        self.name = "fake"
        self.default_delta = 0.5
        self.seen: list[tuple[str, str]] = []

    def score(self, query: str, docs: Sequence[ScoreDoc]) -> list[float]:
        out = []
        for d in docs:
            self.seen.append((query, d["text"]))
            out.append(self.fn(query, d) if callable(self.fn) else self.fn)
        return out


class FakeVerifier:
    def __init__(self, accept: Callable[[str, str], bool]) -> None:
        self.accept = accept
        self.calls: list[tuple[str, str]] = []

    def entails(self, premise: str, statement: str) -> bool:
        self.calls.append((premise, statement))
        return self.accept(premise, statement)


def with_logprobs(chat: ScriptedChatModel) -> LLM:
    return LLM(chat, supports_logprobs=True)


def judged_sufficient(messages: list[BaseMessage]) -> float:
    """P(Yes) of a model that agrees with its own judge reply (the last assistant turn)."""
    said = next((str(m.content) for m in reversed(messages) if m.type == "ai"), "")
    return 0.1 if "unanswerable" in said.lower() else 0.9


class ChoiceChat(ScriptedChatModel):
    """A scripted model that answers the sufficiency choice with first-token logprobs:
    P(Yes) = ``p_yes`` (a number, or a function of the messages), P(No) = 1 - P(Yes); with
    ``p_yes=None`` it gives no logprobs (the choice then falls back to parsing the reply).
    Other choices (the verifier) get logprobs that agree with their scripted "Yes"/"No" reply,
    or the base class's fixed ``logprobs`` when set; a reply with scripted token logprobs
    (``reply_logprobs``) keeps them."""

    p_yes: Any = judged_sufficient

    def _result(self, messages: list[BaseMessage], **kwargs: Any) -> ChatResult:
        result = super()._result(messages, **kwargs)
        if not kwargs.get("logprobs"):
            return result
        if messages and SUFF in str(messages[-1].content):
            p = self.p_yes(messages) if callable(self.p_yes) else self.p_yes
        elif self.logprobs or result.generations[0].message.content in self.reply_logprobs:
            return result  # the base class's fixed or scripted logprobs
        else:  # another choice (the verifier): logprobs that agree with the scripted reply
            reply = str(result.generations[0].message.content).strip()
            p = {"Yes": 0.99, "No": 0.01}.get(reply)
        if p is None:
            result.generations[0].message.response_metadata.pop("logprobs", None)
        else:
            top = [
                {"token": tok, "logprob": math.log(min(max(q, 1e-9), 1.0))}
                for tok, q in (("Yes", p), ("No", 1.0 - p))
            ]
            result.generations[0].message.response_metadata["logprobs"] = {
                "content": [{"token": top[0]["token"], "logprob": top[0]["logprob"],
                             "top_logprobs": top}]
            }  # fmt: skip
        return result


def hashing_store(root: Path, docs: list[dict[str, str]]) -> Store:
    """A store of ``docs`` at ``root``, embedded with the hashing embedder."""
    return Store.build(root, docs, embedder=HashingEmbedder(), progress=False)  # type: ignore[arg-type]


def main_json(text: str, confidence: int = 5) -> str:
    """An answered main-module reply."""
    return json.dumps(
        {
            "answer": {"text": text, "confidence": confidence},
            "explanation": "From the information.",
            "missing_information": "",
        }
    )


def leaf_json(*facts: tuple[str, list[int]]) -> str:
    return json.dumps(
        {"useful_information": [{"info": f, "support_passages": s} for f, s in facts]}
    )


def run(
    store: Store,
    rules: list[tuple[str, Any]],
    *,
    scorer: Any = None,
    verify_with: Any = None,
    question: str = Q0,
    p_yes: Any = judged_sufficient,
    reply_logprobs: dict[str, list[list[tuple[str, float]]]] | None = None,
    **ctx: Any,
) -> tuple[dict[str, Any], ScriptedChatModel]:
    """One question through the graph; the sufficiency choice answers "Yes" with P(Yes) =
    ``p_yes`` (default: agrees with the judge's reply), and "Yes" when parsed as text; replies
    in ``reply_logprobs`` carry those token logprobs when a call asks for them."""
    chat = ChoiceChat(
        rules=[(SUFF, "Yes"), *rules], p_yes=p_yes, reply_logprobs=reply_logprobs or {}
    )
    ctx.setdefault("verifier", "off")
    ctx.setdefault("reader", "paper")  # MIGRES's own answers (the shared step is tested apart)
    graph = build_graph(
        "migres", llm=LLM(chat, supports_logprobs=True), retriever=store,
        scorer=scorer if scorer is not None else FakeScorer(1.0), fact_verifier=verify_with, **ctx,
    )  # fmt: skip
    return graph.invoke({"question": question}), chat


def prompts_with(chat: ScriptedChatModel, needle: str) -> list[str]:
    return [p for p in chat.prompts() if needle in p]


def asked(chat: ScriptedChatModel, needle: str) -> list[str]:
    """The calls whose last message contains ``needle`` (not earlier turns)."""
    return [c["messages"][-1][1] for c in chat.calls if needle in c["messages"][-1][1]]


def counter_reply(make: Callable[[int], str]) -> Callable[[list[BaseMessage]], str]:
    counter = itertools.count(1)
    return lambda _messages: make(next(counter))
