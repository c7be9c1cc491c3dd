"""escalating_rag's state: the candidates each step produced and the rungs run."""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field
from typing_extensions import TypedDict

from gaprag.state import base
from gaprag.state.base import BaseState, Evidence, InputState


class Candidate(TypedDict):
    """One answer the run produced: by plain RAG or by a loop."""

    method: str
    answer: str
    p: float | None  # exp(mean token logprob) of the answer on its own call; None without
    llm_calls: int
    stop_reason: str
    evidence: list[Evidence]


@dataclass(kw_only=True)
class OutputState(base.OutputState):
    candidates: Annotated[
        list[Candidate],
        Field(
            description="Every answer the run produced, in order: plain RAG's, then each "
            "loop's, with its probability, calls and stop reason."
        ),
        operator.add,
    ] = field(default_factory=list)


@dataclass(kw_only=True)
class State(BaseState, OutputState):
    rungs: Annotated[int, Field(description="Loops run for the question (0-2).")] = 0
    chosen: Annotated[
        dict[str, Any], Field(description="The candidate chosen so far, and how.")
    ] = field(default_factory=dict)


__all__ = ["Candidate", "InputState", "OutputState", "State"]
