"""RAG-EF's stores and the expert's side of the loop: which pair store a run uses, which
document retriever the empty-store fallback uses, the review request shown to the expert,
how the expert's resume value is read, and the checkpointer a pause needs."""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Any

from gaprag.config import gaprag_home, max_question_chars
from gaprag.deps import Deps
from gaprag.errors import InputError
from gaprag.graphs.rag_ef.context import Context
from gaprag.graphs.rag_ef.state import Feedback, State
from gaprag.operator import chosen_by_run
from gaprag.stores.pairs import PairStore
from gaprag.stores.retriever import Retriever
from gaprag.validate import check_question

INSTRUCTIONS = (
    "Resume with {'answer': <correct answer>, 'chunk': <passage that supports it>} "
    "(optionally 'question'), or {'skip': True} to leave the store as is."
)


def default_store_path() -> Path:
    return gaprag_home() / "feedback.sqlite"


def open_pair_store(path: str | Path | None = None) -> PairStore:
    """The pair store at ``path`` (default ``GAPRAG_HOME/feedback.sqlite``)."""
    return PairStore.open(_resolved(path))


def _resolved(path: str | Path | None) -> str:
    return str(Path(path).expanduser().resolve() if path else default_store_path())


def pair_store(ctx: Context, deps: Deps) -> PairStore:
    """The run's pair store: the injected store (``pair_store=``, or a PairStore given as
    ``retriever=``), else the ``feedback_store`` path (created if missing only when it is the
    operator's), else the default file."""
    if deps.pair_store is not None:
        return deps.pair_store
    if isinstance(deps.retriever, PairStore):
        return deps.retriever
    path = _resolved(ctx.feedback_store or None)
    create = not chosen_by_run(ctx, "feedback_store")  # a run's own path: an existing store
    return deps.cached(("pair_store", path, create), lambda: PairStore.open(path, create=create))


async def documents(ctx: Context, deps: Deps) -> Retriever | None:
    """The document retriever of the empty-store fallback; none when the injected retriever
    is the pair store itself."""
    if isinstance(deps.retriever, PairStore):
        return None
    return await deps.aretriever(ctx)


def require_checkpointer(ctx: Context, configurable: dict[str, Any] | None) -> None:
    """An InputError if this run may pause for expert feedback but has no checkpointer (the
    pause could never be resumed). A checkpointed run has a thread: LangGraph requires a
    ``thread_id`` of every run of a graph compiled with a checkpointer, and a subgraph runs in
    its parent's thread. ``configurable``: the run's config; None skips the check (a node
    called outside a graph)."""
    if configurable is None or not ctx.pauses:
        return
    if configurable.get("thread_id") is not None:
        return
    why = "review=True" if ctx.review else f"judge={ctx.judge!r}"
    raise InputError(
        f"rag_ef: {why} pauses for expert feedback, which needs a checkpointer to resume",
        hint="build_graph('rag_ef', checkpointer=InMemorySaver(), ...) and pass a thread_id, "
        "or run without review (review=False, judge='off')",
    )


def review_request(state: State) -> dict[str, Any]:
    """What the expert sees at the pause (the interrupt's value)."""
    return {
        "question": state.question,
        "answer": state.answer,
        "verdict": state.verdict,
        "qa_pairs": [{"question": q["question"], "answer": q["answer"]} for q in state.qa_block],
        "contexts": [c["text"] for c in state.contexts],
        "instructions": INSTRUCTIONS,
    }


#: the fields a review's resume value may have
FEEDBACK_FIELDS = ("answer", "chunk", "question", "chunk_id", "source", "skip")
#: the sources a reviewer may give a pair (the others are written by gaprag's own tools)
REVIEW_SOURCES = ("expert", "human")
#: the most characters of an expert's answer, chunk and chunk id
MAX_ANSWER_CHARS = 1_000
MAX_CHUNK_CHARS = 20_000
MAX_ID_CHARS = 200


def _text(value: dict[Any, Any], name: str, limit: int) -> str:
    """Field ``name`` of a resume value as clean text (control characters but newlines and
    tabs made spaces, stripped); an InputError when it is not text or longer than ``limit``."""
    raw = value.get(name)
    if raw is None:
        return ""
    if not isinstance(raw, str):
        raise InputError(f"feedback {name} must be text, got {type(raw).__name__}")
    text = "".join(
        ch if ch in "\n\t" or unicodedata.category(ch)[0] != "C" else " " for ch in raw
    ).strip()
    if len(text) > limit:
        raise InputError(
            f"feedback {name} is {len(text):,} characters long; the limit is {limit:,}"
        )
    return text


def parse_feedback(value: Any, question: str) -> Feedback | str | None:
    """An expert's resume value -> Feedback, ``None`` (skipped) or a one-line error message.

    The value is checked like any input: a dict with only :data:`FEEDBACK_FIELDS`, text
    fields of bounded length (the question as :func:`gaprag.validate.check_question` checks
    a question), ``skip`` a bool, ``source`` one of :data:`REVIEW_SOURCES`."""
    if value is None or value == {}:
        return None
    if not isinstance(value, dict):
        return "resume with a dict {'answer': ..., 'chunk': ...}"
    unknown = sorted(str(k)[:40] for k in value if k not in FEEDBACK_FIELDS)
    if unknown:
        return f"unknown feedback field(s) {', '.join(map(repr, unknown))}; use {FEEDBACK_FIELDS}"
    skip = value.get("skip", False)
    if not isinstance(skip, bool):
        return "feedback skip must be true or false"
    if skip:
        return None
    try:
        answer = _text(value, "answer", MAX_ANSWER_CHARS)
        chunk = _text(value, "chunk", MAX_CHUNK_CHARS)
        missing = [name for name, v in (("answer", answer), ("chunk", chunk)) if not v]
        if missing:
            return f"feedback is missing {' and '.join(missing)}"
        q = check_question(_text(value, "question", max_question_chars()) or question)
        cid = _text(value, "chunk_id", MAX_ID_CHARS)
        source = _text(value, "source", MAX_ID_CHARS) or "expert"
    except InputError as err:
        return err.message
    if source not in REVIEW_SOURCES:
        return f"feedback source must be one of {', '.join(REVIEW_SOURCES)}"
    return Feedback(question=q, answer=answer, chunk=chunk, chunk_id=cid or None, source=source)
