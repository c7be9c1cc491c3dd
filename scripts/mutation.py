"""Mutation testing of a method's paper path against its fidelity tests (mutmut).

    nice -n 10 python scripts/mutation.py METHOD [METHOD ...]

For each method: a working directory `.mutation/METHOD/` (gitignored) holding a pyproject.toml
with that method's `[tool.mutmut]` (the repository's own settings, pytest's included, plus the
mutmut table) and links to `gaprag/` and `tests/`; `mutmut run` there (resumable: a rerun keeps
the verdicts of finished mutants); then `docs/results/mutation/METHOD.md`, killed / mutants per
function with the survivors by name, from mutmut's state (`mutants/**/*.py.meta`).
`--rerun-survivors` tests the survivors again (after a test was added; it refuses when a mutated
source is newer than its mutants, which state copied from another checkout is until its
`mutants/` files are touched); `--summary-only` rewrites
the summary from the state without running mutmut. One mutant by hand: `mutmut show NAME` in
the working directory; whether a test kills it, without touching the source (an edited source
file, even one put back, has its mutants made anew and their verdicts dropped on the next run):
in a copy of `.mutation/METHOD/mutants/` holding the current test file,
`MUTANT_UNDER_TEST=NAME PYTHONPATH=$PWD python -m pytest tests/unit/test_paper_METHOD.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from mutmut.stats import status_by_exit_code

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".mutation"
RESULTS = ROOT / "docs" / "results" / "mutation"
LINKED = ("gaprag", "tests")


@dataclass(frozen=True)
class Method:
    """What mutmut mutates for one method: its package and the shared code its paper path runs."""

    shared: tuple[str, ...] = ()

    def only_mutate(self, name: str) -> list[str]:
        return [f"gaprag/graphs/{name}/*", *self.shared]


METHODS: dict[str, Method] = {
    "iterkey": Method(shared=("gaprag/nodes/decisions.py",)),
    "rag_ef": Method(shared=("gaprag/stores/pairs.py", "gaprag/nodes/decisions.py")),
    "missing_knowledge": Method(shared=("gaprag/nodes/decisions.py", "gaprag/nodes/pool.py")),
    "migres": Method(shared=("gaprag/nodes/decisions.py", "gaprag/nodes/pool.py")),
    "rfm_rag": Method(shared=("gaprag/nodes/decisions.py",)),
    "ircot": Method(
        shared=("gaprag/nodes/answer.py", "gaprag/nodes/pool.py", "gaprag/nodes/render.py")
    ),
}


def test_file(name: str) -> str:
    return f"tests/unit/test_paper_{name}.py"


def _toml_list(items: Sequence[str]) -> str:
    return "[" + ", ".join(json.dumps(item) for item in items) + "]"


def mutmut_table(name: str) -> str:
    """The `[tool.mutmut]` table of one method."""
    method = METHODS[name]
    return "\n".join(
        [
            "[tool.mutmut]",
            'source_paths = ["gaprag/"]',
            f"only_mutate = {_toml_list(method.only_mutate(name))}",
            "mutate_only_covered_lines = true",
            '# the default, "fork", hangs: every mutant times out',
            'process_isolation = "forkserver"',
            f"pytest_add_cli_args_test_selection = {_toml_list([test_file(name)])}",
            "",
        ]
    )


def pyproject(repository_pyproject: str, name: str) -> str:
    """The repository's pyproject.toml (pytest's settings) with the method's mutmut table."""
    if "[tool.mutmut]" in repository_pyproject:
        raise ValueError(
            "pyproject.toml has its own [tool.mutmut]: the settings live in scripts/mutation.py"
        )
    return repository_pyproject.rstrip("\n") + "\n\n" + mutmut_table(name)


def prepare(name: str) -> Path:
    """The method's working directory: the generated pyproject.toml and links to the sources."""
    work = WORK / name
    work.mkdir(parents=True, exist_ok=True)
    text = pyproject((ROOT / "pyproject.toml").read_text("utf-8"), name)
    target = work / "pyproject.toml"
    if not target.exists() or target.read_text("utf-8") != text:
        target.write_text(text, "utf-8")
    for linked in LINKED:
        link = work / linked
        if not link.is_symlink():
            link.symlink_to(Path("..", "..", linked), target_is_directory=True)
    return work


@dataclass
class FunctionScore:
    killed: int = 0
    timeout: int = 0
    survivors: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.killed + self.timeout + len(self.survivors) + len(self.other)


def function_of(mutant: str) -> str:
    """`gaprag.graphs.x.nodes.x_reason__mutmut_3` -> `reason`; a method -> `Class.method`."""
    mangled = mutant.partition("__mutmut_")[0].rpartition(".")[2]
    if mangled.startswith("x_"):
        return mangled[2:]
    return ".".join(part for part in mangled[1:].split("ǁ") if part)


def scores(
    exit_codes_by_file: Mapping[str, Mapping[str, int | None]],
) -> dict[tuple[str, str], FunctionScore]:
    """(file, function) -> its score, from each mutated file's `exit_code_by_key`."""
    result: dict[tuple[str, str], FunctionScore] = {}
    for path, exit_codes in sorted(exit_codes_by_file.items()):
        for mutant, code in exit_codes.items():
            score = result.setdefault((path, function_of(mutant)), FunctionScore())
            status = status_by_exit_code[code]
            if status in ("killed", "caught by type check"):
                score.killed += 1
            elif status == "timeout":
                score.timeout += 1
            elif status == "survived":
                score.survivors.append(mutant)
            else:
                score.other.append(f"{mutant} ({status})")
    return result


def read_state(work: Path) -> dict[str, dict[str, int | None]]:
    """mutmut's verdicts: source path -> mutant name -> exit code."""
    mutants = work / "mutants"
    state: dict[str, dict[str, int | None]] = {}
    for meta in sorted(mutants.glob("**/*.py.meta")):
        path = meta.relative_to(mutants).as_posix().removesuffix(".meta")
        state[path] = json.loads(meta.read_text("utf-8"))["exit_code_by_key"]
    return state


@dataclass(frozen=True)
class RunInfo:
    date: str
    commit: str
    machine: str
    command: str
    duration: str


def summary(name: str, by_function: Mapping[tuple[str, str], FunctionScore], info: RunInfo) -> str:
    """The markdown summary of one method's run."""
    total = sum(s.total for s in by_function.values())
    killed = sum(s.killed for s in by_function.values())
    timeouts = sum(s.timeout for s in by_function.values())
    survived = sum(len(s.survivors) for s in by_function.values())
    other = sum(len(s.other) for s in by_function.values())
    share = f"{killed / total:.0%}" if total else "-"
    lines = [
        f"# Mutation testing of {name}'s paper path",
        "",
        f"`{info.command}` (mutmut, `.mutation/{name}/`): the lines of "
        + ", ".join(f"`{p}`" for p in METHODS[name].only_mutate(name))
        + f" that `{test_file(name)}` runs, mutated one at a time; a mutant is killed when a test"
        " of that file fails.",
        "",
        f"- date: {info.date}",
        f"- commit: `{info.commit}`",
        f"- machine: {info.machine}",
        f"- duration: {info.duration}",
        "",
        f"**{killed} of {total} mutants killed ({share})**, {survived} survived, {timeouts} timed out"
        + (f", {other} other" if other else "")
        + ".",
        "",
        "| file | function | killed | mutants |",
        "|---|---|---:|---:|",
    ]
    for (path, function), score in sorted(by_function.items()):
        lines.append(f"| `{path}` | `{function}` | {score.killed} | {score.total} |")
    lines += ["", "## Survivors", ""]
    for (path, function), score in sorted(by_function.items()):
        left = score.survivors + score.other
        if left:
            lines.append(f"- `{path}` `{function}`: " + ", ".join(f"`{m}`" for m in left))
    if not survived and not other:
        lines.append("None.")
    return "\n".join(lines) + "\n"


def machine() -> str:
    model = platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text("utf-8").splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    return f"{model}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def commit() -> str:
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "gaprag", "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    return head + (" + uncommitted changes" if dirty.stdout.strip() else "")


def stale_sources(work: Path) -> list[str]:
    """The mutated source files newer than their mutants (``mutants/PATH``): an edited source,
    or state copied from another checkout, whose files are newer than the copy. mutmut makes a
    newer file's mutants anew, renumbered, and drops their verdicts, so a rerun of survivors by
    name would test other mutants."""
    stale = []
    for meta in sorted((work / "mutants").glob("**/*.py.meta")):
        path = meta.relative_to(work / "mutants").as_posix().removesuffix(".meta")
        source, mutant = work / path, work / "mutants" / path
        if source.exists() and mutant.exists() and source.stat().st_mtime > mutant.stat().st_mtime:
            stale.append(path)
    return stale


def survivors(work: Path) -> list[str]:
    return [m for s in scores(read_state(work)).values() for m in s.survivors]


def run(name: str, *, rerun_survivors: bool, summary_only: bool, max_children: int | None) -> int:
    work = prepare(name)
    command = f"python scripts/mutation.py {name}"
    at = commit()  # the code the mutants were made from, not what changed while they ran
    seconds = 0.0
    if not summary_only:
        argv = [str(Path(sys.executable).with_name("mutmut")), "run"]
        if max_children:
            argv += ["--max-children", str(max_children)]
        if rerun_survivors:
            stale = stale_sources(work)
            if stale:
                print(
                    f"error: {', '.join(stale)} newer than its mutants in {work}/mutants: "
                    "mutmut would make them anew and drop the verdicts. An edited source needs a "
                    "new run; state copied from another checkout (the same sources) needs "
                    f"`find {work}/mutants -type f -exec touch {{}} +` first",
                    file=sys.stderr,
                )
                return 1
            names = survivors(work)
            if not names:
                print(f"{name}: no survivors to rerun")
                return 0
            argv += names
            command += " --rerun-survivors"
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("GAPRAG_BASE_URL", "OPENAI_BASE_URL", "PYTHONPATH")
        }
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        start = time.monotonic()
        code = subprocess.run(argv, cwd=work, env=env).returncode
        seconds = time.monotonic() - start
        if code != 0:
            print(
                f"error: mutmut run for {name} exited with {code}; its output is above",
                file=sys.stderr,
            )
            return code
    state = read_state(work)
    if not state:
        print(
            f"error: no mutmut state in {work}; run without --summary-only first", file=sys.stderr
        )
        return 1
    info = RunInfo(
        date=datetime.now(UTC).strftime("%Y-%m-%d"),
        commit=at,
        machine=machine(),
        command=f"nice -n 10 {command}",
        duration=f"{seconds / 60:.0f} min (this invocation)" if seconds else "(summary only)",
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"{name}.md"
    out.write_text(summary(name, scores(state), info), "utf-8")
    print(f"{name}: {out.relative_to(ROOT)}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("methods", nargs="+", metavar="METHOD", help=", ".join(METHODS))
    parser.add_argument("--rerun-survivors", action="store_true", help="test the survivors again")
    parser.add_argument(
        "--summary-only", action="store_true", help="rewrite the summary from mutmut's state"
    )
    parser.add_argument(
        "--max-children", type=int, help="parallel mutants (mutmut's default: the CPU count)"
    )
    args = parser.parse_args(argv)
    unknown = [m for m in args.methods if m not in METHODS]
    if unknown:
        parser.error(f"unknown method {', '.join(unknown)}; choose from {', '.join(METHODS)}")
    for name in args.methods:
        code = run(
            name,
            rerun_survivors=args.rerun_survivors,
            summary_only=args.summary_only,
            max_children=args.max_children,
        )
        if code:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
