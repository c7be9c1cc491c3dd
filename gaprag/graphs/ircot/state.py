"""IRCoT's state: the growing passage pool (``evidence``) and the chain of thought so far."""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import Field

from gaprag.state.base import BaseState, InputState, OutputState


@dataclass(kw_only=True)
class IRCoTOutput(OutputState):
    thoughts: Annotated[
        list[str], Field(description="The chain of thought, one sentence per step."), operator.add
    ] = field(default_factory=list)


@dataclass(kw_only=True)
class IRCoTState(BaseState, IRCoTOutput):
    pass


__all__ = ["IRCoTOutput", "IRCoTState", "InputState"]
