"""Each method page's "Measured" tables quote the committed n = 50 rows (scripts/method_rows.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
SETS = ("hotpotqa", "2wikimultihopqa", "musique")


@pytest.mark.parametrize("run", ["after", "before"])
@pytest.mark.parametrize("method", ["iterkey", "migres", "missing_knowledge", "rfm_rag"])
def test_method_page_quotes_the_committed_n50_rows(method: str, run: str) -> None:
    mod = load_script("scripts/method_rows.py")
    rows = mod.rows(method, [ROOT / "docs" / "results" / "n50" / run / s for s in SETS])
    assert len(rows) == 2 * len(SETS)  # the baseline and the method, per set
    page = (ROOT / "docs" / "methods" / f"{method}.md").read_text(encoding="utf-8")
    assert [r for r in rows if r not in page] == []
