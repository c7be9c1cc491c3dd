"""Chat turns around missing_knowledge's prompts.

- The worked example of an answer prompt (``example_user`` / ``example_assistant`` in
  ``prompts.toml``) is sent as a user/assistant turn pair between the instructions and the real
  question, not inside the instructions, where a small model took it for context and answered
  with it.
- The judge's loop decision is a follow-up turn: the judge's analysis (its ``thought``, without
  its verdict) as the assistant's turn, then a forced Yes/No question.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Sequence
from importlib import resources

from gaprag.prompts import Prompt, RenderedPrompt

EXTRA_KEYS = ("example_user", "example_assistant", "assistant")


def load_turns(package: str, filename: str = "prompts.toml") -> dict[str, dict[str, str]]:
    """The turn texts of each prompt table (``example_user``, ``example_assistant``,
    ``assistant``); :func:`gaprag.prompts.load_prompts` reads only ``system`` and ``user``."""
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


def with_example(prompt: Prompt, turns: dict[str, str], **values: object) -> RenderedPrompt:
    """``prompt`` rendered, with its worked example (if it has one) as a user/assistant turn
    pair right after the instructions."""
    rendered = prompt.render(**values)
    user, reply = turns.get("example_user"), turns.get("example_assistant")
    if not user or reply is None:
        return rendered
    at = 1 if rendered and rendered[0][0] == "system" else 0
    pair = [("user", user), ("assistant", reply)]
    return with_turns(rendered, pair, at=at, fixed_chars=len(user) + len(reply))


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


__all__ = ["load_turns", "with_example", "with_follow_up", "with_turns"]
