"""User-facing errors: a one-line cause plus a hint, printed by the CLI without a traceback."""

from __future__ import annotations

import os
import re

#: Environment variables whose values are secrets: never shown in messages, logs or traces.
SECRET_VARS = ("OPENAI_API_KEY", "GAPRAG_API_KEY")
# bearer tokens and OpenAI-style keys that appear in error bodies or echoed headers
_KEY_PATTERNS = (
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{8,}"),
)


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """``text`` with API keys replaced by ``***``: the configured ones and anything key-shaped."""
    values = [os.environ.get(v, "") for v in SECRET_VARS] + list(secrets)
    for value in sorted({v for v in values if len(v) >= 6}, key=len, reverse=True):
        text = text.replace(value, "***")
    for pattern in _KEY_PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + "***", text)
    return text


def one_line(text: str, limit: int = 300) -> str:
    """``text`` collapsed to one line of at most ``limit`` characters, secrets redacted."""
    flat = " ".join(redact(str(text)).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


class GapragError(Exception):
    """An error the user can fix: ``err.message`` is the cause, ``err.hint`` what to do.

    ``str(err)`` is both (``"cause (hint: what to do)"``), so a Python caller who only prints
    the exception still sees the hint. API keys are redacted from both.
    """

    def __init__(self, message: str, hint: str = "") -> None:
        self.message = redact(message)
        self.hint = redact(hint)
        super().__init__(self.message, self.hint)  # both, so the error survives pickling

    def __str__(self) -> str:
        return f"{self.message} (hint: {self.hint})" if self.hint else self.message


class EndpointError(GapragError, RuntimeError):
    """The LLM endpoint could not be reached or answered with an error. A ``RuntimeError``
    too, so LangGraph's server passes a served run's caller its one line (told without the
    server's URLs and paths: :meth:`gaprag.operator.OperatorPolicy.hidden`)."""


class StoreError(GapragError, RuntimeError):
    """A store is missing, unreadable or inconsistent. A ``RuntimeError`` too, as
    :class:`EndpointError` is."""


class ServerError(GapragError, RuntimeError):
    """What a served run's caller is told of any other gaprag error that is not the caller's
    input (the server's set-up: a model or embedder not installed, a setting the operator
    gave wrong), with the server's paths and URLs hidden."""


class InputError(GapragError, ValueError):
    """Bad user input: an empty question, an unreadable file, a malformed record, a run
    setting the operator does not allow. A ``ValueError`` too, so LangGraph's server passes
    its one-line message (not "An internal error occurred") to the caller of a run."""


class DependencyError(GapragError, RuntimeError):
    """A library gaprag uses (Chroma, openai, httpx, bm25s, ...) failed in a served run.

    The run's caller is told which library and which error class; the library's own text, which
    can show the server's paths, settings or another caller's data, stays in the server's log
    (the original is this error's ``__cause__``). A ``RuntimeError`` too, so LangGraph's server
    passes this one line (not "An internal error occurred") to the caller."""

    @classmethod
    def of(cls, err: BaseException) -> DependencyError:
        """The error a served run's caller is told for ``err``."""
        kind = type(err).__name__
        origin = raised_in(err)
        where = f" in {origin}" if origin else ""
        return cls(
            f"the run stopped on an error{where} ({kind}); its text is in the server's log",
            hint="if this run's settings or input caused it, change them; else tell the "
            "server's operator",
        )


_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>()]+")


def hide_urls(text: str) -> str:
    """``text`` with every URL shown as ``<URL>``: a server's endpoints, hosts and any
    credentials in them are the operator's."""
    return _URL.sub("<URL>", text)


def raised_in(err: BaseException) -> str:
    """The top-level package whose code raised ``err`` (its innermost frame's), else the
    package of its class; empty for Python's own."""
    module = ""
    tb = err.__traceback__
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__") or module)
        tb = tb.tb_next
    top = (module or type(err).__module__).split(".")[0]
    return "" if top in ("builtins", "__main__") else top
