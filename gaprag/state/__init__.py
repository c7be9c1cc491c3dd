"""Typed state schemas: the shared base and one module per method."""

from gaprag.state.base import (
    BaseState,
    Evidence,
    InputState,
    OutputState,
    Usage,
    add_usage,
    empty_usage,
)

__all__ = [
    "BaseState",
    "Evidence",
    "InputState",
    "OutputState",
    "Usage",
    "add_usage",
    "empty_usage",
]
