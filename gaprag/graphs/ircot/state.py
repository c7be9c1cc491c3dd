"""IRCoT's state: the growing passage pool (``evidence``) and the chain of thought so far."""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import Field

from gaprag.state import base
from gaprag.state.base import BaseState, InputState


@dataclass(kw_only=True)
class OutputState(base.OutputState):
    thoughts: Annotated[
        list[str], Field(description="The chain of thought, one sentence per step."), operator.add
    ] = field(default_factory=list)


@dataclass(kw_only=True)
class State(BaseState, OutputState):
    last_step_empty: Annotated[
        bool, Field(description="Whether the last reasoning step's reply held no sentence.")
    ] = False


__all__ = ["InputState", "OutputState", "State"]
