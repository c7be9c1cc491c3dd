"""Behaviour kept across refactorings: every registered method's prompts, replies and outputs
on fixed questions with a deterministic scripted model equal the committed snapshot of each
configuration: code defaults, the embedded model's shipped profile and paper mode
(:mod:`tests.golden.snapshot`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gaprag import list_methods
from tests.golden.snapshot import COMMAND, CONFIGS, build_store, of_method, run_method


def golden(config: str) -> dict[str, Any]:
    file = CONFIGS[config].file
    return json.loads(file.read_text(encoding="utf-8")) if file.exists() else {}  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Any]]:
    """The snapshot's root folder and store, built once for the module (the environment the
    build sets is restored afterwards)."""
    root = tmp_path_factory.mktemp("golden")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GAPRAG_HOME", str(root / "home"))
        store = build_store(root)
    yield root, store


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("method", list_methods())
def test_outputs_equal_the_golden_snapshot(
    method: str,
    config: str,
    built: tuple[Path, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    command = COMMAND.format(config=config, method=method)
    expected = of_method(golden(config), method)
    if not expected:
        pytest.fail(
            f"no golden snapshot for method {method!r} in {config}: record it with "
            f"`{command}`, check the new runs and commit the file"
        )
    root, store = built
    monkeypatch.setenv("GAPRAG_HOME", str(root / "home"))  # the runs' home, with the pairs
    now = run_method(method, store, config)
    assert sorted(now) == sorted(expected)
    changed = [key for key in expected if now[key] != expected[key]]
    assert not changed, (
        f"outputs changed in {config} for {changed}; if the change is intended, record it "
        f"with `{command}` and commit the file"
    )


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_the_snapshot_holds_only_registered_methods(config: str) -> None:
    stale = sorted({key.split("|", 1)[0] for key in golden(config)} - set(list_methods()))
    assert not stale, f"runs of unregistered methods in {CONFIGS[config].file}: {stale}"


def test_the_configurations_differ_where_a_profile_applies() -> None:
    """The shipped profile and paper mode reach the model: IterKey's prompts differ between the
    three configurations (the tuned keyword prompts, the gate's plain RAG call, the paper's)."""
    prompts = {c: of_method(golden(c), "iterkey") for c in CONFIGS}
    assert all(prompts.values()), "record every configuration first"
    first = {c: next(iter(sorted(runs.items())))[1]["prompts"] for c, runs in prompts.items()}
    assert first["defaults"] != first["shipped"] != first["paper"] != first["defaults"]
