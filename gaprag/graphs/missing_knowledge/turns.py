"""Chat turns around missing_knowledge's prompts.

- The worked example of an answer prompt is a ``[[NAME.examples]]`` table in ``prompts.toml``,
  which :class:`gaprag.prompts.Prompt` sends as a user/assistant turn pair between the
  instructions and the real question (inside the instructions, a small model took it for
  context and answered with it).
- The judge's loop decision is a follow-up turn: the judge's analysis (its ``thought``, without
  its verdict) as the assistant's turn, then a forced Yes/No question.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Sequence
from importlib import resources

from gaprag.prompts import Prompt, RenderedPrompt

EXTRA_KEYS = ("assistant",)


def load_turns(package: str, filename: str = "prompts.toml") -> dict[str, dict[str, str]]:
    """The follow-up ``assistant`` template of each prompt table that has one."""
    data = tomllib.loads((resources.files(package) / filename).read_text(encoding="utf-8"))
    out: dict[str, dict[str, str]] = {}
    for name, table in data.items():
        if isinstance(table, dict):
            extra = {k: str(table[k]).strip() for k in EXTRA_KEYS if k in table}
            if extra:
                out[name] = extra
    return out


def with_turns(
    rendered: RenderedPrompt, turns: Sequence[tuple[str, str]], *, at: int, fixed_chars: int
) -> RenderedPrompt:
    """``rendered`` with ``turns`` inserted before message ``at``; ``fixed_chars`` of the new
    text count as instructions in the token split (the rest as other variable text)."""
    out = RenderedPrompt([*rendered[:at], *turns, *rendered[at:]])
    instructions, passages, total = rendered.parts
    out.parts = (instructions + fixed_chars, passages, total + sum(len(t) for _, t in turns))
    return out


def with_follow_up(
    rendered: RenderedPrompt, question: Prompt, turns: dict[str, str], *, thought: str
) -> RenderedPrompt:
    """The judge prompt, the judge's analysis as the assistant's turn (``assistant`` template,
    ``{thought}`` as a JSON string), then ``question`` as the next user turn."""
    value = json.dumps(thought, ensure_ascii=False)
    reply = turns["assistant"].format(thought=value)
    ask = question.render()[-1][1]
    fixed = len(reply) - len(value) + len(ask)
    return with_turns(
        rendered, [("assistant", reply), ("user", ask)], at=len(rendered), fixed_chars=fixed
    )


__all__ = ["load_turns", "with_follow_up", "with_turns"]
