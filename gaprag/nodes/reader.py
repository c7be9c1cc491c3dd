"""The shared reader: one final-answer step any method can end with (``reader="ranked"``).

Small models answer worse from more context: what a loop gathers only helps when the final
call sees the few strongest passages, placed where the model attends. The reader takes
everything the method gathered (its passages and facts, with their ids) and the method's own
intermediate text (its queries, facts, reasoning), then

1. ranks the gathered items (each id once) against the question and that text with
   ``reader_ranker``: ``retrieval`` (the order the method found them, no cost), ``bm25``
   (BM25 over the gathered set), ``dense`` (the store's embedder, MiniLM by default; cosine)
   or ``llm`` (the model's P(Yes) that the passage helps, one call per passage);
2. keeps ``reader_budget`` items, cut to ``max_passage_words`` (plain RAG's budget by default);
3. orders them weakest first, so the strongest sits last, next to the question at the end of
   the prompt (fixed instructions first, variable parts last);
4. answers with prompt ``reader`` (``gaprag/nodes/prompts.toml``); the short-answer step runs
   after it as after every answer step.

The passages rendered into its prompt are recorded as shown (``shown_ids``), and the items it
answered from become ``evidence``. A trace record ``{call: "reader", ranker, ids, scores}``
says what it chose. With ``reader`` other than ``ranked`` the node passes the method's own
answer through unchanged. A method whose last step is a pure answer call skips that call
when the reader answers (:func:`reader_answers`); the reader falls back to the method's answer
only when its own reply is empty.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from langgraph.runtime import Runtime

from gaprag.accounting import record_decision
from gaprag.aio import to_thread
from gaprag.deps import Deps
from gaprag.llm.client import LLM
from gaprag.nodes.answer import clean_answer
from gaprag.nodes.decisions import option_probability
from gaprag.nodes.render import DEFAULT_FORMAT, PassageFormat, render_passages
from gaprag.prompts import load_prompts
from gaprag.stores.embeddings import Embedder

SHARED_PROMPTS = load_prompts("gaprag.nodes")

Ranker = Literal["retrieval", "bm25", "dense", "llm"]
Item = Mapping[str, Any]


@dataclass
class Gathered:
    """What a method hands the reader: its passages/facts (with ids) and its own text."""

    passages: Sequence[Item] = field(default_factory=list)
    notes: Sequence[str] = field(default_factory=list)


Gather = Callable[[Any], Gathered]


def gathered_evidence(state: Any) -> Gathered:
    """The default: the method's ``evidence``, then plain RAG's passages from the gate (when
    it ran), and the retrieval queries other than the question as the method's own text."""
    passages = [*getattr(state, "evidence", []), *getattr(state, "gate_passages", [])]
    question = str(getattr(state, "question", ""))
    notes = [q for q in getattr(state, "queries", []) if q and q != question]
    return Gathered(passages, notes)


def _key(item: Item) -> str:
    return str(item.get("id") or item.get("text", ""))


def unique(items: Sequence[Item]) -> list[Item]:
    """Each item once (by id, else by text), in first-seen order; empty texts dropped."""
    seen: set[str] = set()
    out: list[Item] = []
    for item in items:
        key = _key(item)
        if not str(item.get("text", "")).strip() or key in seen:
            continue
        seen.add(key)
        out.append(item)
    return out


def item_text(item: Item) -> str:
    title = str(item.get("title") or "")
    text = str(item.get("text", ""))
    return f"{title}: {text}" if title else text


def query_text(question: str, notes: Sequence[str]) -> str:
    return "\n".join([question, *(n for n in notes if n.strip())])


def bm25_scores(query: str, texts: Sequence[str]) -> list[float]:
    """BM25 over ``texts`` alone (the store's tokenisation), scored against ``query``."""
    import bm25s

    from gaprag.stores.bm25 import tokenize, tokenize_many

    index = bm25s.BM25()
    index.index(tokenize_many(texts), show_progress=False)
    terms = tokenize(query)
    if not terms:
        return [0.0] * len(texts)
    return [float(s) for s in index.get_scores(terms)]


def dense_scores(embedder: Embedder, query: str, texts: Sequence[str]) -> list[float]:
    """Cosine similarity of each text to ``query`` (the embedder's vectors are normalised)."""
    vectors = np.asarray(embedder.embed([query, *texts]))
    return [float(s) for s in vectors[1:] @ vectors[0]]


async def llm_scores(
    llm: LLM, question: str, items: Sequence[Item], *, fmt: PassageFormat, max_words: int
) -> list[float]:
    """P(Yes) that each passage helps answer ``question``: one forced choice per passage
    (0.5 where the endpoint gives no probability: a parsed Yes or No counts 1 or 0)."""
    prompt = SHARED_PROMPTS["reader_relevance"]
    out: list[float] = []
    for item in items:
        shown = render_passages([item], fmt, max_words=max_words)
        choice = await llm.achoose(
            prompt.render(question=question, passage=shown),
            ["Yes", "No"],
            default="No",
            call="reader_relevance",
        )
        p = option_probability(choice, "Yes")
        if p is None:
            p = 0.5 if choice.path == "default" else float(choice.value == "Yes")
        out.append(p)
    return out


async def rank(
    items: Sequence[Item],
    question: str,
    notes: Sequence[str] = (),
    *,
    ranker: Ranker = "bm25",
    llm: LLM | None = None,
    embedder: Embedder | None = None,
    fmt: PassageFormat = DEFAULT_FORMAT,
    max_words: int = 150,
) -> list[tuple[Item, float]]:
    """``items`` (each once) with their scores, strongest first; ties keep the gathered
    order. ``retrieval`` scores by that order alone."""
    kept = unique(items)
    if not kept:
        return []
    query = query_text(question, notes)
    texts = [item_text(i) for i in kept]
    if ranker == "retrieval":
        scores = [-float(i) for i in range(len(kept))]
    elif ranker == "bm25":
        scores = await to_thread(bm25_scores, query, texts)
    elif ranker == "dense":
        if embedder is None:
            raise ValueError("the dense ranker needs an embedder")
        scores = await to_thread(dense_scores, embedder, query, texts)
    else:
        if llm is None:
            raise ValueError("the llm ranker needs a model")
        scores = await llm_scores(llm, question, kept, fmt=fmt, max_words=max_words)
    order = sorted(range(len(kept)), key=lambda i: (-scores[i], i))
    return [(kept[i], scores[i]) for i in order]


def pack(ranked: Sequence[tuple[Item, float]], budget: int) -> list[Item]:
    """The ``budget`` strongest items, weakest first: the strongest ends next to the question."""
    return [item for item, _ in reversed(ranked[:budget])]


async def choose(
    question: str,
    gathered: Gathered,
    *,
    ranker: Ranker = "bm25",
    budget: int = 5,
    llm: LLM | None = None,
    embedder: Embedder | None = None,
    fmt: PassageFormat = DEFAULT_FORMAT,
    max_words: int = 150,
) -> tuple[list[Item], list[tuple[Item, float]]]:
    """What the reader shows for ``question`` over ``gathered``, without answering: the
    ``budget`` items in prompt order (strongest last), and the whole ranking (strongest
    first, with scores). ``llm`` is needed by the ``llm`` ranker only, ``embedder`` by
    ``dense``."""
    ranked = await rank(
        gathered.passages,
        question,
        gathered.notes,
        ranker=ranker,
        llm=llm,
        embedder=embedder,
        fmt=fmt,
        max_words=max_words,
    )
    return pack(ranked, budget), ranked


async def reader_embedder(deps: Deps, retriever: Any) -> Embedder:
    """The store's embedder where the retriever is a gaprag store, else the shipped MiniLM
    (loaded in a worker thread the first time)."""
    embedder = getattr(retriever, "embedder", None)
    if embedder is not None and hasattr(embedder, "embed"):
        return embedder  # type: ignore[no-any-return]
    from gaprag.stores.embeddings import default_embedder

    return await deps.acached("reader_embedder", default_embedder)


async def read(
    llm: LLM,
    question: str,
    gathered: Gathered,
    *,
    ranker: Ranker = "bm25",
    budget: int = 5,
    max_words: int = 150,
    max_tokens: int = 48,
    embedder: Embedder | None = None,
    fmt: PassageFormat = DEFAULT_FORMAT,
) -> tuple[str, list[Item]]:
    """(answer, the items it was given in prompt order) for ``question`` over ``gathered``."""
    shown, ranked = await choose(
        question,
        gathered,
        ranker=ranker,
        budget=budget,
        llm=llm,
        embedder=embedder,
        fmt=fmt,
        max_words=max_words,
    )
    scores = {_key(item): score for item, score in ranked}
    record_decision(
        call="reader",
        ranker=ranker,
        ids=[_key(i) for i in shown],
        scores=[round(scores[_key(i)], 4) for i in shown],
        gathered=len(ranked),
    )
    passages = render_passages(shown, fmt, max_words=max_words)
    raw = await llm.agenerate(
        SHARED_PROMPTS["reader"].render(question=question, passages=passages),
        max_tokens=max_tokens,
    )
    return clean_answer(raw), shown


def reader_answers(ctx: Any) -> bool:
    """Whether the shared reader gives the final answer (``reader="ranked"``): a method's own
    final answer call, which the reader would replace, is then skipped."""
    return getattr(ctx, "reader", "short") == "ranked"


def reader_node(gather: Gather = gathered_evidence) -> Callable[..., Any]:
    """The graph node ``reader`` over what ``gather(state)`` returns."""

    async def reader(state: Any, runtime: Runtime[Any], deps: Deps) -> dict[str, Any]:
        """The graph node: answer anew from the best of what the method gathered.

        Only with ``reader="ranked"``, and not after a confident gate. What it ranks is what
        ``gather(state)`` returns (by default `evidence`, `gate_passages` and `queries`).

        Reads: `question`, `answer`, `stop_reason`, `evidence`, `gate_passages`, `queries`;
        writes: `answer`, `evidence`.
        """
        ctx = runtime.context
        if not reader_answers(ctx) or state.stop_reason == "gate_confident":
            return {}
        ranker: Ranker = ctx.reader_ranker
        embedder = None
        if ranker == "dense":
            embedder = await reader_embedder(deps, await deps.aretriever(ctx))
        answer, shown = await read(
            await deps.achat(ctx),
            state.question,
            gather(state),
            ranker=ranker,
            budget=ctx.reader_budget,
            max_words=ctx.max_passage_words,
            max_tokens=ctx.answer_max_tokens,
            embedder=embedder,
        )
        return {"answer": answer or state.answer, "evidence": [dict(i) for i in shown]}

    return reader
