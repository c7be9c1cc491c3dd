"""The answer prompt's two blocks, as data: the Q&A block (one line per ranked pair) and the
unique chunks (``Context1..N``), plus the evidence records the output reports for them.

Pure functions (the store is read only by :func:`wrong_answers`); the text itself is made by
the one passage renderer with the ``[formats.*]`` tables of ``prompts.toml``.
"""

from __future__ import annotations

import hashlib
from typing import Any

from gaprag.graphs.rag_ef.context import QARender
from gaprag.graphs.rag_ef.state import ContextItem, QAItem
from gaprag.nodes import PassageFormat, join_passages, render_passages
from gaprag.prompts import Passages
from gaprag.state.base import Evidence
from gaprag.stores.pairs import PairStore, ScoredPair, chunk_hash, normalize_text


def unique_contexts(pairs: list[ScoredPair], cap: int | None = None) -> list[ContextItem]:
    """The pairs' chunks, duplicates (same normalised text) removed, in first-appearance order."""
    seen: set[str] = set()
    out: list[ContextItem] = []
    for p in pairs:
        key = chunk_hash(p["chunk"])
        if key in seen:
            continue
        seen.add(key)
        out.append(ContextItem(chunk_id=p["chunk_id"], text=p["chunk"], score=p["score"]))
    return out if cap is None else out[: max(cap, 0)]


def passage_contexts(passages: list[Evidence], cap: int | None = None) -> list[ContextItem]:
    """Document passages (standard mode, empty-store fallback) as contexts, titled text."""
    shown = passages if cap is None else passages[: max(cap, 0)]
    return [
        ContextItem(
            chunk_id=p["id"],
            text=f"{p['title']}: {p['text']}" if p["title"] else p["text"],
            score=p["score"],
        )
        for p in shown
    ]


def _norm_answer(text: str) -> str:
    from gaprag.metrics import normalize_answer

    return normalize_answer(text)


def wrong_answers(store: PairStore, pairs: list[ScoredPair], seed: int, question: str) -> list[str]:
    """For each pair, an answer of another stored pair that differs after normalisation."""
    salt = int.from_bytes(hashlib.sha1(question.encode()).digest()[:4], "little")
    pool = store.sample_answers(8 * len(pairs) + 8, seed=seed * 1_000_003 + salt)
    out: list[str] = []
    cursor = 0
    for p in pairs:
        own = _norm_answer(p["answer"])
        pick = ""
        for _ in range(len(pool)):
            cand = pool[cursor % len(pool)] if pool else ""
            cursor += 1
            if cand and _norm_answer(cand) != own:
                pick = cand
                break
        out.append(pick or "unknown")
    return out


def qa_items(pairs: list[ScoredPair], answers: list[str], mode: QARender) -> list[QAItem]:
    """The Q&A block's lines: each pair's question with ``answers`` (empty in q_only mode)."""
    return [
        QAItem(pair_id=p["id"], question=p["question"], answer="" if mode == "q_only" else a)
        for p, a in zip(pairs, answers, strict=True)
    ]


def pair_evidence(pairs: list[ScoredPair], rnd: int) -> list[Evidence]:
    return [
        Evidence(
            id=p["id"],
            title=p["question"],
            text=f"Q: {p['question']}\nA: {p['answer']}",
            source="feedback",
            score=round(p["score"], 6),
            round=rnd,
        )
        for p in pairs
    ]


def context_evidence(contexts: list[ContextItem], rnd: int) -> list[Evidence]:
    return [
        Evidence(
            id=c["chunk_id"],
            title="",
            text=c["text"],
            source="feedback",
            score=round(c["score"], 6),
            round=rnd,
        )
        for c in contexts
    ]


# -- rendering: items for the passage renderer (``id`` is what counts as shown) --------------
def _qa_rows(items: list[QAItem]) -> list[dict[str, Any]]:
    return [{"id": q["pair_id"], "question": q["question"], "answer": q["answer"]} for q in items]


def render_qa_block(
    items: list[QAItem], mode: QARender, formats: dict[str, PassageFormat]
) -> Passages | str:
    """``{qa_block}``: nothing with mode ``none``; questions only with ``q_only``."""
    if mode == "none":
        return ""
    fmt = formats["qa_questions" if mode == "q_only" else "qa"]
    return render_passages(_qa_rows(items), fmt)


def render_contexts(
    contexts: list[ContextItem], formats: dict[str, PassageFormat], max_words: int
) -> Passages:
    """``{contexts}``: ``Context{n}: text`` with whitespace collapsed, cut to ``max_words``."""
    rows = [{"id": c["chunk_id"], "text": normalize_text(c["text"])} for c in contexts]
    return render_passages(rows, formats["contexts"], max_words=max_words)


def render_judge_evidence(
    items: list[QAItem],
    contexts: list[ContextItem],
    formats: dict[str, PassageFormat],
    max_words: int,
) -> Passages | str:
    """The judge's ``{evidence}``: the Q&A lines, then the chunks; ``(none)`` if neither."""
    rows = [{"id": c["chunk_id"], "text": c["text"]} for c in contexts]
    joined = join_passages(
        [
            render_passages(_qa_rows(items), formats["judge_qa"]),
            render_passages(rows, formats["judge_contexts"], max_words=max_words),
        ]
    )
    return joined or "(none)"
