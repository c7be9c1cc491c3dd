"""Moved or renamed public modules and names keep their old path for one release, with a warning."""

from __future__ import annotations

import importlib
import sys

import pytest


@pytest.mark.parametrize(
    ("old", "new", "name"),
    [
        ("gaprag.llm.accounting", "gaprag.accounting", "record_retrieval"),
        ("gaprag.eval.datasets", "gaprag.datasets", "load_dataset"),
        ("gaprag.eval.metrics", "gaprag.metrics", "normalize_answer"),
        ("gaprag.graphs.iterkey.parse", "gaprag.graphs.iterkey.parsing", "parse_keywords"),
    ],
)
def test_old_module_path_warns_and_gives_the_same_objects(old: str, new: str, name: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"import {new} instead"):
        module = importlib.import_module(old)
    assert getattr(module, name) is getattr(importlib.import_module(new), name)


@pytest.mark.parametrize(
    ("module", "old", "new"),
    [
        ("gaprag.graphs.iterkey.state", "IterKeyState", "State"),
        ("gaprag.graphs.iterkey.state", "IterKeyOutput", "OutputState"),
        ("gaprag.graphs.ircot.state", "IRCoTState", "State"),
        ("gaprag.graphs.ircot.state", "IRCoTOutput", "OutputState"),
        ("gaprag.graphs.migres.state", "Output", "OutputState"),
        ("gaprag.graphs.missing_knowledge.graph", "route_after_judge", "route_after_judge_missing"),
    ],
)
def test_old_name_warns_and_gives_the_same_object(module: str, old: str, new: str) -> None:
    found = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=f"{module}.{old} is deprecated: use {new} instead"):
        assert getattr(found, old) is getattr(found, new)
    assert not hasattr(found, "not_a_name")  # other names are still an AttributeError
