"""The shared evidence-pool update: add new items once, with their round and provenance."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T", bound=Mapping[str, Any])


def by_id(item: Mapping[str, Any]) -> Any:
    return item["id"]


def update_evidence_pool(
    pool: Sequence[T], new: Sequence[T], *, key: Callable[[T], Any] = by_id
) -> tuple[list[T], list[T]]:
    """(the pool with the new items appended, the items that were added): an item whose
    ``key`` is already in the pool (or earlier in ``new``) is dropped."""
    seen = {key(item) for item in pool}
    added: list[T] = []
    for item in new:
        k = key(item)
        if k in seen:
            continue
        seen.add(k)
        added.append(item)
    return [*pool, *added], added
