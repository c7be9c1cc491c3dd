"""MIGRES's fact verifier: does a passage entail an extracted fact?"""

from __future__ import annotations

from typing import Protocol

from gaprag import nodes
from gaprag.aio import run_sync, to_thread
from gaprag.graphs.migres.prompting import PROMPTS
from gaprag.graphs.migres.snippets import premise
from gaprag.graphs.migres.state import Snippet
from gaprag.llm.client import LLM, Choice
from gaprag.prompts import Prompt


class Verifier(Protocol):
    """Whether ``premise`` entails ``statement``."""

    def entails(self, premise: str, statement: str) -> bool: ...


class LLMVerifier:
    """A yes/no entailment question to the LLM; an undecidable reply accepts the fact."""

    def __init__(self, llm: LLM, prompt: Prompt = PROMPTS["verify"]) -> None:
        self.llm = llm
        self.prompt = prompt

    async def acheck(self, premise: str, statement: str) -> Choice:
        """The model's Yes/No choice, with the path and option probabilities it was made on."""
        return await self.llm.achoose(
            self.prompt.render(premise=premise, statement=statement),
            ["Yes", "No"],
            default="Yes",
            call="verify",
        )

    def entails(self, premise: str, statement: str) -> bool:
        return run_sync(self.acheck(premise, statement)).value == "Yes"


async def entailed(check: Verifier, sn: Snippet, statement: str, round_: int) -> bool:
    """One verification of ``statement`` against snippet ``sn``, recorded as a decision."""
    shown = premise(sn)
    p: float | None = None
    path: str
    if isinstance(check, LLMVerifier):
        choice = await check.acheck(shown, statement)
        ok = choice.value == "Yes"
        p, path, _ = nodes.read_choice(choice, "Yes")  # P(entailed); ties accept, so p >= 0.5
    else:
        ok, path = await to_thread(check.entails, str(shown), statement), "model"
    nodes.log_decision(
        "verify_nli",
        round_,
        "accept" if ok else "reject",
        p=p,
        path=path,
        threshold=None if p is None else 0.5,
    )
    return ok
