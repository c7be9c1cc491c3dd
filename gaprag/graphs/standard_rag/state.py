"""standard_rag's state: the shared fields only."""

from __future__ import annotations

from dataclasses import dataclass

from gaprag.state.base import BaseState, InputState, OutputState


@dataclass(kw_only=True)
class State(BaseState):
    pass


__all__ = ["InputState", "OutputState", "State"]
