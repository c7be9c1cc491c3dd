"""scripts/mutation.py: the per-method mutmut configuration and the summary made from
mutmut's state."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from tests.scripts import ROOT, load_script

mutation = load_script("scripts/mutation.py")

REPOSITORY_PYPROJECT = '[project]\nname = "x"\n\n[tool.pytest.ini_options]\nasyncio_mode = "auto"\n'


def test_every_method_with_a_fidelity_test_file_has_settings_and_the_file_exists() -> None:
    assert set(mutation.METHODS) == {
        "iterkey",
        "rag_ef",
        "missing_knowledge",
        "migres",
        "rfm_rag",
        "ircot",
    }
    for name in mutation.METHODS:
        assert (ROOT / mutation.test_file(name)).is_file()
        for pattern in mutation.METHODS[name].only_mutate(name):
            assert list(ROOT.glob(pattern)), pattern


def test_the_generated_pyproject_keeps_pytest_settings_and_holds_the_method_table() -> None:
    data = tomllib.loads(mutation.pyproject(REPOSITORY_PYPROJECT, "rag_ef"))
    assert data["tool"]["pytest"]["ini_options"] == {"asyncio_mode": "auto"}
    assert data["tool"]["mutmut"] == {
        "source_paths": ["gaprag/"],
        "only_mutate": [
            "gaprag/graphs/rag_ef/*",
            "gaprag/stores/pairs.py",
            "gaprag/nodes/decisions.py",
        ],
        "mutate_only_covered_lines": True,
        "process_isolation": "forkserver",
        "pytest_add_cli_args_test_selection": ["tests/unit/test_paper_rag_ef.py"],
    }


def test_a_mutmut_table_in_the_repository_pyproject_is_refused() -> None:
    with pytest.raises(ValueError, match=r"scripts/mutation\.py"):
        mutation.pyproject(REPOSITORY_PYPROJECT + "\n[tool.mutmut]\n", "ircot")


def test_the_repository_pyproject_has_no_mutmut_table() -> None:
    assert "mutmut" not in tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]


def test_a_mutant_name_gives_its_function_or_method() -> None:
    assert mutation.function_of("gaprag.graphs.ircot.nodes.x_reason__mutmut_3") == "reason"
    assert (
        mutation.function_of("gaprag.stores.pairs.xǁPairStoreǁsearch__mutmut_12")
        == "PairStore.search"
    )


def _state(tmp_path: Path) -> Path:
    meta = tmp_path / "mutants" / "gaprag" / "graphs" / "ircot" / "nodes.py.meta"
    meta.parent.mkdir(parents=True)
    codes = {
        "gaprag.graphs.ircot.nodes.x_reason__mutmut_1": 1,
        "gaprag.graphs.ircot.nodes.x_reason__mutmut_2": 0,
        "gaprag.graphs.ircot.nodes.x_reason__mutmut_3": 36,
        "gaprag.graphs.ircot.nodes.x_next_query__mutmut_1": 1,
        "gaprag.graphs.ircot.nodes.x_next_query__mutmut_2": 33,
    }
    meta.write_text(
        json.dumps(
            {
                "exit_code_by_key": codes,
                "durations_by_key": {},
                "estimated_durations_by_key": {},
                "hash_by_function_name": {},
                "type_check_error_by_key": {},
            }
        ),
        "utf-8",
    )
    return tmp_path


def test_the_summary_counts_each_function_and_names_its_survivors(tmp_path: Path) -> None:
    state = mutation.read_state(_state(tmp_path))
    assert list(state) == ["gaprag/graphs/ircot/nodes.py"]
    by_function = mutation.scores(state)
    reason = by_function[("gaprag/graphs/ircot/nodes.py", "reason")]
    assert (reason.killed, reason.timeout, reason.survivors, reason.total) == (
        1,
        1,
        ["gaprag.graphs.ircot.nodes.x_reason__mutmut_2"],
        3,
    )
    info = mutation.RunInfo(
        date="2026-12-02", commit="abc1234", machine="m", command="c", duration="1 min"
    )
    text = mutation.summary("ircot", by_function, info)
    assert "**2 of 5 mutants killed (40%)**, 1 survived, 1 timed out, 1 other." in text
    assert "| `gaprag/graphs/ircot/nodes.py` | `reason` | 1 | 3 |" in text
    assert "`gaprag.graphs.ircot.nodes.x_reason__mutmut_2`" in text
    assert "`gaprag.graphs.ircot.nodes.x_next_query__mutmut_2 (no tests)`" in text
    assert "- commit: `abc1234`" in text


def test_an_unknown_method_is_a_one_line_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        mutation.main(["nope"])
    assert exit_.value.code == 2
    assert "unknown method nope; choose from iterkey" in capsys.readouterr().err


def test_a_rerun_of_survivors_refuses_sources_newer_than_their_mutants(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    work = tmp_path / ".mutation" / "iterkey"
    mutant = work / "mutants" / "gaprag" / "graphs" / "iterkey" / "nodes.py"
    mutant.parent.mkdir(parents=True)
    mutant.write_text("# mutants\n")
    code = {"gaprag.graphs.iterkey.nodes.x_reason__mutmut_1": 0}
    mutant.with_name("nodes.py.meta").write_text(json.dumps({"exit_code_by_key": code}))
    source = work / "gaprag" / "graphs" / "iterkey" / "nodes.py"
    source.parent.mkdir(parents=True)
    source.write_text("# source\n")
    os.utime(mutant, (1_000, 1_000))  # copied state: the copy keeps the run's older times
    assert mutation.stale_sources(work) == ["gaprag/graphs/iterkey/nodes.py"]
    monkeypatch.setattr(mutation, "prepare", lambda name: work)
    monkeypatch.setattr(mutation, "commit", lambda: "abc1234")
    ran: list[object] = []
    monkeypatch.setattr(mutation.subprocess, "run", lambda *a, **k: ran.append(a))
    assert mutation.run("iterkey", rerun_survivors=True, summary_only=False, max_children=None)
    assert "find" in capsys.readouterr().err and not ran
    os.utime(mutant)  # touched: the same sources, the mutants current again
    assert mutation.stale_sources(work) == []
