"""rfm_rag's evidence pool: fact sentences with provenance, de-duplicated as they arrive."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from gaprag.graphs.rfm_rag.feedback_model.features import normalise
from gaprag.graphs.rfm_rag.state import EvidenceItem
from gaprag.state.base import Evidence


def _norm_fact(text: str) -> str:
    return " ".join(normalise(text).split()).rstrip(".!?;, ").strip()


def fact_id(text: str) -> str:
    return hashlib.sha1(_norm_fact(text).encode("utf-8")).hexdigest()[:16]


def add_to_pool(
    pool: Sequence[EvidenceItem],
    sentences: Sequence[str],
    *,
    round: int,
    query: str,
    question: str,
    source_passage_ids: Sequence[str],
    sources: Sequence[dict[str, Any]] = (),
) -> tuple[list[EvidenceItem], int]:
    """Add sentences to the pool: exact duplicates (case, spacing, final period) are dropped, a
    sentence contained in an existing one is dropped, and an existing sentence contained in a
    new one is replaced by it in place. Returns the new pool and how many sentences were added
    or replaced. ``sources``: the metadata of the passages the sentences came from."""
    out = list(pool)
    changed = 0
    for sentence in sentences:
        norm = _norm_fact(sentence)
        if not norm:
            continue
        item = EvidenceItem(
            id=fact_id(sentence),
            text=sentence.strip(),
            round=round,
            query=query,
            question=question,
            source_passage_ids=list(source_passage_ids),
        )
        if sources:
            item["sources"] = [dict(s) for s in sources]
        norms = [_norm_fact(e["text"]) for e in out]
        if any(norm == n or norm in n for n in norms):
            continue
        contained = [i for i, n in enumerate(norms) if n in norm]
        if contained:
            out[contained[0]] = item
            for i in reversed(contained[1:]):
                del out[i]
        else:
            out.append(item)
        changed += 1
    return out, changed


def matching_ids(pool: Sequence[EvidenceItem], sentences: Sequence[str]) -> list[str]:
    """Ids of the pool items that hold ``sentences`` (equal, or containing them), in order:
    the facts a round produced or found again."""
    norms = [(_norm_fact(e["text"]), e["id"]) for e in pool]
    out: list[str] = []
    for sentence in sentences:
        norm = _norm_fact(sentence)
        hit = next((i for n, i in norms if norm and (norm == n or norm in n)), None)
        if hit is not None and hit not in out:
            out.append(hit)
    return out


def facts_of(pool: Sequence[EvidenceItem], ids: Sequence[str]) -> list[EvidenceItem]:
    """The pool items with these ids, in pool order."""
    wanted = set(ids)
    return [e for e in pool if e["id"] in wanted]


def pool_as_evidence(pool: Sequence[EvidenceItem]) -> list[Evidence]:
    """The pool's facts as evidence; a fact's ``metadata`` lists the ``sources`` (metadata) of
    the passages it was extracted from, where they have any."""
    out: list[Evidence] = []
    for e in pool:
        fact = Evidence(
            id=e["id"], title="", text=e["text"], source="llm", score=0.0, round=e["round"]
        )
        if e.get("sources"):
            fact["metadata"] = {"sources": [dict(s) for s in e["sources"]]}
        out.append(fact)
    return out


def facts_for_prompt(pool: Sequence[EvidenceItem]) -> list[dict[str, Any]]:
    """Pool facts as items for the passage renderer: each counts as showing the passages it
    was condensed from (``source_ids``)."""
    return [{"text": e["text"], "source_ids": e["source_passage_ids"]} for e in pool]
