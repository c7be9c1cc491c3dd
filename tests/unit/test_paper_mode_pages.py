"""Each method page's "Paper mode" section names tests that exist in that method's fidelity
file (tests/unit/test_paper_<method>.py), so every paper step points at a real proof."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
METHODS = ("missing_knowledge", "iterkey", "rag_ef", "migres", "rfm_rag", "ircot")


def paper_mode_section(method: str) -> str:
    page = (ROOT / "docs" / "methods" / f"{method}.md").read_text(encoding="utf-8")
    return page.split("\n## Paper mode\n", 1)[1].split("\n## ", 1)[0]


def fidelity_tests(method: str) -> set[str]:
    tree = ast.parse((ROOT / "tests" / "unit" / f"test_paper_{method}.py").read_text("utf-8"))
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


@pytest.mark.parametrize("method", METHODS)
def test_the_paper_mode_section_names_only_tests_of_the_fidelity_file(method: str) -> None:
    named = set(re.findall(r"`(test_\w+)`", paper_mode_section(method)))
    assert named, f"{method}: its Paper mode section names no test"
    assert sorted(named - fidelity_tests(method)) == []
