"""User-facing errors: a one-line cause plus a hint, printed by the CLI without a traceback."""

from __future__ import annotations


class GapragError(Exception):
    """An error the user can fix. ``str(err)`` is the cause; ``err.hint`` says what to do."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class EndpointError(GapragError):
    """The LLM endpoint could not be reached or answered with an error."""


class StoreError(GapragError):
    """A store is missing, unreadable or inconsistent."""


class InputError(GapragError):
    """Bad user input: an empty question, an unreadable file, a malformed record."""
