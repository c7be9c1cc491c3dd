"""Metadata filters: ``{"department": "hr"}`` keeps the passages whose metadata has that value.

A filter maps a metadata key to one value (equality) or a list of values (any of them); every
key must match. It is a run setting (``filter`` in every method's context), so it is checked
here once and bounded in size; a key starting with ``$`` (an operator of Chroma's or
MongoDB's query language, such as ``$and`` or ``$ne``) is refused: the form above is the whole
filter language. The same filter is Chroma's ``where`` on the dense side and a
predicate over the documents' metadata on the BM25 side.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gaprag.errors import InputError

Scalar = str | int | float | bool
MetadataFilter = dict[str, Scalar | list[Scalar]]

MAX_KEYS = 16
MAX_KEY_CHARS = 64
MAX_VALUE_CHARS = 256
MAX_VALUES = 32


def check_filter(value: Any) -> MetadataFilter:
    """``value`` as a filter, or an :class:`InputError` saying what is wrong with it."""
    hint = 'e.g. filter={"department": "hr"} or {"source": ["a.md", "b.md"]}'
    if not isinstance(value, Mapping):
        raise InputError(
            f"filter must be a mapping of metadata keys to values, got {type(value).__name__}",
            hint=hint,
        )
    if len(value) > MAX_KEYS:
        raise InputError(f"filter has {len(value)} keys (at most {MAX_KEYS})", hint=hint)
    out: MetadataFilter = {}
    for key, wanted in value.items():
        if not isinstance(key, str) or not key or len(key) > MAX_KEY_CHARS:
            raise InputError(
                f"filter key {key!r} must be a non-empty string of at most {MAX_KEY_CHARS} "
                "characters",
                hint=hint,
            )
        if key.startswith("$"):
            raise InputError(
                f"filter key {key[:MAX_KEY_CHARS]!r}: operators are not supported; a filter "
                "maps metadata keys to a value or a list of values (all keys must match)",
                hint=hint,
            )
        values = wanted if isinstance(wanted, list) else [wanted]
        if not values or len(values) > MAX_VALUES:
            raise InputError(
                f"filter {key!r} must list 1 to {MAX_VALUES} values (got {len(values)})",
                hint=hint,
            )
        for v in values:
            if not isinstance(v, str | int | float | bool):
                raise InputError(
                    f"filter {key!r}: {v!r} is not a string, number or boolean", hint=hint
                )
            if isinstance(v, str) and len(v) > MAX_VALUE_CHARS:
                raise InputError(
                    f"filter {key!r}: a value longer than {MAX_VALUE_CHARS} characters",
                    hint=hint,
                )
        out[key] = list(values) if isinstance(wanted, list) else wanted
    return out


def matches(metadata: Mapping[str, Any] | None, where: Mapping[str, Any]) -> bool:
    """Whether ``metadata`` has every key of ``where`` with (one of) its value(s)."""
    meta = metadata or {}
    for key, wanted in where.items():
        if key not in meta:
            return False
        options = wanted if isinstance(wanted, list) else [wanted]
        if not any(_same(meta[key], v) for v in options):
            return False
    return True


def _same(have: Any, want: Any) -> bool:
    # 1 == True in Python; a filter on a boolean matches only a boolean, as in Chroma
    return bool(have == want and isinstance(have, bool) == isinstance(want, bool))


def chroma_where(where: Mapping[str, Any]) -> dict[str, Any] | None:
    """The filter as Chroma's ``where`` (None for an empty filter)."""
    clauses: list[dict[str, Any]] = [
        {key: {"$in": list(wanted)} if isinstance(wanted, list) else wanted}
        for key, wanted in where.items()
    ]
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def chroma_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Scalar] | None:
    """Metadata as Chroma stores it: scalars kept, ``None`` dropped, anything else as JSON."""
    out: dict[str, Scalar] = {}
    for key, value in (metadata or {}).items():
        if value is None:
            continue
        if isinstance(value, str | int | float | bool):
            out[str(key)] = value
        else:
            out[str(key)] = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return out or None
