"""Behaviour kept across refactorings: every method's prompts, replies and outputs on fixed
questions with a deterministic scripted model equal the committed snapshot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.golden.snapshot import run

GOLDEN = Path(__file__).parent.parent / "golden" / "outputs.json"


def test_outputs_equal_the_golden_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "now.json"
    run(out)
    now = json.loads(out.read_text(encoding="utf-8"))
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert sorted(now) == sorted(golden)
    changed = [key for key in golden if now[key] != golden[key]]
    assert not changed, f"outputs changed for {changed}"
