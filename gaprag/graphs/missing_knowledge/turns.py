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
from importlib import resources

from gaprag.prompts import Prompt, RenderedPrompt, follow_up

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


def with_follow_up(
    rendered: RenderedPrompt, question: Prompt, turns: dict[str, str], *, thought: str
) -> RenderedPrompt:
    """The judge prompt, the judge's analysis as the assistant's turn (``assistant`` template,
    ``{thought}`` as a JSON string), then ``question`` as the next user turn; the template's
    text counts as instructions in the token split (:func:`gaprag.prompts.follow_up`)."""
    value = json.dumps(thought, ensure_ascii=False)
    reply = turns["assistant"].format(thought=value)
    return follow_up(rendered, reply, question.render(), reply_fixed_chars=len(reply) - len(value))


__all__ = ["load_turns", "with_follow_up"]
