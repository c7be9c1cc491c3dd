"""Run settings: the base context schema, build-time defaults, and one place that validates.

Every method's ``Context`` is a dataclass whose fields are made with :func:`describe`, so
Studio shows a form with descriptions (and a drop-down for ``Literal`` fields).

Precedence is simple and predictable: a run-time value (``invoke(..., context={...})``) always
wins, whatever it equals; a build-time value (``build_graph(method, top_k=2)``) wins over the
class default. :func:`with_defaults` makes the second rule structural: it derives a context
class whose *defaults* are the build-time values, and LangGraph builds that class from the
run-time dict, so a run-time value is simply an argument to the constructor.

Validation happens once, when a context object is constructed (``__post_init__``): ``Literal``
fields must hold one of their values, and numbers must respect a field's ``minimum``.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, get_args, get_origin

from gaprag.errors import InputError

C = TypeVar("C", bound="BaseContext")


def describe(default: Any, description: str, *, minimum: float | None = None) -> Any:
    """A dataclass field whose description Studio shows in the assistant form.

    ``minimum``: the smallest value a number may take (checked when a context is built).
    """
    metadata: dict[str, Any] = {"description": description}
    if minimum is not None:
        metadata["minimum"] = minimum
    if isinstance(default, list | dict | set):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def _literal_values(annotation: Any) -> tuple[Any, ...] | None:
    """The allowed values of a ``Literal`` (or ``Literal | None``) annotation, else None."""
    if get_origin(annotation) is Literal:
        return get_args(annotation)
    values: list[Any] = []
    for arg in get_args(annotation):
        if get_origin(arg) is Literal:
            values.extend(get_args(arg))
        elif arg is type(None):
            values.append(None)
        else:
            return None
    return tuple(values) or None


@dataclass(kw_only=True)
class BaseContext:
    """Run settings shared by all methods (Studio's configuration form)."""

    base_url: str = describe(
        "", "OpenAI-compatible endpoint; empty uses GAPRAG_BASE_URL or the embedded local server."
    )
    model: str = describe(
        "", "Model name sent to the endpoint; empty uses GAPRAG_MODEL or the server's model."
    )
    store: str = describe(
        "", "Path of a gaprag store (`gaprag index`); empty uses the bundled demo corpus."
    )
    answer_max_tokens: int = describe(48, "Output cap for the final answer call.", minimum=1)
    max_passage_words: int = describe(
        150, "Passages are cut to this many words in prompts.", minimum=1
    )
    answer_style: Literal["short", "paper"] = describe(
        "short",
        "short: the final answer is reduced to its shortest span (a rule, else one LLM call); "
        "paper: the method's own answer, for exact reproductions of a paper.",
    )
    calibration: bool = describe(
        False,
        "Calibration run (`gaprag calibrate`): model decisions are recorded but never stop a "
        "loop before its bound, and each records the answer the method would give there.",
    )

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        method = getattr(type(self), "method_name", type(self).__module__.split(".")[-2])
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            allowed = _literal_values(hints.get(f.name))
            if allowed is not None and value not in allowed:
                raise InputError(
                    f"{method}: {f.name}={value!r} is not valid",
                    hint="use one of: " + ", ".join(repr(v) for v in allowed),
                )
            minimum = f.metadata.get("minimum")
            if (
                minimum is not None
                and isinstance(value, int | float)
                and not isinstance(value, bool)
                and value < minimum
            ):
                raise InputError(
                    f"{method}: {f.name} must be at least {minimum:g} (got {value!r})",
                    hint=f"set {f.name}={minimum:g} or more",
                )


def _copier(value: Any) -> Callable[[], Any]:
    return lambda: type(value)(value)


def field_names(cls: type[BaseContext]) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def with_defaults(
    cls: type[C], overrides: dict[str, Any], *, sources: dict[str, str] | None = None
) -> type[C]:
    """``cls`` with ``overrides`` as its defaults (build-time settings), validated now.

    ``sources``: where each override came from (``explicit``, ``profile <model>``); it is kept
    on the class (:func:`setting_sources`) and shown in each field's description (Studio)."""
    unknown = set(overrides) - field_names(cls)
    if unknown:
        raise InputError(
            f"unknown option(s) for this method: {', '.join(sorted(unknown))}",
            hint="valid options: " + ", ".join(sorted(field_names(cls))),
        )
    cls(**overrides)  # validate the build-time values once, with a clear message
    if not overrides:
        return cls
    hints = typing.get_type_hints(cls)
    sources = sources or {}
    fields: list[tuple[str, Any, Any]] = []
    for name, value in overrides.items():
        original = next(f for f in dataclasses.fields(cls) if f.name == name)
        metadata = dict(original.metadata)
        if sources.get(name, "explicit") != "explicit":
            metadata["description"] = f"{metadata.get('description', '')} [from {sources[name]}]"
        if isinstance(value, list | dict | set):
            spec = field(default_factory=_copier(value), metadata=metadata)
        else:
            spec = field(default=value, metadata=metadata)
        fields.append((name, hints[name], spec))
    derived = dataclasses.make_dataclass(
        cls.__name__, fields, bases=(cls,), kw_only=True, namespace={"__doc__": cls.__doc__}
    )
    derived.__module__ = cls.__module__
    derived.__qualname__ = cls.__qualname__
    derived.__setting_sources__ = {  # type: ignore[attr-defined]
        **setting_sources(cls),
        **{k: sources.get(k, "explicit") for k in overrides},
    }
    return derived


def setting_sources(cls: type[Any] | None) -> dict[str, str]:
    """Where each non-default setting of a (derived) context class came from."""
    return dict(getattr(cls, "__setting_sources__", {}))


def effective_settings(cls: type[Any] | None) -> dict[str, dict[str, Any]]:
    """Every setting a context class runs with: ``{name: {value, source}}``, where source is
    ``default`` (the method's, i.e. the paper's), ``profile <model>`` or ``explicit``."""
    if cls is None or not issubclass(cls, BaseContext):
        return {}
    ctx = cls()
    sources = setting_sources(cls)
    return {
        f.name: {"value": getattr(ctx, f.name), "source": sources.get(f.name, "default")}
        for f in dataclasses.fields(ctx)
    }


def resolve_context(cls: type[C], value: Any) -> C:
    """The run's settings as ``cls``: from an instance, a dict, None (the defaults), or a
    parent graph's context object when the graph runs as a subgraph (fields matched by name,
    unknown ones ignored)."""
    if isinstance(value, cls):
        return value
    if value is None:
        return cls()
    names = field_names(cls)
    if isinstance(value, dict):
        return cls(**{k: v for k, v in value.items() if k in names})
    return cls(**{k: getattr(value, k) for k in names if hasattr(value, k)})


#: ``pick(answers, probs, choice)``: the index of the round whose answer a run no decision
#: stopped gives, under value ``choice`` of the method's answer-choice switch
AnswerPicker = Callable[..., int]
#: ``rescore(rows, run_dirs, weights)``: the rows with the method's decisions re-scored by
#: other trained weights (from the run's traces), and a note of what was done
Rescorer = Callable[..., tuple[list[dict[str, Any]], dict[str, Any]]]


@dataclass(frozen=True)
class Calibration:
    """What ``gaprag calibrate`` needs from a method with a loop decision taken by a model:
    declared as ``CALIBRATION`` in the method's context module.

    ``setting``: the threshold setting; ``nodes``: the decision nodes it governs;
    ``after_last``: LLM-call segments after the last decision (0 when the last decision ends
    the run, 1 when an answer step still follows); ``switch``/``choices``/``pick``: the setting
    that picks the answer of a run no decision stopped, its values (the default first) and
    the function that replays it; ``rescore``: re-scores recorded decisions with other
    trained weights (``--rf-weights``).
    """

    setting: str
    nodes: tuple[str, ...]
    after_last: int = 1
    switch: str = ""
    choices: tuple[str, ...] = ()
    pick: AnswerPicker | None = None
    rescore: Rescorer | None = None
