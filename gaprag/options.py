"""``--set key=value`` parsing, typed by a method's context schema."""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Iterable
from typing import Any

from gaprag.config import parse_flag
from gaprag.context import current_names
from gaprag.errors import InputError


def coerce(cls: type[Any], key: str, raw: str) -> Any:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if key not in fields:
        method = cls.__module__.split(".")[-2] if cls.__module__.count(".") > 1 else "METHOD"
        raise InputError(
            f"unknown option {key!r}",
            hint="valid options: " + ", ".join(sorted(fields)) + f"; `gaprag settings {method}` "
            "describes them",
        )
    hint = typing.get_type_hints(cls).get(key, str)
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if len(args) == 1 and type(None) in typing.get_args(hint):  # Optional[X]
        if raw.strip().lower() in ("none", "null", ""):
            return None
        hint = args[0]
    try:
        if hint is bool:
            value = parse_flag(raw)
            if value is None:
                raise ValueError(raw)
            return value
        if hint is int:
            return int(raw)
        if hint is float:
            return float(raw)
        if typing.get_origin(hint) is dict:  # a mapping (the metadata filter): JSON
            value = json.loads(raw)
            if not isinstance(value, dict):
                raise ValueError(raw)
            return value
    except ValueError:
        raise InputError(
            f"option {key}={raw!r} is not a valid {getattr(hint, '__name__', hint)}",
            hint='a mapping is JSON, e.g. filter={"department": "hr"}'
            if typing.get_origin(hint) is dict
            else "fix the value",
        ) from None
    return raw


def parse_filter(pairs: Iterable[str]) -> dict[str, Any]:
    """``["department=hr", "page=3"]`` -> ``{"department": "hr", "page": 3}`` (a value that
    reads as a JSON number or boolean is one; a key given twice matches any of its values)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise InputError(
                f"--filter expects KEY=VALUE, got {pair!r}", hint="e.g. --filter department=hr"
            )
        try:
            value: Any = json.loads(raw)
            if not isinstance(value, int | float | bool):
                value = raw
        except ValueError:
            value = raw
        key = key.strip()
        if key in out:
            before = out[key] if isinstance(out[key], list) else [out[key]]
            out[key] = [*before, value]
        else:
            out[key] = value
    return out


def parse_sets(pairs: Iterable[str], method: str | None = None) -> dict[str, dict[str, str]]:
    """``["migres.max_iterations=3", "top_k=4"]`` -> ``{"migres": {...}, "*": {...}}``."""
    out: dict[str, dict[str, str]] = {}
    for pair in pairs:
        if "=" not in pair:
            raise InputError(
                f"--set expects key=value, got {pair!r}", hint="e.g. --set migres.max_iterations=3"
            )
        key, value = pair.split("=", 1)
        scope, _, name = key.strip().rpartition(".")
        out.setdefault(scope or method or "*", {})[name] = value
    return out


def options_for(method: str, sets: dict[str, dict[str, str]]) -> dict[str, Any]:
    from gaprag.graphs import context_class

    cls = context_class(method)
    names = {f.name for f in dataclasses.fields(cls)}
    merged: dict[str, Any] = {}
    for key, raw in current_names(sets.get("*", {})).items():
        if key in names:  # global options apply where the method has them
            merged[key] = coerce(cls, key, raw)
    for key, raw in current_names(sets.get(method, {})).items():
        # ``profile`` names the build's profile (e.g. a variant ``NAME=METHOD:profile=paper``)
        merged[key] = raw if key == "profile" else coerce(cls, key, raw)
    return merged
