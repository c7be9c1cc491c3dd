"""RAG-EF's stores and the expert's side of the loop: which pair store a run uses, which
document retriever the empty-store fallback uses, the review request shown to the expert,
how the expert's resume value is read, and the checkpointer a pause needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gaprag.config import gaprag_home
from gaprag.deps import Deps
from gaprag.errors import InputError
from gaprag.graphs.rag_ef.context import Context
from gaprag.graphs.rag_ef.state import Feedback, State
from gaprag.stores.pairs import PairStore
from gaprag.stores.retriever import Retriever

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
    ``retriever=``), else the ``feedback_store`` path, else the default file."""
    if deps.pair_store is not None:
        return deps.pair_store
    if isinstance(deps.retriever, PairStore):
        return deps.retriever
    path = _resolved(ctx.feedback_store or None)
    return deps.cached(("pair_store", path), lambda: PairStore.open(path))


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


def parse_feedback(value: Any, question: str) -> Feedback | str | None:
    """An expert's resume value -> Feedback, ``None`` (skipped) or an error message."""
    if value is None or value == {} or (isinstance(value, dict) and value.get("skip")):
        return None
    if not isinstance(value, dict):
        return "resume with a dict {'answer': ..., 'chunk': ...}"
    answer = str(value.get("answer") or "").strip()
    chunk = str(value.get("chunk") or "").strip()
    missing = [name for name, v in (("answer", answer), ("chunk", chunk)) if not v]
    if missing:
        return f"feedback is missing {' and '.join(missing)}"
    q = str(value.get("question") or "").strip() or question
    cid = value.get("chunk_id")
    return Feedback(
        question=q,
        answer=answer,
        chunk=chunk,
        chunk_id=str(cid) if cid else None,
        source=str(value.get("source") or "expert"),
    )
