"""What a run evaluates: its method keys (methods and named variants), each key's options
(``--set``, ``--variant``, the Python ``options``), and the settings each runs with."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from gaprag.errors import InputError

_VARIANT = re.compile(r"^([A-Za-z][A-Za-z0-9_-]*)=([A-Za-z_][A-Za-z0-9_]*)(?::(.*))?$")
_SECRET = re.compile(r"(api_?key|token|secret|password)$", re.IGNORECASE)

VariantSpecs = Sequence[str] | Mapping[str, tuple[str, Mapping[str, Any]]]


def parse_variant(spec: str) -> tuple[str, str, dict[str, str]]:
    """``"ik_hybrid=iterkey:top_k=5,retrieval_mode=hybrid"`` -> (name, method, raw settings).

    No shell quoting needed: names are letters, digits, ``_`` and ``-``; settings are
    comma-separated ``key=value`` pairs (a value cannot contain a comma).
    """
    match = _VARIANT.match(spec.strip())
    if not match:
        raise InputError(
            f"--variant expects NAME=METHOD:KEY=VALUE,KEY=VALUE, got {spec!r}",
            hint="e.g. --variant iterkey_hybrid=iterkey:top_k=5,retrieval_mode=hybrid",
        )
    name, method, rest = match.groups()
    settings: dict[str, str] = {}
    for pair in (rest or "").split(","):
        if not pair.strip():
            continue
        if "=" not in pair:
            raise InputError(
                f"--variant {name}: expected key=value, got {pair!r}",
                hint="e.g. --variant iterkey_hybrid=iterkey:top_k=5,retrieval_mode=hybrid",
            )
        key, value = pair.split("=", 1)
        settings[key.strip()] = value.strip()
    return name, method, settings


def plan_methods(
    names: Sequence[str],
    variants: VariantSpecs | None,
    sets: Sequence[str],
    options: Mapping[str, Mapping[str, Any]] | None,
) -> tuple[list[str], dict[str, str], dict[str, dict[str, Any]]]:
    """The run's method keys (methods and named variants), each key's method, and its options.

    Options, later ones winning: ``--set KEY=VALUE`` (every key whose method has the option),
    a variant's own settings, ``--set NAME.KEY=VALUE`` for that method or variant name, and
    the Python ``options`` mapping.
    """
    from gaprag.graphs import METHODS, context_class
    from gaprag.options import options_for, parse_sets

    base: dict[str, str] = {}
    raw: dict[str, dict[str, str]] = {}
    typed: dict[str, dict[str, Any]] = {}
    if isinstance(variants, Mapping):
        for name, (method, values) in variants.items():
            base[name], typed[name] = method, dict(values)
    else:
        for spec in variants or ():
            name, method, values = parse_variant(spec)
            if name in base:
                raise InputError(f"variant {name!r} is defined twice", hint="give each one name")
            base[name], raw[name] = method, values
    for name, method in base.items():
        if name in METHODS:
            raise InputError(
                f"variant name {name!r} is a method's name",
                hint=f"name the variant differently, e.g. {name}_v2",
            )
        if method not in METHODS:
            raise InputError(
                f"variant {name!r}: unknown method {method!r}",
                hint="choose from: " + ", ".join(METHODS),
            )
    keys = list(dict.fromkeys([*names, *base]))
    for key in keys:
        if key not in METHODS and key not in base:
            raise InputError(
                f"unknown method {key!r}",
                hint="choose from: " + ", ".join(METHODS) + " (or define it with --variant)",
            )
        base.setdefault(key, key)
    parsed = parse_sets(sets)
    for scope in parsed:
        if scope != "*" and scope not in base:
            raise InputError(
                f"--set names an unknown method {scope!r}",
                hint="use METHOD.option=value with one of: " + ", ".join(base),
            )
    for key in parsed.get("*", {}):
        if not any(
            key in {f.name for f in dataclasses.fields(context_class(m))} for m in base.values()
        ):
            raise InputError(
                f"no method in this run has an option {key!r}",
                hint="check the spelling; `gaprag settings METHOD` lists a method's options",
            )
    result: dict[str, dict[str, Any]] = {}
    for key in keys:
        method = base[key]
        # a variant's own settings, then --set NAME.KEY=VALUE for it (not its method's --set)
        scoped = {**raw.get(key, {}), **parsed.get(key, {})}
        merged = options_for(method, {"*": parsed.get("*", {}), method: scoped})
        merged.update(typed.get(key, {}))
        merged.update((options or {}).get(key, {}))
        result[key] = merged
    return keys, {k: base[k] for k in keys}, result


def public_settings(values: Mapping[str, Any]) -> dict[str, Any]:
    """Settings as run.json keeps them: JSON-safe, secrets (``api_key``, ``token``...) left out."""
    safe = {k: v for k, v in values.items() if not _SECRET.search(k)}
    return json.loads(json.dumps(safe, default=str))  # type: ignore[no-any-return]


def resolved_settings(method: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """Every setting a method runs with (its context: defaults plus ``options``), JSON-safe.

    Fields that look like secrets (``api_key``, ``token``, ...) are left out.
    """
    from gaprag.graphs import context_class

    try:
        ctx = context_class(method)(**options)
        values = {f.name: getattr(ctx, f.name) for f in dataclasses.fields(ctx)}
    except Exception:  # an old run's options may no longer fit the current schema
        values = dict(options)
    return public_settings(values)


def context_of(graph: Any) -> Any:
    return getattr(getattr(graph, "builder", None), "context_schema", None)


def graph_settings(graph: Any, method: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """Every setting a built graph runs with (defaults, profile and explicit), JSON-safe."""
    from gaprag.context import effective_settings

    found = effective_settings(context_of(graph))
    if not found:  # not a gaprag graph: its method's defaults and the options
        return resolved_settings(method, options)
    values = {k: v["value"] for k, v in found.items()}
    return public_settings(values)


def profile_info(
    llm: Any, keys: Sequence[str], bases: Mapping[str, str], opts: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The model profile the run's graphs use: model, source, and per method key the profile
    settings that apply (explicit options and, in calibration runs, the calibrated threshold,
    which such a run does not use, left out)."""
    from gaprag.graphs import calibration
    from gaprag.profiles import model_in_use, profile_for, resolve

    profile = profile_for(model_in_use(llm))
    if profile is None:
        return None
    settings: dict[str, Any] = {}
    for k in keys:
        chosen = resolve(opts[k]["profile"], llm) if "profile" in opts[k] else profile
        if chosen is None or chosen is not profile:  # a key with its own profile (e.g. paper)
            continue
        mine = profile.settings(bases[k])
        declared = calibration(bases[k]) if opts[k].get("calibration") else None
        if declared is not None:
            mine.pop(declared.setting, None)
        mine = {name: v for name, v in mine.items() if name not in opts[k]}
        if mine:
            settings[k] = mine
    return {"model": profile.model, "source": profile.source, "settings": settings}
