"""Prompts are data: each method keeps a ``prompts.toml`` beside its graph.

A prompt has a ``system`` part (fixed instructions), optional few-shot ``examples`` (an array of
``{user = "...", assistant = "..."}`` tables, sent as user/assistant turns, never inside the
system text), and a ``user`` part whose fixed text comes first and whose variable parts
(passages, question) come last, so llama.cpp's prompt cache can reuse the prefix. Placeholders use ``{name}``; literal braces are written ``{{`` and ``}}``.

Rendering is where "shown" is decided: a value that is :class:`Passages` (made by the one
passage renderer, :func:`gaprag.nodes.render.render_passages`) carries the ids of the
passages in it, and :meth:`Prompt.render` records those ids as shown to the model. The
rendered prompt also carries how many of its characters are fixed instructions and how many
are passages, so the LLM layer can split a call's prompt tokens by part.
"""

from __future__ import annotations

import string
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from gaprag.accounting import record_shown


class Passages(str):
    """Rendered passages: the text, plus the ids of the passages it shows."""

    ids: tuple[str, ...]

    def __new__(cls, text: str, ids: Sequence[str] = ()) -> Passages:
        obj = super().__new__(cls, text)
        obj.ids = tuple(ids)
        return obj


class RenderedPrompt(list[tuple[str, str]]):
    """Chat messages as (role, text), with ``parts`` = characters of (instructions, passages,
    total) for token accounting."""

    parts: tuple[int, int, int] = (0, 0, 0)


def prompt_parts(messages: Any) -> tuple[int, int, int] | None:
    return messages.parts if isinstance(messages, RenderedPrompt) else None


def follow_up(
    rendered: RenderedPrompt, reply: str, ask: RenderedPrompt, *, reply_fixed_chars: int = 0
) -> RenderedPrompt:
    """A follow-up turn: ``rendered``, then ``reply`` as the assistant's turn, then the messages
    of ``ask``. In the token split, ``ask``'s parts add to ``rendered``'s; ``reply`` counts as
    other variable text, except ``reply_fixed_chars`` of its characters that come from a fixed
    template, which count as instructions."""
    out = RenderedPrompt([*rendered, ("assistant", reply), *ask])
    instructions, passages, total = rendered.parts
    out.parts = (
        instructions + reply_fixed_chars + ask.parts[0],
        passages + ask.parts[1],
        total + len(reply) + ask.parts[2],
    )
    return out


def _fields(template: str) -> list[str]:
    return [f for _, f, _, _ in string.Formatter().parse(template) if f]


@dataclass(frozen=True)
class Prompt:
    name: str
    system: str
    user: str
    examples: tuple[tuple[str, str], ...] = ()  # few-shot (user, assistant) turns, fixed text

    @property
    def variables(self) -> set[str]:
        names: set[str] = set()
        for text in (self.system, self.user):
            names.update(_fields(text))
        return names

    def render(self, **values: Any) -> RenderedPrompt:
        missing = self.variables - values.keys()
        if missing:
            raise KeyError(f"prompt {self.name!r} needs {sorted(missing)}")
        out = RenderedPrompt()
        variable_chars = passage_chars = 0
        for template in (self.system.strip(), self.user.strip()):
            for name in _fields(template):
                value = values[name]
                variable_chars += len(str(value))
                if isinstance(value, Passages):
                    passage_chars += len(value)
                    record_shown(value.ids)
        if self.system.strip():
            out.append(("system", self.system.strip().format(**values)))
        for user, assistant in self.examples:
            out.append(("user", user.strip()))
            out.append(("assistant", assistant.strip()))
        out.append(("user", self.user.strip().format(**values)))
        total = sum(len(text) for _, text in out)
        out.parts = (max(0, total - variable_chars), passage_chars, total)
        return out


def load_prompts(package: str, filename: str = "prompts.toml") -> dict[str, Prompt]:
    """Read ``filename`` from ``package``: one TOML table per prompt with system/user keys and
    optional ``examples`` (few-shot turns)."""
    data = tomllib.loads((resources.files(package) / filename).read_text(encoding="utf-8"))
    return {
        name: Prompt(
            name=name,
            system=str(table.get("system", "")),
            user=str(table["user"]),
            examples=tuple(
                (str(ex["user"]), str(ex["assistant"])) for ex in table.get("examples", [])
            ),
        )
        for name, table in data.items()
        if isinstance(table, dict) and "user" in table
    }
