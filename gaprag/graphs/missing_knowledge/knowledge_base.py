"""Knowledge bases and the evidence budget of missing_knowledge.

A knowledge base is the passage store ("passages"), a store of question-answer pairs
("qa_pairs", a :class:`gaprag.stores.pairs.PairStore` or any retriever whose evidence text is
"Q: ...\\nA: ..."), or both searched together ("merged"). KB A and KB B are chosen separately
(the paper's "Misk A+B"). Entries are compared by the md5 of their stripped text, the paper's
duplicate test.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from typing import Any, Literal

from langchain_core.retrievers import BaseRetriever

from gaprag import nodes
from gaprag.aio import run_sync
from gaprag.errors import GapragError
from gaprag.graphs.missing_knowledge.context import BudgetMode, MergedOrder
from gaprag.graphs.missing_knowledge.state import Chunk, ChunkKind, KnowledgeBase
from gaprag.state.base import Evidence
from gaprag.stores.retriever import LangChainRetrieverAdapter, Retriever, as_retriever
from gaprag.stores.store import RetrievalMode

QA_SOURCE = "qa_pairs"


def md5_text(text: str) -> str:
    return hashlib.md5(text.strip().encode("utf-8")).hexdigest()


def evidence_md5(item: Evidence) -> str:
    return md5_text(item["text"])


def budget(
    top_k: int, mode: BudgetMode, per_query: int = 0, first_k: int = 0
) -> tuple[int, int, int]:
    """(chunks for the user question, per missing-knowledge query, missing-knowledge total).

    The paper's split of ``top_k``, with the user question's share raised to ``first_k``
    (the missing-knowledge share stays the paper's)."""
    top_k = max(1, top_k)
    if mode == "additive":
        k_orig, k_mk_total = top_k, max(1, top_k // 2)
    else:
        k_orig = max(1, top_k // 2)
        k_mk_total = max(1, top_k - k_orig)
    k_orig = max(k_orig, first_k)
    return k_orig, per_query if per_query > 0 else k_mk_total, k_mk_total


def _chunks(
    hits: Sequence[Evidence],
    kind: ChunkKind,
    kb: KnowledgeBase,
    by: Literal["orig", "mk"],
    query: str,
) -> list[Chunk]:
    return [
        Chunk(
            id=h["id"],
            title=h.get("title", "") or "",
            text=h["text"],
            kind=kind,
            kb=kb,
            source=h.get("source", ""),
            score=float(h.get("score", 0.0)),
            rank=i,
            retrieved_by=by,
            query=query,
            md5=md5_text(h["text"]),
        )
        for i, h in enumerate(hits, 1)
    ]


class KnowledgeBaseRetriever:
    """One knowledge-base setup (passages, qa_pairs or merged) as a gaprag ``Retriever``.

    Also usable on its own, e.g. ``build_graph("standard_rag", retriever=KnowledgeBaseRetriever(
    "merged", store, pairs))`` for the paper's standard-RAG rows; ``merged`` with
    ``merged_order="interleave"`` is the paper's "2-way retrieval" (k/2 from each store).
    """

    def __init__(
        self,
        kb: KnowledgeBase,
        passages: Any,
        pairs: Any,
        *,
        merged_order: MergedOrder = "score",
        qa_gamma: float = 1.0,
    ) -> None:
        """``passages``: a gaprag store/retriever or a LangChain retriever; ``pairs``: a
        :class:`~gaprag.stores.pairs.PairStore` or a retriever of "Q: ...\\nA: ..." evidence."""
        if kb in ("qa_pairs", "merged") and pairs is None:
            raise GapragError(
                f"knowledge base {kb!r} needs a question-answer pair store",
                hint="build one with `gaprag kb qa-pairs CORPUS --out DIR` and pass "
                "qa_store=DIR (or --set qa_store=DIR)",
            )
        if kb in ("passages", "merged") and passages is None:
            raise GapragError(f"knowledge base {kb!r} needs a passage store", hint="pass a store")
        self.kb: KnowledgeBase = kb
        self.passages: Retriever | None = as_retriever(passages) if passages is not None else None
        self.pairs = pair_retriever(pairs, gamma=qa_gamma) if pairs is not None else None
        self.merged_order: MergedOrder = merged_order

    async def achunks(
        self,
        query: str,
        k: int,
        *,
        mode: RetrievalMode | None = None,
        retrieved_by: Literal["orig", "mk"] = "orig",
        exclude: Collection[str] = (),
        round: int = 1,
    ) -> list[Chunk]:
        """The top ``k`` entries for ``query``, searched through the shared retrieval step
        (which records every id returned)."""
        if k <= 0:
            return []
        docs: list[Chunk] = []
        pairs: list[Chunk] = []
        if self.kb in ("passages", "merged"):
            assert self.passages is not None
            hits = await nodes.retrieve(
                self.passages, [query], k=k, mode=mode, round=round, exclude=exclude
            )
            docs = _chunks(hits, "doc", self.kb, retrieved_by, query)
        if self.kb in ("qa_pairs", "merged"):
            assert self.pairs is not None
            hits = await nodes.retrieve(
                self.pairs, [query], k=k, mode=mode, round=round, exclude=exclude
            )
            pairs = _chunks(hits, "qa", self.kb, retrieved_by, query)
        if self.kb != "merged":
            return docs or pairs
        return self._merge(docs, pairs, k, mode)

    def _merge(
        self, docs: list[Chunk], pairs: list[Chunk], k: int, mode: RetrievalMode | None
    ) -> list[Chunk]:
        if self.merged_order == "score" and mode == "dense":  # comparable cosines
            ranked = sorted([*docs, *pairs], key=lambda c: -c["score"])
        else:
            ranked = [c for pair in zip(docs, pairs, strict=False) for c in pair]
            ranked += docs[len(pairs) :] + pairs[len(docs) :]
        out: list[Chunk] = []
        seen: set[str] = set()
        for chunk in ranked:
            if chunk["md5"] not in seen:
                seen.add(chunk["md5"])
                out.append({**chunk, "rank": len(out) + 1})
            if len(out) >= k:
                break
        return out

    def chunks(
        self,
        query: str,
        k: int,
        *,
        mode: RetrievalMode | None = None,
        retrieved_by: Literal["orig", "mk"] = "orig",
        exclude: Collection[str] = (),
    ) -> list[Chunk]:
        """:meth:`achunks`, blocking."""
        return run_sync(
            self.achunks(query, k, mode=mode, retrieved_by=retrieved_by, exclude=exclude)
        )

    def search(
        self,
        query: str,
        k: int = 5,
        *,
        mode: RetrievalMode | None = None,
        exclude: Collection[str] = (),
    ) -> list[Evidence]:
        return [to_evidence(c, 0) for c in self.chunks(query, k, mode=mode, exclude=exclude)]


def pair_retriever(pairs: Any, *, gamma: float = 1.0) -> Retriever:
    """A :class:`~gaprag.stores.pairs.PairStore`, a LangChain retriever, or a gaprag retriever
    whose evidence text reads "Q: ...\\nA: ..." (e.g. ``PairStore.as_retriever()``)."""
    from gaprag.stores.pairs import PairStore

    if isinstance(pairs, PairStore):
        return pairs.as_retriever(gamma=gamma, source_label=QA_SOURCE)
    if isinstance(pairs, BaseRetriever):
        return LangChainRetrieverAdapter(pairs, source=QA_SOURCE)
    return as_retriever(pairs)


def open_pair_store(path: str, *, create: bool = True) -> Any:
    from gaprag.stores.pairs import PairStore

    return PairStore.open(path, create=create)


def to_evidence(chunk: Chunk, round: int) -> Evidence:
    return Evidence(
        id=chunk["id"],
        title=chunk["title"],
        text=chunk["text"],
        source=chunk["source"],
        score=chunk["score"],
        round=round,
    )


def merge_round_robin(
    candidates: Sequence[Sequence[Chunk]], seen: Collection[str], limit: int | None
) -> list[Chunk]:
    """q1#1, q2#1, q1#2, q2#2, ...: skip md5 duplicates (of ``seen`` and of each other), stop
    at ``limit`` (None: keep everything)."""
    taken: set[str] = set(seen)
    out: list[Chunk] = []
    depth = max((len(c) for c in candidates), default=0)
    for rank in range(depth):
        for ranked in candidates:
            if rank >= len(ranked):
                continue
            chunk = ranked[rank]
            if chunk["md5"] in taken:
                continue
            taken.add(chunk["md5"])
            out.append(chunk)
            if limit is not None and len(out) >= limit:
                return out
    return out
