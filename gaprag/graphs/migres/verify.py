"""MIGRES's fact verifier: does a passage entail an extracted fact?"""

from __future__ import annotations

from typing import Protocol

from gaprag.aio import run_sync
from gaprag.llm.client import LLM, Choice
from gaprag.prompts import Prompt, load_prompts

PROMPTS = load_prompts("gaprag.graphs.migres")


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
