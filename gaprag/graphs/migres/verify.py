"""MIGRES's fact verifier: does a passage entail an extracted fact?"""

from __future__ import annotations

from typing import Protocol

from gaprag.llm.client import LLM
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

    def entails(self, premise: str, statement: str) -> bool:
        choice = self.llm.choose(
            self.prompt.render(premise=premise, statement=statement),
            ["Yes", "No"],
            default="Yes",
            call="verify",
        )
        return choice.value == "Yes"
