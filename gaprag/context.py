"""Run settings: the base context schema, build-time defaults, and one place that validates.

Every method's ``Context`` is a dataclass whose fields are made with :func:`describe`, so
Studio shows a form with descriptions (and a drop-down for ``Literal`` fields).

Precedence is simple and predictable: a run-time value (``invoke(..., context={...})``) always
wins, whatever it equals; a build-time value (``build_graph(method, top_k=2)``) wins over the
class default. Settings made with ``describe(..., operator=...)`` are the operator's: a run may
give them only the operator's value or what the operator's policy allows
(:func:`resolve_context`, :mod:`gaprag.operator`). :func:`with_defaults` makes the second rule structural: it derives a context
class whose *defaults* are the build-time values, and LangGraph builds that class from the
run-time dict, so a run-time value is simply an argument to the constructor.

Validation happens once, when a context object is constructed (``__post_init__``): every
value must have its field's type (an ``int`` setting takes whole numbers only, never a float,
a bool or a string; a ``float`` setting takes an ``int`` too and holds it as a float; no
number may be NaN or infinite), ``Literal`` fields must hold one of their values, and numbers
must lie within a field's ``minimum`` and ``maximum``. Every numeric setting has a maximum;
the metadata ``filter`` is bounded in size (keys, values, lengths: :mod:`gaprag.stores.filters`).
Both bounds are kept in the field's metadata under pydantic's names (``ge``, ``le``), so the
JSON schema LangGraph builds for Studio carries them as ``minimum`` and ``maximum``.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, get_args, get_origin

from gaprag.aio import to_thread
from gaprag.errors import InputError
from gaprag.operator import OperatorKind, admit, touches_files
from gaprag.stores.filters import MetadataFilter, check_filter

C = TypeVar("C", bound="BaseContext")

#: Shared maxima of numeric settings: an LLM call's output cap, passages a step retrieves or
#: shows, the words a passage is cut to, and a probability threshold (above 1: never stops).
MAX_OUTPUT_TOKENS = 4096
MAX_PASSAGES = 50
MAX_PASSAGE_WORDS = 1000
MAX_PROBABILITY_THRESHOLD = 2.0


def method_of(cls: type[Any]) -> str:
    """The method a context class belongs to (``gaprag.graphs.<method>.context``)."""
    parts = cls.__module__.split(".")
    return str(getattr(cls, "method_name", parts[-2] if len(parts) > 1 else cls.__name__))


def check_names(cls: type[Any], names: Iterable[str], *, what: str = "setting") -> None:
    """Refuse names that are not fields of ``cls``: one line naming them (and the closest
    valid name), the valid names and the command that describes them in the hint."""
    valid = sorted(field_names(cls))
    unknown = sorted(set(names) - set(valid))
    if not unknown:
        return
    method = method_of(cls)
    close = [m for n in unknown for m in difflib.get_close_matches(n, valid, n=1)]
    guess = f" (did you mean {', '.join(close)}?)" if close else ""
    raise InputError(
        f"{method}: unknown {what}(s) {', '.join(repr(n) for n in unknown)}{guess}",
        hint=f"valid {what}s: {', '.join(valid)}; `gaprag settings {method}` describes them",
    )


def _scoring_for(choice: Any) -> str:
    """The ``answer_scoring`` the old ``select`` value implied: scored unless it was off."""
    return "off" if choice == "off" else "logprob"


#: settings renamed in 0.2 (kept, with a DeprecationWarning, until 0.3): {old name: the new
#: settings its value stands for}
RENAMED_SETTINGS: dict[str, Callable[[Any], dict[str, Any]]] = {
    "select": lambda v: {"answer_choice": v, "answer_scoring": _scoring_for(v)},
    "select_margin": lambda v: {"choice_margin": v},
}


def current_names(settings: Mapping[str, Any], *, warn: bool = True) -> dict[str, Any]:
    """``settings`` under today's names: a renamed setting's value moves to the settings it
    stands for (:data:`RENAMED_SETTINGS`; a new name given too wins), with a
    ``DeprecationWarning`` naming the new ones unless ``warn`` is False (an old run record).
    The one translation of old names: contexts, build options, profiles and ``--set``."""
    out = {k: v for k, v in settings.items() if k not in RENAMED_SETTINGS}
    for old, value in settings.items():
        if old not in RENAMED_SETTINGS:
            continue
        new = RENAMED_SETTINGS[old](value)
        if warn:
            shown = ", ".join(f"{k}={v!r}" for k, v in new.items())
            warnings.warn(
                f"setting {old!r} is deprecated and will be removed in 0.3; use {shown}",
                DeprecationWarning,
                stacklevel=3,
            )
        for name, moved in new.items():
            out.setdefault(name, moved)
    return out


def _names_of(name: str) -> tuple[str, ...]:
    """The settings ``name`` stands for today (itself unless renamed)."""
    renamed = RENAMED_SETTINGS.get(name)
    return tuple(renamed(None)) if renamed else (name,)


class _Checked(type):
    """Every context built from keywords (``context={...}``, Studio's form, ``--set``) names
    only its class's fields: an unknown one is an :class:`InputError`, not a ``TypeError``;
    a renamed one is taken under its new name (:func:`current_names`)."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if dataclasses.is_dataclass(cls):
            kwargs = current_names(kwargs)
            check_names(cls, kwargs)
        return super().__call__(*args, **kwargs)


def describe(
    default: Any,
    description: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    operator: OperatorKind | None = None,
    repeats: bool = False,
) -> Any:
    """A dataclass field whose description Studio shows in the assistant form.

    ``minimum``/``maximum``: the smallest and largest value a number may take (checked when a
    context is built; Studio's form shows both). Every numeric setting has a ``maximum``.
    ``operator``: the setting names an endpoint, a model, a path or a spend switch; it is the
    operator's, and a run may change it only as :mod:`gaprag.operator` allows.
    ``repeats``: the setting bounds how often a step runs (a loop's rounds, or one call per
    item); its maximum bounds the calls a run can make (:func:`repeat_bounds`).
    """
    metadata: dict[str, Any] = {"description": description}
    if minimum is not None:
        metadata["ge"] = minimum
    if maximum is not None:
        metadata["le"] = maximum
    if minimum is not None or maximum is not None:
        metadata["json_schema_extra"] = _bounds_schema
    if operator is not None:
        metadata["operator"] = operator
    if repeats:
        metadata["repeats"] = True
    if isinstance(default, list | dict | set):
        # Studio's form shows the default: pydantic leaves a factory's value out of the schema
        metadata["json_schema_extra"] = {"default": type(default)(default)}
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def _bounds_schema(schema: dict[str, Any]) -> None:
    """A bounded field's JSON schema with its bounds as ``minimum`` and ``maximum`` also where
    pydantic cannot apply them itself (a number-or-string union)."""
    for ours, name in (("ge", "minimum"), ("le", "maximum")):
        if ours in schema:
            schema[name] = schema.pop(ours)


def field_range(f: dataclasses.Field[Any]) -> tuple[float | None, float | None]:
    """A context field's (minimum, maximum), either None when the field has none."""
    return f.metadata.get("ge"), f.metadata.get("le")


def repeat_bounds(cls: type[Any]) -> dict[str, int]:
    """``{name: maximum}`` of the settings of ``cls`` that bound how often a step runs."""
    return {
        f.name: int(f.metadata["le"])
        for f in dataclasses.fields(cls)
        if f.metadata.get("repeats") and f.metadata.get("le") is not None
    }


def numeric_kind(annotation: Any) -> tuple[type[int] | type[float] | None, bool, bool]:
    """(``int`` or ``float`` or None, whether None is allowed, whether a string is allowed) of
    a field's annotation: ``int``, ``float``, ``float | None``, ``float | str``..."""
    args = get_args(annotation) if get_origin(annotation) in (typing.Union, types.UnionType) else ()
    members = set(args) if args else {annotation}
    kind = float if float in members else int if int in members else None
    return kind, type(None) in members, str in members


def _number(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


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
class BaseContext(metaclass=_Checked):
    """Run settings shared by all methods (Studio's configuration form)."""

    base_url: str = describe(
        "",
        "OpenAI-compatible endpoint; empty uses GAPRAG_BASE_URL or the embedded local server.",
        operator="endpoint",
    )
    model: str = describe(
        "",
        "Model name sent to the endpoint; empty uses GAPRAG_MODEL or the server's model.",
        operator="model",
    )
    store: str = describe(
        "",
        "Path of a gaprag store (`gaprag index`) or milvus://HOST:PORT/COLLECTION; empty uses "
        "GAPRAG_STORE, else the bundled demo corpus.",
        operator="path",
    )
    filter: MetadataFilter = describe(
        {},
        'Metadata filter applied to every search of the run, e.g. {"department": "hr"} or '
        '{"source": ["a.md", "b.md"]}: each key must have the value (or one of the values).',
    )
    answer_max_tokens: int = describe(
        48, "Output cap for the final answer call.", minimum=1, maximum=MAX_OUTPUT_TOKENS
    )
    max_passage_words: int = describe(
        150,
        "Passages are cut to this many words in prompts.",
        minimum=1,
        maximum=MAX_PASSAGE_WORDS,
    )
    reader: Literal["short", "paper", "ranked"] = describe(
        "short",
        "The final answer step. short: the method's own answer step, reduced to its shortest "
        "span (a rule, else one LLM call); paper: the method's own answer as its paper gives it; "
        "ranked: the shared reader ranks everything the method gathered, keeps reader_budget "
        "passages with the strongest next to the question, answers, then shortens.",
    )
    reader_ranker: Literal["retrieval", "bm25", "dense", "llm"] = describe(
        "bm25",
        "How the ranked reader orders the gathered passages: retrieval (the order they were "
        "found), bm25 or dense (MiniLM) against the question and the method's own text, llm "
        "(the model's P(relevant), one call per passage).",
    )
    reader_budget: int = describe(
        5,
        "Passages the ranked reader shows (plain RAG's top_k by default).",
        minimum=1,
        maximum=MAX_PASSAGES,
    )
    gate: Literal["off", "logprob_mean", "logprob_margin", "logprob_min", "agreement"] = describe(
        "off",
        "First answer as plain RAG does and stop there when that answer is confident: "
        "off (always run the loop); logprob_mean, logprob_min (the answer's mean or lowest "
        "token logprob), logprob_margin (its first token's top-1 minus top-2 logprob); "
        "agreement (the answers from the top 3 and from all passages agree; one more call). "
        "An endpoint without logprobs falls back to agreement.",
    )
    gate_threshold: float = describe(
        -0.5,
        "The gate stops when its signal is at least this: a token logprob (<= 0) for "
        "logprob_mean and logprob_min, a logprob margin (>= 0) for logprob_margin; agreement "
        "stops when the two answers agree.",
        minimum=-100,
        maximum=100,
    )
    answer_scoring: Literal["off", "logprob"] = describe(
        "off",
        "Score the final answer: logprob requests the token logprobs of the call whose text "
        "becomes the answer (the same request) and records the answer's probability in "
        "answer_p; off requests none. answer_choice=logprob needs it.",
    )
    answer_choice: Literal["off", "logprob", "agreement"] = describe(
        "off",
        "Where the gate let the loop run, choose the answer between plain RAG's and the "
        "loop's: off (the loop's, as without a choice); logprob (plain RAG's when its "
        "probability exceeds the loop answer's by at least choice_margin); agreement (the "
        "loop's, recording whether the two agree). logprob without both probabilities "
        "(answer_scoring off, an endpoint without logprobs) falls back to agreement.",
    )
    choice_margin: float = describe(
        0.0,
        "answer_choice=logprob takes plain RAG's answer when its probability minus the loop "
        "answer's is at least this.",
        minimum=-1,
        maximum=1,
    )
    short_answer: bool = describe(
        True,
        "End with the shared short-answer step (the answer reduced to its shortest span: a "
        "rule, else one LLM call); false, or reader=paper, keeps the answer as it is.",
    )
    no_logprobs: Literal["retrieve_more", "trust_answer"] = describe(
        "retrieve_more",
        "A loop decision the endpoint gives no probability for (no logprobs): retrieve_more "
        "goes on retrieving up to the loop's bound; trust_answer stops when the model's "
        "constrained answer says so, as the papers do.",
    )
    calibration: bool = describe(
        False,
        "Calibration run (`gaprag calibrate`): model decisions are recorded but never stop a "
        "loop before its bound, and each records the answer the method would give there.",
        operator="switch",
    )

    def __post_init__(self) -> None:
        self.filter = check_filter(self.filter)
        hints = typing.get_type_hints(type(self))
        method = method_of(type(self))
        for f in dataclasses.fields(self):
            annotation = hints.get(f.name)
            value = getattr(self, f.name)
            allowed = _literal_values(annotation)
            if allowed is not None:
                if value not in allowed or type(value) not in {type(v) for v in allowed}:
                    raise InputError(
                        f"{method}: {f.name}={_shown(value)} is not valid",
                        hint="use one of: " + ", ".join(repr(v) for v in allowed),
                    )
                continue
            value = _typed(method, f.name, annotation, value)
            setattr(self, f.name, value)
            minimum, maximum = field_range(f)
            if not isinstance(value, int | float) or isinstance(value, bool):
                continue
            if minimum is not None and value < minimum:
                raise InputError(
                    f"{method}: {f.name} must be at least {_number(minimum)} (got {value!r})",
                    hint=f"set {f.name}={_number(minimum)} or more",
                )
            if maximum is not None and value > maximum:
                raise InputError(
                    f"{method}: {f.name} must be at most {_number(maximum)} (got {value!r})",
                    hint=f"set {f.name}={_number(maximum)} or less",
                )


def _shown(value: Any) -> str:
    """A value as an error line shows it: its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_TYPE_NAMES = {int: "a whole number", float: "a number", bool: "true or false", str: "text"}


def _typed(method: str, name: str, annotation: Any, value: Any) -> Any:
    """``value`` as a field of type ``annotation`` holds it (an int for a float field becomes a
    float); an InputError when it has another type or is not a finite number."""
    kind, optional, text = numeric_kind(annotation)
    if value is None and optional:
        return None
    if kind is None:
        expected = annotation if annotation in _TYPE_NAMES else None
        if expected is not None and not (
            isinstance(value, expected) and (expected is bool or not isinstance(value, bool))
        ):
            raise InputError(
                f"{method}: {name}={_shown(value)} is not {_TYPE_NAMES[expected]}",
                hint=f"give {name} as {_TYPE_NAMES[expected]}",
            )
        return value
    if isinstance(value, str) and text:
        return value
    accepted = (int,) if kind is int else (int, float)
    if isinstance(value, bool) or not isinstance(value, accepted):
        what = "a whole number" if kind is int else "a number"
        raise InputError(
            f"{method}: {name}={_shown(value)} is not {what}",
            hint=f"give {name} as {what}",
        )
    if kind is float:
        value = float(value)
        if not math.isfinite(value):
            raise InputError(
                f"{method}: {name}={value!r} is not a finite number",
                hint=f"give {name} as a number",
            )
    return value


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
    sources = {new: src for old, src in (sources or {}).items() for new in _names_of(old)}
    overrides = current_names(overrides)
    check_names(cls, overrides, what="option")
    cls(**overrides)  # validate the build-time values once, with a clear message
    if not overrides:
        return cls
    hints = typing.get_type_hints(cls)
    fields: list[tuple[str, Any, Any]] = []
    for name, value in overrides.items():
        original = next(f for f in dataclasses.fields(cls) if f.name == name)
        metadata = dict(original.metadata)
        if sources.get(name, "explicit") != "explicit":
            metadata["description"] = f"{metadata.get('description', '')} [from {sources[name]}]"
        if isinstance(value, list | dict | set):
            metadata["json_schema_extra"] = {"default": type(value)(value)}
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


def explicit_value(ctx: BaseContext, name: str) -> Any:
    """The value of setting ``name`` when the user set it (at build or run time), else None
    (the method's default, or a model profile's value)."""
    if not hasattr(ctx, name):
        return None
    value = getattr(ctx, name)
    cls = type(ctx)
    if setting_sources(cls).get(name) == "explicit":
        return value
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    return value if value != default else None


def resolve_context(cls: type[C], value: Any) -> C:
    """The run's settings as ``cls``: from an instance, a dict (an unknown name is refused),
    None (the defaults), or a parent graph's context object when the graph runs as a subgraph
    (fields matched by name, the parent's other fields ignored), admitted by the operator's
    policy (:func:`gaprag.operator.admit`: the one place a run's settings are checked against
    what the operator allows)."""
    return admit(_context(cls, value))


async def aresolve_context(cls: type[C], value: Any) -> C:
    """:func:`resolve_context` for nodes and routers: a run-time path is resolved (symbolic
    links read) in a worker thread, never on the event loop of an async run."""
    ctx = _context(cls, value)
    return await to_thread(admit, ctx) if touches_files(ctx) else admit(ctx)


def _context(cls: type[C], value: Any) -> C:
    if isinstance(value, cls):
        return value
    if value is None:
        return cls()
    if isinstance(value, dict):
        return cls(**value)
    return cls(**{k: getattr(value, k) for k in field_names(cls) if hasattr(value, k)})


#: ``pick(answers, probs, choice)``: the index of the round whose answer a run no decision
#: stopped gives, under value ``choice`` of the method's round-choice switch
AnswerPicker = Callable[..., int]


@dataclass(frozen=True)
class Calibration:
    """What ``gaprag calibrate`` needs from a method with a loop decision taken by a model:
    declared as ``CALIBRATION`` in the method's context module.

    ``setting``: the threshold setting; ``nodes``: the decision nodes it governs;
    ``after_last``: LLM-call segments after the last decision (0 when the last decision ends
    the run, 1 when an answer step still follows); ``switch``/``choices``/``pick``: the setting
    that picks the answer of a run no decision stopped, its values (the default first) and
    the function that replays it.
    """

    setting: str
    nodes: tuple[str, ...]
    after_last: int = 1
    switch: str = ""
    choices: tuple[str, ...] = ()
    pick: AnswerPicker | None = None
