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


def steps_table(section: str) -> list[str]:
    """The rows of the section's paper-step table (its header names "proved by")."""
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|") and "proved by" in line)
    rows = []
    for line in lines[start + 2 :]:  # after the header and its rule
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


@pytest.mark.parametrize("method", METHODS)
def test_every_paper_step_of_the_table_names_the_test_that_proves_it(method: str) -> None:
    rows = steps_table(paper_mode_section(method))
    assert len(rows) >= 5, method
    unproved = [row[:80] for row in rows if not re.search(r"`test_\w+`", row)]
    assert unproved == [], f"{method}: steps without a test: {unproved}"
