"""IRCoT's state: the growing passage pool (``evidence``) and the chain of thought so far."""

from __future__ import annotations

import operator
import warnings
from dataclasses import dataclass, field
from typing import Annotated, Any

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
    pass


__all__ = ["InputState", "OutputState", "State"]

_DEPRECATED = {"IRCoTState": "State", "IRCoTOutput": "OutputState"}


def __getattr__(name: str) -> Any:
    """The classes' old names, kept for one release with a warning."""
    if name in _DEPRECATED:
        new = _DEPRECATED[name]
        warnings.warn(
            f"{__name__}.{name} is deprecated: use {new} instead",
            DeprecationWarning,
            stacklevel=2,
        )
        return globals()[new]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
