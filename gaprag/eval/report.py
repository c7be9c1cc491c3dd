"""Write the report of evaluation runs: ``summary.json`` (:mod:`gaprag.eval.stats`),
``summary.md`` (:mod:`gaprag.eval.markdown`), PNG plots (:mod:`gaprag.eval.plots`: quality per
cost, metric against tokens, metric by iteration count) and
``report.html`` (:mod:`gaprag.eval.html`)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gaprag.errors import InputError
from gaprag.eval.markdown import render_markdown
from gaprag.eval.plots import plot, plot_quality_per_cost
from gaprag.eval.record import RUN_FILE
from gaprag.eval.results import RESULTS, normalize_row, read_results
from gaprag.eval.stats import N_BOOT, dedupe, summarize, versus_before

__all__ = ["summarize", "write_report"]


def _require_results(path: Path, hint: str) -> None:
    if not (path / RESULTS).is_file():
        raise InputError(f"no {RESULTS} in {path}", hint=hint)


def write_report(
    dirs: Sequence[str | Path],
    out: str | Path | None = None,
    *,
    seed: int = 0,
    n_boot: int = N_BOOT,
    plots: bool = True,
    html: bool = True,
    before: Sequence[str | Path] = (),
) -> dict[str, Any]:
    """Read ``results.jsonl`` of each dir; write ``summary.json``, ``summary.md``, plots and
    ``report.html`` (see :mod:`gaprag.eval.html`) to ``out``. ``before``: directories of an
    earlier run of the same questions (another code version), compared method by method."""
    for d in before:
        _require_results(Path(d), "--before takes `gaprag eval` directories")
    rows: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    for d in dirs:
        path = Path(d)
        _require_results(path, "give directories written by `gaprag eval`")
        rows += read_results(path)
        if (path / RUN_FILE).is_file():
            with contextlib.suppress(ValueError):
                runs.append(json.loads((path / RUN_FILE).read_text(encoding="utf-8")))
    if not rows:
        raise InputError("no results to report", hint="run `gaprag eval` first")
    target = Path(out) if out is not None else Path(dirs[0])
    target.mkdir(parents=True, exist_ok=True)
    summary = summarize(rows, seed=seed, n_boot=n_boot, runs=runs)
    summary["runs"] = runs
    if before:
        old_rows = [r for d in before for r in read_results(Path(d))]
        summary["versus_before"] = {
            # relative to the report, so a committed summary names no machine path
            "dirs": [os.path.relpath(Path(d).resolve(), target.resolve()) for d in before],
            **versus_before(old_rows, rows, seed=seed, n_boot=n_boot),
        }
    made = plot(summary, target) if plots else {}
    if plots:
        for name, files in plot_quality_per_cost(summary, target).items():
            made[name] = [*files, *made.get(name, [])]
    summary["plots"] = made
    tmp = target / ".summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2, ensure_ascii=False), encoding="utf-8")
    tmp.replace(target / "summary.json")
    (target / "summary.md").write_text(render_markdown(summary, runs, made), encoding="utf-8")
    if html:
        from gaprag.eval.html import write_html

        rows = [normalize_row(r) for r in dedupe(rows)]
        write_html(summary, rows, [Path(d) for d in dirs], target, made)
    return summary
