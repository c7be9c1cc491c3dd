"""IterKey's test corpus and its role fake: a scripted model that replies by prompt type."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from pydantic import PrivateAttr

from gaprag.graphs.iterkey.nodes import PROMPTS
from gaprag.stores.documents import Document
from gaprag.testing import ScriptedChatModel

CORPUS: list[Document] = [
    {"id": "apollo", "title": "Apollo 11", "text": "Apollo 11 lunar module Eagle carried Neil Armstrong and Buzz Aldrin."},
    {"id": "moon", "title": "Moon", "text": "The Moon is the only natural satellite of the Earth."},
    {"id": "landing", "title": "Moon landing", "text": "A Moon landing needs a descent stage and careful navigation."},
    {"id": "crew", "title": "Crewed flight", "text": "The first crewed mission to orbit the Moon flew in December."},
    {"id": "saturn", "title": "Saturn V", "text": "Saturn V was the rocket that launched astronauts toward the Moon."},
    {"id": "fr", "title": "France", "text": "Paris is the capital and largest city of France."},
    {"id": "de", "title": "Germany", "text": "Berlin is the capital of Germany and its largest city."},
    {"id": "eiffel", "title": "Eiffel Tower", "text": "The Eiffel Tower is a wrought-iron tower in Paris built by Gustave Eiffel."},
    {"id": "hamlet", "title": "Hamlet", "text": "Hamlet is a tragedy written by William Shakespeare around 1600."},
    {"id": "shakes", "title": "William Shakespeare", "text": "William Shakespeare was an English playwright born in Stratford-upon-Avon."},
    {"id": "globe", "title": "Globe Theatre", "text": "The Globe Theatre in London staged the plays of Shakespeare."},
]  # fmt: skip
TEXT = {d["id"]: d["text"] for d in CORPUS}
Q = "Which craft made the first crewed Moon landing?"
Q_NO_HITS = "Tell me the story."  # no term of it is in the corpus: the keywords decide D_i

REGEN = tuple(f'["zeta{n}", "Paris"]' for n in range(2, 12))

# prompt type -> how to recognise it (checked in this order; P4 and P4-CoT share a system text)
KINDS: list[tuple[str, str]] = [
    ("regenerate_cot", "The previous keywords failed"),
    ("regenerate_doc", PROMPTS["regenerate_doc"].system),
    ("regenerate", PROMPTS["regenerate"].system),
    ("validate_cot", PROMPTS["validate_cot"].system),
    ("validate", PROMPTS["validate"].system),
    ("answer", PROMPTS["answer"].system),
    ("keywords", PROMPTS["keywords"].system),
]


def kind_of(call: dict[str, Any]) -> str:
    full = "\n".join(text for _, text in call["messages"])
    return next(name for name, needle in KINDS if needle in full)


def kinds(fake: ScriptedChatModel) -> list[str]:
    return [kind_of(c) for c in fake.calls]


def prompts_of(fake: ScriptedChatModel, kind: str) -> list[str]:
    return [p for c, p in zip(fake.calls, fake.prompts(), strict=True) if kind_of(c) == kind]


Verdict = str | float


class RoleFake(ScriptedChatModel):
    """A scripted model whose validation replies carry first-token logprobs when asked for:
    a verdict ``"True"``/``"False"`` gives P(True) = 0.9/0.1, a float gives that P(True) (the
    text is the more probable option), any other text gives no logprobs (a malformed reply:
    the client then asks again without logprobs and parses the text)."""

    _next_top: dict[str, float] | None = PrivateAttr(default=None)
    logprob_call: bool = False

    def _result(self, messages: list[BaseMessage], **kwargs: Any) -> ChatResult:
        self.logprob_call = bool(kwargs.get("logprobs"))
        self._next_top = None
        result = super()._result(messages, **kwargs)
        if self.logprob_call and self._next_top is not None:
            top = [{"token": t, "logprob": lp} for t, lp in self._next_top.items()]
            first = {"token": top[0]["token"], "logprob": top[0]["logprob"], "top_logprobs": top}
            msg = result.generations[0].message
            msg.response_metadata = {"logprobs": {"content": [first]}}
        return result

    def set_top(self, p_true: float) -> None:
        lp = {"True": math.log(max(p_true, 1e-12)), "False": math.log(max(1 - p_true, 1e-12))}
        self._next_top = dict(sorted(lp.items(), key=lambda kv: -kv[1]))


P_TEXT = {"True": 0.9, "False": 0.1}


def role_fake(
    *,
    keywords: Sequence[str] = ('["Moon", "landing"]',),
    answers: Sequence[str] = ("a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8"),
    verdicts: Sequence[Verdict] = ("False",),
    regen: Sequence[str] = REGEN,
    cot_verdicts: Sequence[str] = ("Chain of thought: fine.\nConclusion: True",),
    logprobs: dict[str, float] | None = None,
) -> RoleFake:
    """Replies per prompt type, in order; the last reply of a type repeats. ``logprobs``: the
    same top logprobs on every call asked for them (instead of the per-verdict ones)."""
    queues: dict[str, list[Any]] = {
        "keywords": list(keywords),
        "answer": list(answers),
        "validate": list(verdicts),
        "regenerate": list(regen),
        "regenerate_doc": list(regen),
        "regenerate_cot": list(regen),
        "validate_cot": list(cot_verdicts),
    }
    fake = RoleFake(logprobs=logprobs)

    def reply_for(name: str) -> Callable[[list[BaseMessage]], str]:
        def reply(_: list[BaseMessage]) -> str:
            queue = queues[name]
            item = queue[0]
            if name == "validate" and fake.logprobs is None:
                p = P_TEXT.get(item) if isinstance(item, str) else float(item)
                if p is None and fake.logprob_call:  # malformed: the text call will consume it
                    return str(item)
                if p is not None and fake.logprob_call:
                    fake.set_top(p)
                if not isinstance(item, str):
                    item = "True" if item >= 0.5 else "False"
            if len(queue) > 1:
                queue.pop(0)
            return str(item)

        return reply

    fake.rules = [(needle, reply_for(name)) for name, needle in KINDS]
    return fake
