"""scripts/readme_tables.py: the results tables printed from combined summaries, and the
committed pages (README.md, docs/results/README.md) quoting the committed summaries."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "readme_tables.py"
N50 = ROOT / "docs" / "results" / "n50"


def load() -> ModuleType:
    return load_script("scripts/readme_tables.py")


def stat(mean: float, lo: float, hi: float, **extra: Any) -> dict[str, Any]:
    return {"mean": mean, "ci": [lo, hi], "n": 50, **extra}


def method(f1: float, delta: float | None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "n": 50,
        "f1": stat(f1, f1 - 0.1, f1 + 0.1),
        "support_recall": stat(0.8, 0.7, 0.9),
        "retrieval_recall": stat(0.9, 0.85, 0.95),
        "cost": {"llm_calls": 4.04, "tokens": 3706.4, "wall_s": 88.5},
    }
    if delta is not None:
        entry["vs_baseline"] = {"f1": stat(delta, delta - 0.09, delta + 0.09, wins=7, losses=3)}
    return entry


SUMMARY: dict[str, Any] = {
    "baseline": "standard_rag",
    "datasets": {
        "hotpotqa": {"methods": {"standard_rag": method(0.567, None), "iterkey": method(0.5, -0.067), "migres": method(0.6, 0.033)}},
        "musique": {"methods": {"standard_rag": method(0.26, None), "iterkey": method(0.2, -0.06), "migres": method(0.45, 0.19)}},
    },
    "pooled": {
        "standard_rag": {**method(0.41, None), "n": 100},
        "iterkey": {**method(0.35, -0.064), "n": 100},
        "migres": {**method(0.52, 0.111), "n": 100},
    },
}  # fmt: skip


def test_tables_put_the_baseline_first_and_the_best_delta_next() -> None:
    mod = load()
    absolute = mod.absolute(SUMMARY).splitlines()
    assert absolute[0].startswith("| method | HotpotQA F1 | MuSiQue F1 | pooled F1, 100 q |")
    assert [line.split(" | ")[0] for line in absolute[2:]] == [
        "| standard_rag",
        "| MIGRES",
        "| IterKey",
    ]
    assert (
        "| 0.52 [0.42, 0.62] | 0.80 [0.70, 0.90] | 0.90 [0.85, 0.95] | 4.0 | 3,706 | 88 |"
        in (absolute[3])
    )
    deltas = mod.deltas(SUMMARY).splitlines()
    assert "HotpotQA (standard_rag F1 0.57)" in deltas[0]
    assert deltas[2] == (
        "| MIGRES | +0.03 [−0.06, +0.12] | +0.19 [+0.10, +0.28] "
        "| **+0.11 [+0.02, +0.20]** | 7 / 3 |"
    )
    assert deltas[3].startswith("| IterKey | −0.07 [−0.16, +0.02] |")
    assert mod.versus_before(SUMMARY) is None


def test_the_script_reads_summary_json(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps(SUMMARY))
    out = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, check=True
    ).stdout
    assert out.count("| standard_rag |") == 1  # the delta table leaves the baseline out
    assert "| MIGRES |" in out and "wins / losses" in out


def test_after_against_before_has_a_column_per_set_and_the_pooled_interval() -> None:
    mod = load()

    def versus(delta: float, before: float, after: float) -> dict[str, Any]:
        return {
            "f1": stat(delta, delta - 0.05, delta + 0.05, wins=4, losses=2),
            "before": {"f1": before, "llm_calls": 3.0},
            "after": {"f1": after, "llm_calls": 4.04},
        }

    summary = {
        **SUMMARY,
        "versus_before": {
            "datasets": {
                "hotpotqa": {"iterkey": versus(0.28, 0.25, 0.53)},
                "musique": {"iterkey": versus(-0.011, 0.12, 0.11)},
            },
            "pooled": {"iterkey": {**versus(0.1, 0.2, 0.3), "f1": {**stat(0.1, 0.03, 0.17, wins=43, losses=42), "n": 100}}},
        },
    }  # fmt: skip
    lines = mod.versus_before(summary).splitlines()
    assert lines[0] == (
        "| method | HotpotQA ΔF1 | MuSiQue ΔF1 | F1 before → after, 100 q | ΔF1 [95% CI] "
        "| wins / losses | LLM calls before → after |"
    )
    assert lines[2] == (
        "| IterKey | +0.28 | −0.01 | 0.200 → 0.300 | +0.10 [+0.03, +0.17] | 43 / 42 | 3.0 → 4.0 |"
    )


def run(
    dataset: str, settings: dict[str, dict[str, Any]], sources: dict[str, dict[str, str]]
) -> dict[str, Any]:
    return {"dataset": dataset, "settings": settings, "setting_sources": sources}


def test_readme_table_shows_each_method_s_non_default_settings_and_the_ladder_row() -> None:
    mod = load()
    base = {"retrieval_mode": "hybrid", "top_k": 5}
    migres = {
        "retrieval_mode": "bm25",
        "top_k": 5,
        "sufficiency_threshold": 0.85,
        "seed_facts": True,
    }
    summary = {
        **SUMMARY,
        "runs": [
            run("hotpotqa", {"standard_rag": base, "iterkey": base, "migres": {**migres, "seed_facts": False}},
                {"migres": {"sufficiency_threshold": "profile qwen"}}),
            run("musique", {"standard_rag": base, "iterkey": base, "migres": migres},
                {"migres": {"sufficiency_threshold": "profile qwen", "seed_facts": "explicit"}}),
        ],
    }  # fmt: skip
    ladder = {
        "baseline": "standard_rag",
        "pooled": {"standard_rag": method(0.36, None), "rag_ef_SE_reworded": method(0.45, 0.092)},
        "runs": [run("hotpotqa", {"rag_ef_SE_reworded": {"similarity": "dense", "top_k": 5}}, {})],
    }  # fmt: skip
    lines = mod.overview(summary, ladder).splitlines()
    assert lines[0] == (
        "| method | settings | pooled F1, 100 q | ΔF1 vs plain RAG [95% CI] | LLM calls / q | s / q |"
    )
    assert lines[1] == "|---|---|---:|---:|---:|---:|"
    assert (
        lines[2]
        == "| plain RAG (`standard_rag`) | hybrid top 5 | 0.41 [0.31, 0.51] | – | 4.0 | 88 |"
    )
    assert lines[3] == (
        "| MIGRES | bm25 top 5; seed_facts=true (MuSiQue), sufficiency_threshold=0.85 "
        "| 0.52 [0.42, 0.62] | +0.11 [+0.02, +0.20] | 4.0 | 88 |"
    )
    assert lines[4].startswith("| IterKey | hybrid top 5 | 0.35 ")
    assert lines[5].startswith("| RAG-EF (ladder) | dense top 5 over S ∪ E_r ")
    assert (
        "its own corpus and plain RAG (F1 0.36) | 0.45 [0.35, 0.55] | +0.09 [+0.00, +0.18] |"
        in lines[5]
    )


def test_gated_runs_get_gate_columns_and_variant_labels() -> None:
    mod = load()
    gate = {"gate": "logprob_mean", "gate_threshold": -0.3567}
    base = {"retrieval_mode": "hybrid", "top_k": 5, "gate": "off"}
    sources = {"iterkey": {"gate": "profile qwen", "gate_threshold": "profile qwen"},
               "migres": {"gate": "profile qwen", "gate_threshold": "explicit"}}  # fmt: skip
    summary = {
        **SUMMARY,
        "datasets": {
            s: {"methods": {**entry["methods"],
                            "iterkey": {**entry["methods"]["iterkey"], "stop_reasons": {"gate_confident": 3, "max_iterations": 1}},
                            "migres": {**entry["methods"]["migres"], "stop_reasons": {"gate_confident": 1, "sufficient": 1}}}}
            for s, entry in SUMMARY["datasets"].items()
        },
        "runs": [
            run(s, {"standard_rag": base, "iterkey": {**base, **gate},
                    "migres": {**base, **gate, "gate_threshold": -0.2877}}, sources)
            for s in ("hotpotqa", "musique")
        ],
    }  # fmt: skip
    summary["pooled"] = {**summary["pooled"], "ircot_p75": {**method(0.45, 0.04), "n": 100}}
    summary["runs"][0]["variants"] = {"ircot_p75": "ircot"}
    lines = mod.overview(summary).splitlines()
    assert lines[0].endswith(
        "| ΔF1 vs plain RAG [95% CI] | loops when | looped | LLM calls / q | s / q |"
    )
    assert lines[2].startswith("| plain RAG (`standard_rag`) | hybrid top 5 |")
    assert lines[2].endswith("| – | – | – | 4.0 | 88 |")
    assert lines[3].startswith("| MIGRES | hybrid top 5 | 0.52 ")
    assert lines[3].endswith("| p < 0.75 | 50% | 4.0 | 88 |")
    assert lines[4].startswith("| IRCoT (`ircot_p75`) | – |")
    assert lines[5].startswith("| IterKey | hybrid top 5 |")
    assert lines[5].endswith("| p < 0.70 | 25% | 4.0 | 88 |")
    assert "| looped |" not in mod.overview(SUMMARY)


def committed(name: str) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads((N50 / name / "summary.json").read_text(encoding="utf-8"))
    return summary


#: how README.md's table names the rows of the gated run (the methods the newest run lacks)
GATED_LABEL = "(2026-11-26, 150 q)"


def test_readme_quotes_the_committed_results_table() -> None:
    mod = load()
    newest, gated, ladder = committed("escalation"), committed("gated"), committed("rag_ef")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert mod.overview(newest, ladder, gated, GATED_LABEL) in readme
    prose = " ".join(readme.split())
    serving = next(iter(newest["serving"].values()))
    assert f"{serving['engine']} {serving['engine_version']}" in prose
    assert f"on {newest['generated'][:10]}" in prose
    assert "docs/results/n50/gated/plots/pooled_f1_per_cost.png" in readme


def test_results_page_quotes_the_committed_n50_tables() -> None:
    mod = load()
    page = (ROOT / "docs" / "results" / "README.md").read_text(encoding="utf-8")
    gated, after, before = committed("gated"), committed("after"), committed("before")
    for run in (committed("escalation"), gated, after):
        for table in (mod.absolute(run), mod.deltas(run), mod.versus_before(run)):
            assert table and table in page
    for table in (mod.absolute(before), mod.deltas(before)):
        assert table in page
    assert mod.ladder(committed("rag_ef")) in page


def test_gate_column_states_the_threshold_as_the_probability_each_signal_compares() -> None:
    mod = load()

    def cell(gate: str, threshold: float) -> str:
        ctx = {"gate": gate, "gate_threshold": threshold}
        return str(mod.gate_cell({"runs": [run("hotpotqa", {"m": ctx}, {})]}, "m"))

    assert cell("logprob_mean", -0.1054) == "p < 0.90"
    assert cell("logprob_min", -0.6931) == "logprob_min p < 0.50"
    assert cell("logprob_margin", 0.6931) == "logprob_margin p < 0.50"
    assert cell("agreement", 1.0) == "answers differ"
    assert cell("off", 0.0) == "–"
