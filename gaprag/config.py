"""Environment configuration (the README's Configuration table). Read at call time so tests can monkeypatch."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import overload
from urllib.parse import urlsplit

from gaprag.errors import GapragError

DEFAULT_LOCAL_MODEL = "qwen2.5-coder-1.5b"
PLACEHOLDER_API_KEY = "sk-local-placeholder"
#: Longest question accepted (characters); longer ones are refused before any LLM call.
DEFAULT_MAX_QUESTION_CHARS = 4000
#: Longest JSONL line read (bytes); longer lines are refused without being held in memory.
DEFAULT_MAX_LINE_BYTES = 4 * 1024 * 1024
#: Seconds one HTTP request to the endpoint may take before it counts as failed.
DEFAULT_TIMEOUT_S = 600.0
#: Retries of a failed request (connection errors, 408/409/429/5xx), honouring Retry-After.
DEFAULT_MAX_RETRIES = 3


#: The spellings of on and off an on/off setting accepts (any case).
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})


def parse_flag(text: str) -> bool | None:
    """``text`` as on (True) or off (False) by :data:`TRUE_WORDS` and :data:`FALSE_WORDS`;
    None when it is neither."""
    low = text.strip().lower()
    return True if low in TRUE_WORDS else False if low in FALSE_WORDS else None


@overload
def flag(name: str, default: bool = False) -> bool: ...
@overload
def flag(name: str, default: None) -> bool | None: ...
def flag(name: str, default: bool | None = False) -> bool | None:
    """The on/off environment variable ``name``: ``1``/``true``/``yes``/``on`` or
    ``0``/``false``/``no``/``off`` (any case); unset or empty: ``default``. Any other value is an
    error, so a misspelt setting is never read as off."""
    text = (os.environ.get(name) or "").strip()
    if not text:
        return default
    value = parse_flag(text)
    if value is not None:
        return value
    raise GapragError(
        f"{name}={text!r} is neither on nor off", hint=f"set {name}=1 (on) or {name}=0 (off)"
    )


def _int_env(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name) or default)
    except ValueError:
        return default


def _float_env(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name) or default)
    except ValueError:
        return default


def private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) and make it owner-only (0700); returns it."""
    path.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):  # a folder we do not own: leave its mode alone
        path.chmod(0o700)
    return path


def private_file(path: Path) -> Path:
    """Create ``path`` if missing and make it owner-only (0600): it may hold prompts or keys."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.close(fd)
    with contextlib.suppress(OSError):
        path.chmod(0o600)
    return path


def home_path() -> Path:
    """Where :func:`gaprag_home` is (``GAPRAG_HOME``, else ``~/.cache/gaprag``), not created."""
    return Path(os.environ.get("GAPRAG_HOME") or Path.home() / ".cache" / "gaprag").expanduser()


def gaprag_home() -> Path:
    """Cache directory for stores, assembled model files, server logs and checkpoints.

    Created owner-only (0700): server logs, checkpoints and traces under it can hold prompts.
    """
    home = home_path()
    if home not in _private_homes:
        private_dir(home)
        _private_homes.add(home)
    return home


_private_homes: set[Path] = set()


def base_url() -> str | None:
    """The configured OpenAI-compatible endpoint, or None to start the embedded server."""
    return os.environ.get("GAPRAG_BASE_URL") or os.environ.get("OPENAI_BASE_URL") or None


def model_name() -> str | None:
    return os.environ.get("GAPRAG_MODEL") or None


def api_key() -> str:
    return os.environ.get("OPENAI_API_KEY") or PLACEHOLDER_API_KEY


def local_model() -> str:
    return os.environ.get("GAPRAG_LOCAL_MODEL") or DEFAULT_LOCAL_MODEL


def local_cache_prompt() -> bool | None:
    """``GAPRAG_LOCAL_CACHE_PROMPT``: ``1`` keeps llama.cpp's prompt cache on in repeatable
    serving too (a prompt that starts like the previous one reuses its computed prefix: many
    times faster for long few-shot prompts, while a reply may differ from a cold server's in
    rare cases), ``0`` turns it off; unset: the serving mode's own choice."""
    return flag("GAPRAG_LOCAL_CACHE_PROMPT", None)


def local_slots() -> int:
    """``GAPRAG_LOCAL_SLOTS``: requests the embedded server serves at once (default 1; repeatable
    serving always uses 1)."""
    return max(1, _int_env("GAPRAG_LOCAL_SLOTS", 1))


def endpoint_slots() -> int | None:
    """``GAPRAG_ENDPOINT_SLOTS``: requests the configured endpoint (``GAPRAG_BASE_URL``) serves
    at once; the calls waiting for one take turns across clients and runs
    (:mod:`gaprag.llm.turns`). Unset or 0: the endpoint serves every request at once."""
    text = (os.environ.get("GAPRAG_ENDPOINT_SLOTS") or "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise GapragError(
            f"GAPRAG_ENDPOINT_SLOTS={text!r} is not a number of requests",
            hint="e.g. GAPRAG_ENDPOINT_SLOTS=4 for a server with 4 slots (0 or unset: no limit)",
        )
    return value or None


#: Seconds a kept embedded server waits for its next client (``GAPRAG_LOCAL_KEEP_S``).
DEFAULT_LOCAL_KEEP_S = 600.0


def local_keep_s() -> float:
    """``GAPRAG_LOCAL_KEEP_S``: seconds the embedded server a ``gaprag`` command started stays up
    with no client after the command finished normally (default 600; 0: stopped at exit)."""
    text = (os.environ.get("GAPRAG_LOCAL_KEEP_S") or "").strip()
    if not text:
        return DEFAULT_LOCAL_KEEP_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise GapragError(
            f"GAPRAG_LOCAL_KEEP_S={text!r} is not a number of seconds",
            hint="e.g. GAPRAG_LOCAL_KEEP_S=600 (0: stop the embedded server when the command ends)",
        )
    return value


def cpu_cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def llama_threads() -> int:
    """``GAPRAG_LLAMA_THREADS``: threads of the embedded llama.cpp server (default: every core
    this process may use)."""
    return max(1, _int_env("GAPRAG_LLAMA_THREADS", cpu_cores()))


_torch = {"managed": False, "embedded_llm_threads": 0}


def manage_torch_threads() -> None:
    """Called by the processes gaprag owns (the ``gaprag`` command, the served graphs): the
    default of :func:`torch_threads` applies in them."""
    _torch["managed"] = True


def embedded_llm_started(threads: int) -> None:
    """The embedded LLM server this process started runs ``threads`` threads."""
    _torch["embedded_llm_threads"] = threads


def torch_threads() -> int | None:
    """``GAPRAG_TORCH_THREADS``: threads of the embedder and the cross-encoder (torch's
    intra-op threads). Default, in a process gaprag owns, while an LLM server shares the CPU:
    the cores the embedded server this process started leaves (at least 1), or 1 beside an
    endpoint on this machine (a loopback address). Otherwise torch's own (None): e.g. while
    ``gaprag index`` embeds a corpus with no LLM running."""
    explicit = _int_env("GAPRAG_TORCH_THREADS", 0)
    if explicit > 0:
        return explicit
    if not _torch["managed"]:
        return None
    if _torch["embedded_llm_threads"]:
        return max(1, cpu_cores() - _torch["embedded_llm_threads"])
    host = urlsplit(base_url() or "").hostname or ""
    if host == "localhost" or host == "::1" or host.startswith("127."):
        return 1
    return None


def apply_torch_threads() -> None:
    """Give torch :func:`torch_threads` threads in the calling thread, before it computes.

    torch keeps the count per thread (a worker thread that computed once keeps the count it
    had then), so the embedder and the cross-encoder call this before each batch; nothing
    happens when torch is not loaded or the count is torch's own."""
    threads = torch_threads()
    torch = sys.modules.get("torch")
    if threads is None or torch is None:
        return
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def max_question_chars() -> int:
    """``GAPRAG_MAX_QUESTION_CHARS`` (default 4000)."""
    return max(1, _int_env("GAPRAG_MAX_QUESTION_CHARS", DEFAULT_MAX_QUESTION_CHARS))


def max_line_bytes() -> int:
    """``GAPRAG_MAX_LINE_BYTES``: longest JSONL line read (default 4 MiB)."""
    return max(1024, _int_env("GAPRAG_MAX_LINE_BYTES", DEFAULT_MAX_LINE_BYTES))


def request_timeout() -> float:
    """``GAPRAG_TIMEOUT`` seconds per endpoint request (default 600)."""
    return max(0.1, _float_env("GAPRAG_TIMEOUT", DEFAULT_TIMEOUT_S))


def max_retries() -> int:
    """``GAPRAG_MAX_RETRIES`` per endpoint request (default 3)."""
    return max(0, _int_env("GAPRAG_MAX_RETRIES", DEFAULT_MAX_RETRIES))


def context_window() -> int | None:
    """``GAPRAG_CONTEXT_WINDOW``: the endpoint's context in tokens, if the user states it."""
    value = _int_env("GAPRAG_CONTEXT_WINDOW", 0)
    return value if value > 0 else None


def quiet() -> bool:
    """``GAPRAG_QUIET=1`` (or ``gaprag --quiet``): no progress messages or bars from gaprag."""
    return flag("GAPRAG_QUIET")


def offline_env() -> None:
    """Never let a library reach for a model hub at run time."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")


def quiet_libraries() -> None:
    """Dependencies' progress bars and warnings stay off the user's terminal.

    Process-wide, so the ``gaprag`` command calls it, not ``import gaprag`` (a Python user's
    own libraries keep their settings; model loading inside gaprag is quieted locally by
    :func:`quiet_model_loading`). gaprag's own progress (``gaprag: ...`` lines and its bars)
    is separate and follows :func:`quiet`. ``GAPRAG_VERBOSE_LIBS=1`` shows everything again.
    """
    if os.environ.get("GAPRAG_VERBOSE_LIBS"):
        return
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    for name in (
        "sentence_transformers",
        "transformers",
        "huggingface_hub",
        "chromadb",
        "bm25s",
        "httpx",
        "openai",
        "langchain_openai",
    ):
        logging.getLogger(name).setLevel(logging.ERROR)
    for module in ("transformers", "huggingface_hub", "sentence_transformers", "torch", "chromadb"):
        warnings.filterwarnings("ignore", module=module)


@contextlib.contextmanager
def environ(**values: str | None) -> Iterator[None]:
    """Set (a string) or unset (None) environment variables for the block, then put back what
    was there."""
    old = {k: os.environ.get(k) for k in values}
    try:
        _set_env(values)
        yield
    finally:
        _set_env(old)


def _set_env(values: dict[str, str | None]) -> None:
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@contextlib.contextmanager
def quiet_model_loading() -> Iterator[None]:
    """While loading a model: no "Loading weights" bar or load report from transformers."""
    if os.environ.get("GAPRAG_VERBOSE_LIBS"):
        yield
        return
    try:
        from transformers.utils import logging as tlog
    except ImportError:
        yield
        return
    bars, level = tlog.is_progress_bar_enabled(), tlog.get_verbosity()
    tlog.disable_progress_bar()  # type: ignore[no-untyped-call]
    tlog.set_verbosity_error()  # type: ignore[no-untyped-call]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        tlog.set_verbosity(level)
        if bars:
            tlog.enable_progress_bar()  # type: ignore[no-untyped-call]
