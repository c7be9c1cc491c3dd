"""The state every method shares: the common input and output schemas (the README's Python API).

Item types are TypedDicts (plain dicts at run time) so checkpoints serialise without an
allow-list; the state containers are dataclasses with ``Annotated`` reducers, as in
LangGraph's templates.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, NotRequired, TypeVar

from pydantic import Field
from typing_extensions import TypedDict  # pydantic needs it for JSON schemas on 3.11

T = TypeVar("T")

PERSISTENT = "gaprag:persistent"
"""Annotated marker for a state field that is kept across the questions of one thread; every
other field is reset when a new question starts (see :mod:`gaprag.nodes.wiring`)."""


class Evidence(TypedDict):
    """A passage (or fact, or pair) an answer was built from."""

    id: str
    title: str
    text: str
    source: str  # how it was found: "bm25" | "dense" | "hybrid" | "feedback" | "llm" ...
    score: float
    round: int
    metadata: NotRequired[
        Annotated[
            dict[str, Any],
            Field(
                description="The passage's own metadata: source (relative path or URL), page, "
                "section, and any fields of its record (url, department...); absent for "
                "passages without any and for stores built before metadata."
            ),
        ]
    ]


class Usage(TypedDict):
    """Cost of one graph run, summed over its nodes."""

    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    retrieval_calls: int
    wall_s: float
    cached_tokens: NotRequired[int]  # prompt tokens the server reused from its cache
    instruction_tokens: NotRequired[int]  # prompt tokens of fixed instructions (by characters)
    passage_tokens: NotRequired[int]  # prompt tokens of rendered passages (by characters)


USAGE_KEYS: tuple[str, ...] = (
    "llm_calls",
    "prompt_tokens",
    "completion_tokens",
    "retrieval_calls",
    "wall_s",
    "cached_tokens",
    "instruction_tokens",
    "passage_tokens",
)


class Decision(TypedDict):
    """A loop decision a model took: continue or stop, and on what it was taken."""

    node: str
    round: int
    decision: str
    p: float | None  # the probability the decision was taken on; None where none exists
    path: str  # logprobs | constrained-no-logprobs | parsed-no-logprobs | no-logprobs | model | rule | default ...
    threshold: float | None
    # the answer the method would return if it stopped here (calibration runs record it)
    answer: NotRequired[str]


M = TypeVar("M", bound=Mapping[str, Any])


def carry_metadata(item: M, origin: Mapping[str, Any]) -> M:
    """``item`` with the ``metadata`` of the passage it was made from, when it has some."""
    if origin.get("metadata"):
        item["metadata"] = dict(origin["metadata"])  # type: ignore[index]
    return item


def empty_usage() -> Usage:
    return Usage(
        llm_calls=0,
        prompt_tokens=0,
        completion_tokens=0,
        retrieval_calls=0,
        wall_s=0.0,
        cached_tokens=0,
        instruction_tokens=0,
        passage_tokens=0,
    )


def add_usage(left: Usage | None, right: Usage | None) -> Usage:
    """Reducer: usage deltas returned by nodes are summed into the run's total."""
    out = empty_usage()
    for part in (left, right):
        if not part:
            continue
        for key in USAGE_KEYS:
            out[key] = out[key] + part.get(key, 0)  # type: ignore[literal-required]
    out["wall_s"] = round(out["wall_s"], 4)
    return out


def concat(left: list[T] | None, right: list[T] | None) -> list[T]:
    """Reducer for record lists (trace records, loop decisions): append the new records."""
    return [*(left or []), *(right or [])]


def merge(left: dict[str, float] | None, right: dict[str, float] | None) -> dict[str, float]:
    """Reducer: the two mappings merged, the right one's values winning."""
    return {**(left or {}), **(right or {})}


def add_unique(left: list[str] | None, right: list[str] | None) -> list[str]:
    """Reducer for id lists: append the new ids not seen yet, keeping first-seen order."""
    out = list(left or [])
    seen = set(out)
    for item in right or []:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


class _NeedsQuestion(type):
    """A state built without its question (``graph.invoke({"q": ...})``: LangGraph keeps only
    the input's known fields) is an :class:`InputError` naming the inputs, not a
    ``TypeError``."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if not args and "question" not in kwargs:
            from gaprag.errors import InputError

            raise InputError(
                "the input has no 'question' (the inputs are 'question' and 'dataset_id')",
                hint='graph.invoke({"question": "Who wrote Hamlet?"})',
            )
        return super().__call__(*args, **kwargs)


@dataclass(kw_only=True)
class InputState(metaclass=_NeedsQuestion):
    """What a caller passes in. Studio builds its input form from this."""

    question: Annotated[str, Field(description="The question to answer.")]
    dataset_id: Annotated[
        str | None,
        Field(description="Optional id of the dataset record, kept for evaluation bookkeeping."),
    ] = None


@dataclass(kw_only=True)
class OutputState:
    """What every method returns."""

    answer: Annotated[str, Field(description="The final short answer.")] = ""
    stop_reason: Annotated[str, Field(description="Why the loop ended.")] = ""
    iterations: Annotated[int, Field(description="Retrieval rounds run.")] = 0
    queries: Annotated[
        list[str], Field(description="Every retrieval query issued, in order."), operator.add
    ] = field(default_factory=list)
    evidence: Annotated[
        list[Evidence],
        Field(
            description="What the answer was built from: passages, facts or feedback pairs, "
            "each with its metadata (source, page...) where it has some."
        ),
    ] = field(default_factory=list)
    usage: Annotated[
        Usage,
        Field(description="LLM calls, prompt/completion tokens, retrieval calls, wall time."),
        add_usage,
    ] = field(default_factory=empty_usage)
    trace: Annotated[
        list[dict[str, Any]],
        Field(description="Decision records: how each structured call was decided, and fallbacks."),
        concat,
    ] = field(default_factory=list)
    retrieved_ids: Annotated[
        list[str],
        Field(description="Every passage id any retrieval of this question returned, once each."),
        add_unique,
    ] = field(default_factory=list)
    shown_ids: Annotated[
        list[str],
        Field(description="Every passage id shown in at least one LLM prompt of this question."),
        add_unique,
    ] = field(default_factory=list)
    decisions: Annotated[
        list[Decision],
        Field(description="Each loop decision: node, round, decision, p, path, threshold."),
        concat,
    ] = field(default_factory=list)


@dataclass(kw_only=True)
class BaseState(InputState, OutputState):
    """Internal state shared by all methods; each method subclasses it."""

    asked: Annotated[
        str,
        Field(description="The question the per-question fields were last reset for."),
        PERSISTENT,
    ] = ""
    answer_p: Annotated[
        dict[str, float],
        Field(
            description="The probability of each answer the loop gave, from its own call's "
            "token logprobs (answer -> p), recorded when answer selection is on; the select step "
            "reads it."
        ),
        merge,
    ] = field(default_factory=dict)
    gate_passages: Annotated[
        list[Evidence],
        Field(
            description="Plain RAG's passages when the gate ran and the loop went on; the ranked "
            "reader reads them with what the method gathered."
        ),
    ] = field(default_factory=list)
