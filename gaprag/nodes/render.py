"""The one passage renderer: evidence into prompt text, in the format the prompt file gives.

A method's ``prompts.toml`` names its passage formats as ``[formats.NAME]`` tables::

    [formats.passages]
    item = "[{n}] {title}: {text}"    # fields: n (1-based), i (0-based), id, title, text, and
    untitled = "[{n}] {text}"         # any other key of the item; used when the title is empty
    separator = "\\n"
    empty = "(no passages)"

The result is :class:`gaprag.prompts.Passages`: the text plus the ids of what it shows, so
the prompt that includes it records those passages as shown. An item may carry
``source_ids`` (a sentence or fact cut from passages): it counts for those passages.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal

from gaprag.prompts import Passages

_CJK = re.compile(r"[\u3400-\u9fff]")


def truncate_words(text: str, max_words: int) -> str:
    words = text.split()
    return text if len(words) <= max_words else " ".join(words[:max_words]) + " ..."


def cut_text(text: str, max_words: int, how: Literal["words", "words_cjk"] = "words") -> str:
    """Cut to ``max_words`` words; with ``words_cjk``, Chinese text by characters (~2/word)."""
    if how == "words_cjk" and _CJK.search(text):
        limit = max_words * 2
        return text if len(text) <= limit else text[:limit] + "…"
    return truncate_words(text, max_words)


@dataclass(frozen=True)
class PassageFormat:
    item: str = "[{n}] {title}: {text}"
    untitled: str | None = "[{n}] {text}"
    separator: str = "\n"
    empty: str = "(no passages)"
    header: str = ""
    footer: str = ""
    start: int = 1
    cut: Literal["words", "words_cjk"] = "words"

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> PassageFormat:
        known = set(cls.__dataclass_fields__)
        unknown = set(table) - known
        if unknown:
            raise ValueError(f"unknown passage-format keys: {sorted(unknown)}")
        return cls(**dict(table))


DEFAULT_FORMAT = PassageFormat()


def load_formats(package: str, filename: str = "prompts.toml") -> dict[str, PassageFormat]:
    """The ``[formats.NAME]`` tables of a method's prompt file."""
    data = tomllib.loads((resources.files(package) / filename).read_text(encoding="utf-8"))
    return {name: PassageFormat.from_table(t) for name, t in data.get("formats", {}).items()}


def _ids(item: Mapping[str, Any]) -> list[str]:
    sources = item.get("source_ids")
    if sources:
        return [str(s) for s in sources]
    return [str(item["id"])] if item.get("id") else []


def render_passages(
    items: Sequence[Mapping[str, Any]],
    fmt: PassageFormat = DEFAULT_FORMAT,
    *,
    max_words: int = 150,
) -> Passages:
    """Items (passages, facts, pairs) as prompt text, with the ids they show."""
    if not items:
        return Passages(fmt.empty)
    lines: list[str] = []
    ids: list[str] = []
    for i, item in enumerate(items):
        values = {**item, "i": i + fmt.start - 1, "n": i + fmt.start}
        values["title"] = item.get("title") or ""
        values["text"] = cut_text(str(item.get("text", "")), max_words, fmt.cut)
        template = fmt.item if values["title"] or fmt.untitled is None else fmt.untitled
        lines.append(template.format(**values))
        ids.extend(_ids(item))
    return Passages(fmt.header + fmt.separator.join(lines) + fmt.footer, ids)


def join_passages(parts: Sequence[Passages], separator: str = "\n") -> Passages:
    """Several rendered sections as one value, keeping every section's ids."""
    kept = [p for p in parts if p]
    return Passages(separator.join(kept), [i for p in kept for i in p.ids])
