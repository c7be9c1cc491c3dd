"""Moved or renamed public modules and names keep their old path for one release, with a warning."""

from __future__ import annotations

import importlib
import sys

import pytest

FEEDBACK = "gaprag.graphs.rfm_rag.feedback_model"


@pytest.mark.parametrize(
    ("old", "new", "name"),
    [
        ("gaprag.llm.accounting", "gaprag.accounting", "record_retrieval"),
        ("gaprag.eval.datasets", "gaprag.datasets", "load_dataset"),
        ("gaprag.eval.metrics", "gaprag.metrics", "normalize_answer"),
        ("gaprag.graphs.iterkey.parse", "gaprag.graphs.iterkey.parsing", "parse_keywords"),
        ("gaprag.graphs.rfm_rag.model", f"{FEEDBACK}.model", "RFeedbackMLP"),
        ("gaprag.graphs.rfm_rag.features", f"{FEEDBACK}.features", "coverage_map"),
        ("gaprag.graphs.rfm_rag.rescore", f"{FEEDBACK}.rescore", "rescore_rows"),
        ("gaprag.graphs.rfm_rag.train", f"{FEEDBACK}.train", "run_training"),
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


@pytest.mark.parametrize(
    ("old", "old_name", "new", "name"),
    [
        ("gaprag.graphs.rfm_rag.train", "Dataset", f"{FEEDBACK}.examples", "FeedbackSplits"),
        ("gaprag.graphs.rfm_rag.train", "build_dataset", f"{FEEDBACK}.examples", "build_splits"),
        ("gaprag.graphs.rfm_rag.train", "graph_pool_dataset", f"{FEEDBACK}.examples", "graph_pool_splits"),
        ("gaprag.graphs.rfm_rag.train", "evaluate", f"{FEEDBACK}.train", "score_model"),
        ("gaprag.graphs.rfm_rag.train", "load_records", f"{FEEDBACK}.examples", "load_records"),
        ("gaprag.graphs.rfm_rag.train", "featurize", f"{FEEDBACK}.features", "featurize"),
        ("gaprag.graphs.rfm_rag.features", "heuristic_entities", f"{FEEDBACK}.examples", "heuristic_entities"),
    ],
)  # fmt: skip
def test_old_names_of_moved_or_renamed_objects(
    old: str, old_name: str, new: str, name: str
) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match="is deprecated"):
        module = importlib.import_module(old)
    assert getattr(module, old_name) is getattr(importlib.import_module(new), name)


@pytest.mark.parametrize(
    ("name", "new"),
    [
        ("SEED_FACTS", "gaprag.graphs.migres.known_info"),
        ("DEMOS", "gaprag.graphs.migres.prompting"),
        ("FEW_SHOT", "gaprag.graphs.migres.prompting"),
        ("WHOLE", "gaprag.graphs.migres.prompting"),
        ("RETRY_PREFIX", "gaprag.graphs.migres.snippets"),
    ],
)
def test_names_moved_out_of_migres_nodes(name: str, new: str) -> None:
    from gaprag.graphs.migres import nodes

    with pytest.warns(DeprecationWarning, match=f"import it from {new} instead"):
        value = getattr(nodes, name)
    assert value is getattr(importlib.import_module(new), name)
    with pytest.raises(AttributeError):
        _ = nodes.NOT_A_NAME
