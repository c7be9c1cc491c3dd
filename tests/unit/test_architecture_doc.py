"""docs/architecture.md's layer drawing is the import contract of pyproject.toml: the same
layers with the same modules and separators, in the same order."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEADING = "## Layers (the import contract)"


def contract_layers() -> list[str]:
    """The layers of the contract over the whole package (``containers = ["gaprag"]``)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (package,) = [c for c in contracts if c.get("containers") == ["gaprag"]]
    return [normal(layer) for layer in package["layers"]]


def drawn_layers(page: str) -> list[str]:
    """The layers drawn in the first code block under the layers heading, top first; a line is
    the layer's modules, then (after two spaces or more) what the layer is."""
    section = page.split(HEADING, 1)[1]
    block = re.search(r"```\n(.*?)```", section, re.DOTALL)
    assert block, f"no drawing under {HEADING!r}"
    return [normal(re.split(r"\s{2,}", line.strip())[0]) for line in block[1].splitlines()]


def normal(layer: str) -> str:
    return re.sub(r"\s*([|:])\s*", r" \1 ", layer.strip())


def test_the_drawing_has_the_contracts_layers_in_order() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert drawn_layers(page) == contract_layers()
