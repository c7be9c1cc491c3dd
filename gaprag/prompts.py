"""Prompts are data: each method keeps a ``prompts.toml`` beside its graph.

A prompt has a ``system`` part (fixed instructions) and a ``user`` part whose fixed text comes
first and whose variable parts (passages, question) come last, so llama.cpp's prompt cache can
reuse the prefix. Placeholders use ``{name}``; literal braces are written ``{{`` and ``}}``.
"""

from __future__ import annotations

import string
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Any


@dataclass(frozen=True)
class Prompt:
    name: str
    system: str
    user: str

    @property
    def variables(self) -> set[str]:
        names: set[str] = set()
        for text in (self.system, self.user):
            names.update(f for _, f, _, _ in string.Formatter().parse(text) if f)
        return names

    def render(self, **values: Any) -> list[tuple[str, str]]:
        missing = self.variables - values.keys()
        if missing:
            raise KeyError(f"prompt {self.name!r} needs {sorted(missing)}")
        out: list[tuple[str, str]] = []
        if self.system.strip():
            out.append(("system", self.system.strip().format(**values)))
        out.append(("user", self.user.strip().format(**values)))
        return out


def load_prompts(package: str, filename: str = "prompts.toml") -> dict[str, Prompt]:
    """Read ``filename`` from ``package``: one TOML table per prompt with system/user keys."""
    data = tomllib.loads((resources.files(package) / filename).read_text(encoding="utf-8"))
    return {
        name: Prompt(name=name, system=str(table.get("system", "")), user=str(table["user"]))
        for name, table in data.items()
    }
