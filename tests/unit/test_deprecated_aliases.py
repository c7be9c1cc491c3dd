"""Moved public modules keep their old import path for one release, with a warning."""

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
    ],
)
def test_old_module_path_warns_and_gives_the_same_objects(old: str, new: str, name: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"import {new} instead"):
        module = importlib.import_module(old)
    assert getattr(module, name) is getattr(importlib.import_module(new), name)
