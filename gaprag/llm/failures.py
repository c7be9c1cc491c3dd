"""What a misbehaving endpoint can do to a call, turned into something a method can handle.

The LLM layer (:mod:`gaprag.llm.client`) calls these around every chat request:

* :func:`endpoint_error` turns any exception out of a chat model into one
  :class:`~gaprag.errors.EndpointError` whose one-line message names the endpoint and the
  cause (unreachable, timed out, HTTP status, or a reply that is not a chat completion), with
  a hint, and with API keys redacted;
* :func:`is_malformed` says whether it was a malformed reply (HTTP 200 but not a chat
  completion), which is worth one more try before giving up;
* :func:`clean_text` makes a reply's text safe to keep, print and send back (lone UTF-16
  surrogates and NULs removed), so a hostile reply cannot break a later request;
* :func:`fit_to_window` cuts the longest message of a prompt that would not fit the
  endpoint's context window, instead of letting the server refuse it (HTTP 400).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.messages import BaseMessage

from gaprag import accounting
from gaprag.errors import EndpointError, one_line

#: Characters per token assumed when checking a prompt against the context window. Real
#: tokenizers give about 4 characters per English token; 3 leaves room for other text.
CHARS_PER_TOKEN = 3.0
#: Marker left where a prompt was cut.
CUT_MARK = "\n[... cut to fit the model's context window ...]\n"

_TRANSPORT = {
    "APIConnectionError",
    "ConnectError",
    "ConnectTimeout",
    "RemoteProtocolError",
    "ReadError",
    "WriteError",
    "ModelConnectionError",
    "ConnectionError",
}
_TIMEOUT = {"APITimeoutError", "ReadTimeout", "WriteTimeout", "PoolTimeout", "ModelTimeoutError"}


def _names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def status_of(exc: BaseException) -> int | None:
    """The HTTP error status (>= 300) of a status error (OpenAI SDK, LangChain), else None.

    A 2xx status on an exception means the reply arrived but could not be read: malformed.
    """
    status = getattr(exc, "status_code", None)
    if not isinstance(status, int):
        status = getattr(getattr(exc, "response", None), "status_code", None)
    return status if isinstance(status, int) and status >= 300 else None


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost exception of a ``raise ... from`` chain (at most 8 links)."""
    for _ in range(8):
        nxt = exc.__cause__ or exc.__context__
        if nxt is None:
            break
        exc = nxt
    return exc


def is_transport(exc: BaseException) -> bool:
    names = _names(exc)
    return bool(names & (_TRANSPORT | _TIMEOUT))


def is_malformed(exc: BaseException) -> bool:
    """True for a reply that arrived but is not a chat completion (not transport, no status)."""
    return status_of(exc) is None and not is_transport(exc) and not isinstance(exc, EndpointError)


def _detail(exc: BaseException) -> str:
    message = str(getattr(exc, "message", None) or str(exc) or type(exc).__name__)
    message = re.sub(r"^Error code: \d+\s*(- )?", "", message)  # the SDK's prefix
    return one_line(message, 200) or "(no message)"


def endpoint_error(
    exc: BaseException, endpoint: str, *, timeout: float | None = None
) -> EndpointError:
    """One clear :class:`EndpointError` for any failure of a chat request."""
    if isinstance(exc, EndpointError):
        return exc
    where = f"the LLM endpoint at {endpoint}" if endpoint else "the LLM endpoint"
    names = _names(exc)
    status = status_of(exc)
    if names & _TIMEOUT:
        after = f" within {timeout:g} s" if timeout else ""
        return EndpointError(
            f"{where} did not answer{after} (timed out)",
            hint="the server may be overloaded; raise GAPRAG_TIMEOUT, or use a faster endpoint",
        )
    if names & _TRANSPORT:
        cause = _root_cause(exc)
        refused = _names(cause) & {
            "ConnectError",
            "ConnectionRefusedError",
            "ConnectTimeout",
            "gaierror",
            "APIConnectionError",
        }
        what = f"cannot reach {where}" if refused else f"the connection to {where} broke"
        return EndpointError(
            f"{what} ({type(cause).__name__}: {_detail(cause)})",
            hint="start the server, or set GAPRAG_BASE_URL to a running OpenAI-compatible "
            "endpoint (unset it to use the embedded local model)",
        )
    if status is not None:
        detail = _detail(exc)
        if status in (401, 403):
            hint = "check OPENAI_API_KEY (and that the key may use this model)"
        elif status == 404:
            hint = "check GAPRAG_MODEL and that GAPRAG_BASE_URL ends in /v1"
        elif status == 429:
            hint = "the endpoint is rate limiting: lower --concurrency, or raise GAPRAG_MAX_RETRIES"
        elif status >= 500:
            hint = "the server failed; see its log, or retry later (GAPRAG_MAX_RETRIES)"
        elif status == 400 and "context" in detail.lower():
            hint = "the prompt is longer than the model's context: set GAPRAG_CONTEXT_WINDOW, or lower top_k"
        else:
            hint = "check the endpoint's model and options"
        return EndpointError(f"{where} answered HTTP {status}: {detail}", hint=hint)
    return EndpointError(
        f"{where} answered with something that is not a chat completion "
        f"({type(exc).__name__}: {_detail(exc)})",
        hint="check that GAPRAG_BASE_URL points at an OpenAI-compatible /v1 endpoint "
        "(a proxy's HTML error page, or a wrong path, answers like this)",
    )


def clean_text(text: object) -> str:
    """A reply's text made safe: a string, no lone surrogates, no NUL characters."""
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    if "\x00" in text:
        text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def estimate_tokens(text: str) -> int:
    """The shared estimate at :data:`CHARS_PER_TOKEN` (a prompt's size, erring high)."""
    return accounting.estimate_tokens(text, chars_per_token=CHARS_PER_TOKEN, minimum=0)


@dataclass
class Cut:
    """How a prompt was cut to fit: the message index and characters removed."""

    message: int
    removed_chars: int
    estimated_tokens: int
    window: int


def fit_to_window(
    messages: Sequence[BaseMessage], window: int | None, max_tokens: int
) -> tuple[list[BaseMessage], Cut | None]:
    """``messages`` cut to fit ``window`` tokens with room for ``max_tokens`` of output.

    The longest message loses characters from its middle (where passages sit in gaprag's
    prompts; the instructions open them and the question closes them). Nothing is cut when
    the window is unknown or the prompt fits.
    """
    out = list(messages)
    if not window:
        return out, None
    texts = [m.content if isinstance(m.content, str) else None for m in out]
    total = sum(estimate_tokens(t) for t in texts if t is not None)
    budget = window - max_tokens - 16 * len(out)  # chat template overhead per message
    if total <= budget:
        return out, None
    candidates = [i for i, t in enumerate(texts) if t is not None]
    if not candidates:
        return out, None
    i = max(candidates, key=lambda j: len(texts[j] or ""))
    text = texts[i] or ""
    excess_chars = int((total - max(budget, 0)) * CHARS_PER_TOKEN) + len(CUT_MARK)
    keep = max(0, len(text) - excess_chars)
    head = int(keep * 0.6)
    tail = keep - head
    cut_text = text[:head] + CUT_MARK + (text[-tail:] if tail else "")
    out[i] = out[i].model_copy(update={"content": cut_text})
    return out, Cut(
        message=i, removed_chars=len(text) - keep, estimated_tokens=total, window=window
    )
