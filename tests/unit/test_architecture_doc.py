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


def eval_contract_layers() -> list[set[str]]:
    """The evaluation contract's layers (``containers = ["gaprag.eval"]``), top first."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c.get("containers") == ["gaprag.eval"]]
    return [set(re.split(r"\s*[|:]\s*", layer.strip())) for layer in contract["layers"]]


def test_the_evaluation_table_has_the_evaluation_contracts_layers_in_order() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = page.split("## Where evaluation lives", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| ([^|]+) \|", section, re.MULTILINE)[1:]  # after the header
    drawn = [set(re.findall(r"`(\w+)`", row)) for row in rows]
    assert drawn == eval_contract_layers()


def test_every_shared_node_module_and_lab_module_is_named_on_the_page() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    nodes = [p.stem for p in (ROOT / "gaprag" / "nodes").glob("*.py") if p.stem != "__init__"]
    missing = [n for n in nodes if f"gaprag.nodes.{n}" not in page and f"nodes/{n}.py" not in page]
    section = page.split("## The research lab", 1)[1].split("\n## ", 1)[0]
    lab = ROOT / "lab"
    missing += [
        p.relative_to(ROOT).as_posix()
        for p in lab.glob("**/*.py")
        if p.stem not in ("__init__", "__main__")
        and f"`{p.stem}`" not in section
        and f"`lab.{p.stem}`" not in section
    ]
    assert not missing, missing
