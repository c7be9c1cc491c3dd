"""Behaviour kept across refactorings: every registered method's prompts, replies and outputs
on fixed questions with a deterministic scripted model equal the committed snapshot
(:mod:`tests.golden.snapshot`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gaprag import list_methods
from tests.golden.snapshot import COMMAND, GOLDEN, build_store, of_method, run_method


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Any]]:
    """The snapshot's root folder and store, built once for the module (the environment the
    build sets is restored afterwards)."""
    root = tmp_path_factory.mktemp("golden")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GAPRAG_HOME", str(root / "home"))
        store = build_store(root)
    yield root, store


@pytest.mark.parametrize("method", list_methods())
def test_outputs_equal_the_golden_snapshot(
    method: str,
    golden: dict[str, Any],
    built: tuple[Path, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    expected = of_method(golden, method)
    if not expected:
        pytest.fail(
            f"no golden snapshot for method {method!r}: record it with "
            f"`{COMMAND.format(method=method)}`, check the new runs and commit the file"
        )
    root, store = built
    monkeypatch.setenv("GAPRAG_HOME", str(root / "home"))  # the runs' home, with the pairs
    now = run_method(method, store)
    assert sorted(now) == sorted(expected)
    changed = [key for key in expected if now[key] != expected[key]]
    assert not changed, (
        f"outputs changed for {changed}; if the change is intended, record it with "
        f"`{COMMAND.format(method=method)}` and commit the file"
    )


def test_the_snapshot_holds_only_registered_methods(golden: dict[str, Any]) -> None:
    stale = sorted({key.split("|", 1)[0] for key in golden} - set(list_methods()))
    assert not stale, f"runs of unregistered methods in {GOLDEN}: {stale}"
