"""MIGRES's prompts and passage formats (``prompts.toml``), with the MIGRES* demonstrations."""

from __future__ import annotations

import dataclasses
import sys
import tomllib
from importlib import resources

from gaprag import nodes
from gaprag.graphs.migres.context import Context
from gaprag.prompts import Prompt, load_prompts

PROMPTS = load_prompts(__package__)
FORMATS = nodes.load_formats(__package__)
WHOLE = sys.maxsize  # facts and verifier premises are shown whole, never cut


def _load_demos() -> dict[str, tuple[tuple[str, str], ...]]:
    """MIGRES* demonstrations, ``[[demos.<prompt>]]`` in prompts.toml: each demo holds the
    prompt's variables and the ``reply``; its user turn is the prompt's own user text filled
    with those variables, so a demo looks exactly like the live turn that follows it."""
    data = tomllib.loads((resources.files(__package__) / "prompts.toml").read_text("utf-8"))
    out: dict[str, tuple[tuple[str, str], ...]] = {}
    for name, demos in data.get("demos", {}).items():
        template = PROMPTS[name].user.strip()
        out[name] = tuple(
            (
                template.format(**{k: str(v).strip() for k, v in demo.items() if k != "reply"}),
                str(demo["reply"]).strip(),
            )
            for demo in demos
        )
    return out


DEMOS = _load_demos()
FEW_SHOT: dict[str, Prompt] = {
    name: dataclasses.replace(PROMPTS[name], examples=demos) for name, demos in DEMOS.items()
}


def prompt(name: str, ctx: Context) -> Prompt:
    """Prompt ``name``, with its MIGRES* demonstrations as user/assistant turns when
    ``few_shot`` is on."""
    return FEW_SHOT[name] if ctx.few_shot and name in FEW_SHOT else PROMPTS[name]
