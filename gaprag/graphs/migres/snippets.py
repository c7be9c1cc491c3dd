"""MIGRES's passages: the retrieval candidates of a round and snippets as prompt items."""

from __future__ import annotations

import re
from typing import Any

from gaprag import nodes
from gaprag.graphs.migres.context import Context
from gaprag.graphs.migres.prompting import FORMATS, WHOLE
from gaprag.graphs.migres.state import Snippet
from gaprag.prompts import Passages
from gaprag.state.base import Evidence
from gaprag.stores.milvus import MilvusStore
from gaprag.stores.retriever import Retriever, unwrap
from gaprag.stores.store import Store

RETRY_PREFIX = "Find information about "
_HTML = re.compile(r"</?b>|<br\s*/?>", re.I)


def strip_markup(text: str) -> str:
    """``text`` without the bold and line-break tags some corpora carry."""
    return _HTML.sub(" ", text).strip()


async def query_hits(retriever: Retriever, query: str, ctx: Context, round_: int) -> list[Evidence]:
    """Every hit of one query, in rank order (not de-duplicated)."""
    return await nodes.retrieve(
        retriever, [query], k=ctx.n_retrieve, mode=ctx.retrieval_mode, round=round_, dedupe=False
    )


async def round_candidates(
    retriever: Retriever, queries: list[str], ctx: Context, round_: int
) -> list[Evidence]:
    """The hits of every query, de-duplicated by text; a query with fewer than ``n_retrieve``
    hits is searched again with :data:`RETRY_PREFIX` (``retry_prefix``) while the store holds
    more passages."""
    store = unwrap(retriever)
    total = len(store) if isinstance(store, Store | MilvusStore) and not ctx.filter else None
    seen: set[str] = set()
    out: list[Evidence] = []
    for query in queries:
        hits = await query_hits(retriever, query, ctx, round_)
        if ctx.retry_prefix and len(hits) < ctx.n_retrieve and (total is None or total > len(hits)):
            hits += await query_hits(retriever, RETRY_PREFIX + query, ctx, round_)
        for hit in hits:
            if hit["text"] not in seen:
                seen.add(hit["text"])
                out.append(hit)
    return out


def snippet_item(sn: Snippet) -> dict[str, Any]:
    """A snippet as a render item: LLM knowledge shows no passage."""
    corpus = sn["source"] != "llm"
    return {
        "id": sn["id"] if corpus else "",
        "title": sn["title"],
        "text": sn["text"],
        "source_ids": [sn["id"]] if corpus else [],
    }


def premise(sn: Snippet) -> Passages:
    """A snippet as the verifier's premise, whole."""
    fmt = FORMATS["premise_llm" if sn["source"] == "llm" else "premise"]
    return nodes.render_passages([snippet_item(sn)], fmt, max_words=WHOLE)
