"""The run's executor: (method, question) jobs on one event loop, at most ``concurrency`` at a
time, each row appended to ``results.jsonl`` as it finishes, a progress bar with the running
means, and the error cap."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gaprag.datasets import Example
from gaprag.eval.results import ResultsWriter

#: one question (its row) for one method key
Answer = Callable[[str, Example], Awaitable[dict[str, Any]]]


class Means:
    """Running mean EM and F1 per method key, and the failed questions, for the progress bar."""

    def __init__(self, methods: Sequence[str]) -> None:
        self.sums = {m: [0.0, 0.0, 0] for m in methods}
        self.errors = 0

    def add(self, row: Mapping[str, Any]) -> None:
        if row.get("error"):
            self.errors += 1
            return
        acc = self.sums[row["method"]]
        acc[0] += float(row.get("em") or 0.0)
        acc[1] += float(row.get("f1") or 0.0)
        acc[2] = int(acc[2]) + 1

    def text(self) -> str:
        parts = []
        for m, (em, f1, n) in self.sums.items():
            if n:
                parts.append(f"{m} EM={em / n:.2f} F1={f1 / n:.2f}")
        if self.errors:
            parts.append(f"errors={self.errors}")
        return " | ".join(parts)


@dataclasses.dataclass
class Executed:
    """What the jobs did: the new rows in the order written, one line per failed question, and
    whether the error cap stopped the run."""

    rows: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)
    stopped: bool = False


async def execute(
    jobs: Sequence[tuple[str, Example]],
    answer: Answer,
    results: Path,
    *,
    means: Means,
    concurrency: int,
    max_errors: int,
    desc: str,
    progress: bool,
) -> Executed:
    """Run every job with ``answer``, at most ``concurrency`` at a time, appending each row to
    ``results``; after ``max_errors`` failed questions (``0``: no cap) the jobs not yet started
    are left out. ``means`` (the rows already there) grows with each row, shown on the bar."""
    from tqdm import tqdm

    bar = tqdm(
        total=len(jobs),
        desc=desc,
        unit="run",
        disable=not progress,
        file=sys.stderr,
        dynamic_ncols=True,
    )
    writer = ResultsWriter(results)
    sem = asyncio.Semaphore(concurrency)
    done = Executed()

    async def job(method: str, example: Example) -> None:
        async with sem:
            if done.stopped:
                return
            row = await answer(method, example)
            writer.write(row)
            done.rows.append(row)
            means.add(row)
            if row["error"]:
                done.errors.append(f"{method} on {example.id}: {row['error']}")
                if max_errors > 0 and len(done.errors) >= max_errors:
                    done.stopped = True
            bar.update(1)
            bar.set_postfix_str(means.text(), refresh=False)

    try:
        await asyncio.gather(*(job(m, ex) for m, ex in jobs))
    finally:
        writer.close()
        bar.close()
    return done
