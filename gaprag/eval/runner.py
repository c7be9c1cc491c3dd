"""Run several methods over the same questions, with the same store and model.

Writes into ``out``:

* ``results.jsonl``: one line per (method, question), appended as each finishes (DESIGN §8);
  each line is written with one ``write`` call and a torn tail left by a killed run is cut off
  (with a warning) when the directory is opened again, so that question is run again;
* ``traces/METHOD/ID.json``: queries, retrievals, passages shown, decisions, every LLM prompt
  and reply, the graph's decision trace, and the error with its traceback if the question failed;
* ``run.json``: the protocol (dataset file hash, corpus, model, serving settings, methods and
  variants with their options and resolved settings);
* ``summary.json``, ``summary.md``, plots and ``report.html`` (see :mod:`gaprag.eval.report`).

A directory is written by one ``gaprag eval`` at a time: a second one is refused (a lock file,
``.gaprag-eval.lock``, released by the operating system even when a run is killed).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import os
import re
import sys
import time
import traceback
import warnings
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel

from gaprag.context import setting_sources
from gaprag.datasets import Dataset, Example, dataset_store, load_dataset
from gaprag.errors import GapragError, InputError
from gaprag.eval.trace import LLMCallRecorder, current_retrievals, recording
from gaprag.llm.client import LLM
from gaprag.metrics import (
    accuracy,
    choose_option,
    exact_match,
    f1_score,
    gold_option,
    support_recall,
)
from gaprag.nodes.short_answer import CALL_PATHS as SHORT_ANSWER_CALL_PATHS
from gaprag.stores.embeddings import Embedder
from gaprag.traces import safe_name

RESULT_FIELDS: tuple[str, ...] = (
    "dataset",
    "id",
    "method",
    "question",
    "answers",
    "prediction",
    "em",
    "f1",
    "acc",
    "support_recall",
    "retrieval_recall",
    "llm_calls",
    "prompt_tokens",
    "completion_tokens",
    "retrieval_calls",
    "iterations",
    "stop_reason",
    "wall_s",
    "error",
    "base_method",
    "decisions",
    "shown_ids",
    "retrieved_ids",
    "cached_tokens",
    "instruction_tokens",
    "passage_tokens",
)
RESULTS = "results.jsonl"
RUN_FILE = "run.json"
LOCK_FILE = ".gaprag-eval.lock"
_ID_KEYS = ("id", "ids", "doc_id", "doc_ids", "evidence_ids")


class TooManyErrors(GapragError):
    """The error cap was reached, or every question of the run failed; finished rows are kept."""


# -- results file --------------------------------------------------------------------------
def read_results(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a ``results.jsonl`` (a directory or the file); incomplete lines are skipped."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS
    if not path.is_file():
        return []
    rows: list[dict[str, Any]] = []
    torn = 0
    for line in path.read_text(encoding="utf-8").split("\n"):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            torn += 1  # a line cut short when a run was killed mid-write
            continue
        if isinstance(row, dict):
            rows.append(row)
    if torn:
        warnings.warn(f"{path}: skipped {torn} incomplete line(s)", stacklevel=2)
    return rows


def _cut_torn_tail(path: Path) -> None:
    """Drop an incomplete last line (a run killed while writing it), with a warning."""
    if not path.is_file():
        return
    size = path.stat().st_size
    if not size:
        return
    with path.open("rb+") as fh:
        # the last line: scan back from the end in bounded steps for the newline before it
        end = size
        fh.seek(size - 1)
        complete = fh.read(1) == b"\n"
        if complete:
            end = size - 1  # look at the last line proper
        start, step = end, 1 << 16
        while start > 0:
            start = max(0, start - step)
            fh.seek(start)
            chunk = fh.read(end - start)
            cut = chunk.rfind(b"\n")
            if cut >= 0:
                start += cut + 1
                break
        fh.seek(start)
        last = fh.read(end - start)
        if complete:
            try:
                json.loads(last.decode("utf-8"))
                return
            except (UnicodeDecodeError, ValueError):
                pass  # a torn line followed by a newline (written by older versions)
        fh.truncate(start)
    warnings.warn(
        f"{path}: dropped an incomplete last line (a run was killed while writing it); "
        "that question runs again",
        stacklevel=3,
    )


class ResultsWriter:
    """Append-only JSONL: each row is one complete line, written by one ``write`` call.

    Opening cuts a torn last line left by a killed run (so the file holds only complete rows).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        _cut_torn_tail(path)
        self._fd = self._open()

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _follow_the_path(self) -> None:
        """Reopen when the file at ``path`` is no longer the one open here (replaced by a git
        checkout or stash, a sync, an editor): rows written to the old file would be lost."""
        mine = os.fstat(self._fd)
        try:
            there = os.stat(self.path)
        except FileNotFoundError:
            there = None
        if there is not None and (there.st_dev, there.st_ino) == (mine.st_dev, mine.st_ino):
            return
        warnings.warn(
            f"{self.path} was replaced or removed during the run; rows go on to the file now "
            "at that path",
            stacklevel=3,
        )
        os.close(self._fd)
        self._fd = self._open()

    def write(self, row: Mapping[str, Any]) -> None:
        self._follow_the_path()
        data = (json.dumps(row, ensure_ascii=False, default=str) + "\n").encode("utf-8")
        view = memoryview(data)
        for _ in range(1000):  # a short write is continued; bounded
            if not view:
                break
            done = os.write(self._fd, view)
            view = view[done:]

    def close(self) -> None:
        os.close(self._fd)


class RunLock:
    """Exclusive use of an output directory by one process (``.gaprag-eval.lock``)."""

    def __init__(self, out_dir: Path) -> None:
        from filelock import FileLock, Timeout

        self.path = out_dir / LOCK_FILE
        self._lock = FileLock(str(self.path))
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            raise InputError(
                f"{out_dir} is being written by another `gaprag eval` (lock {self.path.name})",
                hint="wait for that run to finish, or use another --out directory",
            ) from None

    def release(self) -> None:
        self._lock.release()


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, ensure_ascii=False, indent=2, default=str), encoding="utf-8")
    os.replace(tmp, path)


# -- scoring -------------------------------------------------------------------------------
def _ids_in(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list | tuple):
        for v in value:
            if isinstance(v, str):
                yield v
            elif isinstance(v, dict) and isinstance(v.get("id"), str):
                yield v["id"]


def _id_list(value: Any) -> list[str] | None:
    """A graph output's id list (``shown_ids``/``retrieved_ids``), or None when absent."""
    if not isinstance(value, list | tuple):
        return None
    return list(dict.fromkeys(_ids_in(value)))


def shown_ids(output: Mapping[str, Any]) -> list[str] | None:
    """The passage ids rendered into at least one LLM prompt, as the graph recorded them.

    ``None`` when the graph does not report them (support recall is then left empty rather
    than guessed from text).
    """
    return _id_list(output.get("shown_ids"))


def retrieved_ids(output: Mapping[str, Any], retrievals: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every passage id any retrieval of the question returned: the graph's ``retrieved_ids``
    plus every search result recorded at the store, in order, once each."""
    seen: dict[str, None] = dict.fromkeys(_id_list(output.get("retrieved_ids")) or [])
    for hit in retrievals:
        for i in hit.get("ids", []):
            seen[i] = None
    return list(seen)


def seen_ids(output: Mapping[str, Any], retrievals: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every paragraph id the run touched: retrievals, evidence, ids in its trace (for traces)."""
    seen: dict[str, None] = dict.fromkeys(retrieved_ids(output, retrievals))
    for i in shown_ids(output) or []:
        seen[i] = None
    for ev in output.get("evidence") or []:
        if isinstance(ev, dict) and isinstance(ev.get("id"), str):
            seen[ev["id"]] = None
    for entry in output.get("trace") or []:
        if isinstance(entry, dict):
            for key in _ID_KEYS:
                for i in _ids_in(entry.get(key)):
                    seen[i] = None
    return list(seen)


def score(
    example: Example,
    prediction: str,
    shown: Iterable[str] | None,
    retrieved: Iterable[str] = (),
) -> dict[str, Any]:
    """The metric fields of a row (plus ``choice``/``choice_correct`` for multiple choice).

    ``support_recall`` is the share of gold supporting paragraphs among ``shown`` (the ids
    rendered into a prompt; ``None`` when the graph did not report them);
    ``retrieval_recall`` the share among ``retrieved`` (any retrieval's results).
    For a multiple-choice question whose prediction names an option ("D", "D. Masson
    trichrome", "Masson trichrome stain"), EM/F1/Acc compare that option's text with the
    gold, so they agree with ``choice_correct``; a prediction naming no option is scored as is.
    """
    scored = prediction
    extra: dict[str, Any] = {}
    if example.options:
        gold = gold_option(example.options, example.answers, example.answer_idx)
        choice = choose_option(prediction, example.options)
        extra = {
            "choice": choice,
            "choice_correct": None if gold is None else float(choice == gold),
        }
        if choice is not None:
            scored = example.options[choice]
    return {
        "em": exact_match(scored, example.answers),
        "f1": round(f1_score(scored, example.answers), 6),
        "acc": accuracy(scored, example.answers),
        "support_recall": None if shown is None else support_recall(example.supporting, shown),
        "retrieval_recall": support_recall(example.supporting, retrieved),
        **extra,
    }


# -- options and resume --------------------------------------------------------------------
_VARIANT = re.compile(r"^([A-Za-z][A-Za-z0-9_-]*)=([A-Za-z_][A-Za-z0-9_]*)(?::(.*))?$")
_SECRET = re.compile(r"(api_?key|token|secret|password)$", re.IGNORECASE)

VariantSpecs = Sequence[str] | Mapping[str, tuple[str, Mapping[str, Any]]]


def parse_variant(spec: str) -> tuple[str, str, dict[str, str]]:
    """``"ik_hybrid=iterkey:top_k=5,retrieval_mode=hybrid"`` -> (name, method, raw settings).

    No shell quoting needed: names are letters, digits, ``_`` and ``-``; settings are
    comma-separated ``key=value`` pairs (a value cannot contain a comma).
    """
    match = _VARIANT.match(spec.strip())
    if not match:
        raise InputError(
            f"--variant expects NAME=METHOD:KEY=VALUE,KEY=VALUE, got {spec!r}",
            hint="e.g. --variant iterkey_hybrid=iterkey:top_k=5,retrieval_mode=hybrid",
        )
    name, method, rest = match.groups()
    settings: dict[str, str] = {}
    for pair in (rest or "").split(","):
        if not pair.strip():
            continue
        if "=" not in pair:
            raise InputError(
                f"--variant {name}: expected key=value, got {pair!r}",
                hint="e.g. --variant iterkey_hybrid=iterkey:top_k=5,retrieval_mode=hybrid",
            )
        key, value = pair.split("=", 1)
        settings[key.strip()] = value.strip()
    return name, method, settings


def plan_methods(
    names: Sequence[str],
    variants: VariantSpecs | None,
    sets: Sequence[str],
    options: Mapping[str, Mapping[str, Any]] | None,
) -> tuple[list[str], dict[str, str], dict[str, dict[str, Any]]]:
    """The run's method keys (methods and named variants), each key's method, and its options.

    Options, later ones winning: ``--set KEY=VALUE`` (every key whose method has the option),
    a variant's own settings, ``--set NAME.KEY=VALUE`` for that method or variant name, and
    the Python ``options`` mapping.
    """
    from gaprag.graphs import METHODS, context_class
    from gaprag.options import options_for, parse_sets

    base: dict[str, str] = {}
    raw: dict[str, dict[str, str]] = {}
    typed: dict[str, dict[str, Any]] = {}
    if isinstance(variants, Mapping):
        for name, (method, values) in variants.items():
            base[name], typed[name] = method, dict(values)
    else:
        for spec in variants or ():
            name, method, values = parse_variant(spec)
            if name in base:
                raise InputError(f"variant {name!r} is defined twice", hint="give each one name")
            base[name], raw[name] = method, values
    for name, method in base.items():
        if name in METHODS:
            raise InputError(
                f"variant name {name!r} is a method's name",
                hint=f"name the variant differently, e.g. {name}_v2",
            )
        if method not in METHODS:
            raise InputError(
                f"variant {name!r}: unknown method {method!r}",
                hint="choose from: " + ", ".join(METHODS),
            )
    keys = list(dict.fromkeys([*names, *base]))
    for key in keys:
        if key not in METHODS and key not in base:
            raise InputError(
                f"unknown method {key!r}",
                hint="choose from: " + ", ".join(METHODS) + " (or define it with --variant)",
            )
        base.setdefault(key, key)
    parsed = parse_sets(sets)
    for scope in parsed:
        if scope != "*" and scope not in base:
            raise InputError(
                f"--set names an unknown method {scope!r}",
                hint="use METHOD.option=value with one of: " + ", ".join(base),
            )
    for key in parsed.get("*", {}):
        if not any(
            key in {f.name for f in dataclasses.fields(context_class(m))} for m in base.values()
        ):
            raise InputError(
                f"no method in this run has an option {key!r}",
                hint="check the spelling; method options are listed by `gaprag ask --help`",
            )
    result: dict[str, dict[str, Any]] = {}
    for key in keys:
        method = base[key]
        # a variant's own settings, then --set NAME.KEY=VALUE for it (not its method's --set)
        scoped = {**raw.get(key, {}), **parsed.get(key, {})}
        merged = options_for(method, {"*": parsed.get("*", {}), method: scoped})
        merged.update(typed.get(key, {}))
        merged.update((options or {}).get(key, {}))
        result[key] = merged
    return keys, {k: base[k] for k in keys}, result


def method_options(
    methods: Sequence[str], sets: Sequence[str], options: Mapping[str, Mapping[str, Any]] | None
) -> dict[str, dict[str, Any]]:
    """Per-method options from ``--set`` pairs and the Python ``options`` mapping."""
    return plan_methods(methods, None, sets, options)[2]


def _public_settings(values: Mapping[str, Any]) -> dict[str, Any]:
    """Settings as run.json keeps them: JSON-safe, secrets (``api_key``, ``token``...) left out."""
    safe = {k: v for k, v in values.items() if not _SECRET.search(k)}
    return json.loads(json.dumps(safe, default=str))  # type: ignore[no-any-return]


def resolved_settings(method: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """Every setting a method runs with (its context: defaults plus ``options``), JSON-safe.

    Fields that look like secrets (``api_key``, ``token``, ...) are left out.
    """
    from gaprag.graphs import context_class

    try:
        ctx = context_class(method)(**options)
        values = {f.name: getattr(ctx, f.name) for f in dataclasses.fields(ctx)}
    except Exception:  # an old run's options may no longer fit the current schema
        values = dict(options)
    return _public_settings(values)


def _context_of(graph: Any) -> Any:
    return getattr(getattr(graph, "builder", None), "context_schema", None)


def _graph_settings(graph: Any, method: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """Every setting a built graph runs with (defaults, profile and explicit), JSON-safe."""
    from gaprag.context import effective_settings

    found = effective_settings(_context_of(graph))
    if not found:  # not a gaprag graph: its method's defaults and the options
        return resolved_settings(method, options)
    values = {k: v["value"] for k, v in found.items()}
    return _public_settings(values)


def _profile_info(
    llm: Any, keys: Sequence[str], bases: Mapping[str, str], opts: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The model profile the run's graphs use: model, source, and per method key the profile
    settings that apply (explicit options and, in calibration runs, the calibrated threshold,
    which such a run does not use, left out)."""
    from gaprag.graphs import calibration
    from gaprag.profiles import model_in_use, profile_for

    profile = profile_for(model_in_use(llm))
    if profile is None:
        return None
    settings: dict[str, Any] = {}
    for k in keys:
        mine = profile.settings(bases[k])
        declared = calibration(bases[k]) if opts[k].get("calibration") else None
        if declared is not None:
            mine.pop(declared.setting, None)
        mine = {name: v for name, v in mine.items() if name not in opts[k]}
        if mine:
            settings[k] = mine
    return {"model": profile.model, "source": profile.source, "settings": settings}


def portable_path(path: str | Path) -> str:
    """A path as run.json keeps it: relative to the package, to ``$GAPRAG_HOME`` or to the
    working directory where it lies under one of them, so committed results carry no machine
    paths; any other path as given."""
    if not path:
        return ""
    from gaprag.config import gaprag_home

    resolved = Path(path).resolve()
    for base, label in (
        (Path(__file__).resolve().parents[1], "gaprag"),
        (gaprag_home().resolve(), "$GAPRAG_HOME"),
        (Path.cwd().resolve(), "."),
    ):
        if resolved.is_relative_to(base):
            return f"{label}/{resolved.relative_to(base).as_posix()}"
    return str(path)


def _profiles_differ(old: Any, new: Any) -> bool:
    """Whether a resumed run would mix rows made under different profile settings: another
    model's profile, or other values for a method both runs have. ``old`` is False for runs
    from before profiles were recorded."""
    if old is False:
        return False
    if old is None or new is None:
        return bool(old != new)
    if old.get("model") != new.get("model"):
        return True
    before, now = old.get("settings") or {}, new.get("settings") or {}
    return any(before[k] != now.get(k, {}) for k in before if k in now)


def _check_resume(run_file: Path, info: dict[str, Any]) -> dict[str, Any]:
    """Refuse to mix results of another dataset file or other method options."""
    try:
        old = json.loads(run_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return info
    if old.get("dataset_sha256") and old["dataset_sha256"] != info["dataset_sha256"]:
        raise InputError(
            f"{run_file.parent} holds results for another version of dataset {old.get('dataset')!r}",
            hint="use a new --out directory for this dataset file",
        )
    for key, method in info.get("variants", {}).items():
        was = old.get("variants", {}).get(key)
        if was is not None and was != method:
            raise InputError(
                f"{key} was a variant of {was} in the run being resumed, now of {method}",
                hint="resume with the same --variant definitions, or use a new --out directory",
            )
    for method, opts in info["methods"].items():
        before = old.get("methods", {}).get(method)
        if before is not None and before != json.loads(json.dumps(opts, default=str)):
            raise InputError(
                f"options for {method} differ from the run being resumed ({before} vs {opts})",
                hint="resume with the same --set values, or use a new --out directory",
            )
    if _profiles_differ(old.get("profile", False), info.get("profile")):
        raise InputError(
            f"the model profile differs from the run being resumed in {run_file.parent}",
            hint="resume with the same profile (see run.json: profile), or use a new --out directory",
        )
    merged = dict(old)
    merged.update({k: v for k, v in info.items() if k != "methods"})
    for field in ("methods", "variants", "settings", "setting_sources"):
        merged[field] = {**old.get(field, {}), **info.get(field, {})}
    return merged


def _model_label(llm: Any, base_url: str | None, model: str | None) -> str:
    if llm is not None:
        chat = llm.chat if isinstance(llm, LLM) else llm
        name = getattr(chat, "model_name", None) or getattr(chat, "model", None)
        return f"{type(chat).__name__}:{name}" if name else type(chat).__name__
    if base_url:
        return f"{base_url} {model or ''}".strip()
    from gaprag import config

    url = config.base_url()
    if url:
        return f"{url} {config.model_name() or ''}".strip()
    return f"embedded:{config.local_model()}"


# -- running -------------------------------------------------------------------------------
class _Means:
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


_TRACE_METRICS = (
    "em", "f1", "acc", "support_recall", "retrieval_recall", "choice", "choice_correct"
)  # fmt: skip


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _decisions(output: Mapping[str, Any]) -> list[dict[str, Any]]:
    out = []
    for d in output.get("decisions") or []:
        if isinstance(d, Mapping):
            out.append(json.loads(json.dumps(dict(d), default=str)))
    return out


async def _run_one(
    graph: Any,
    method: str,
    dataset: Dataset,
    example: Example,
    options: Mapping[str, Any],
    traces: Path,
    *,
    base_method: str | None = None,
    titles: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    log: list[dict[str, Any]] = []
    current_retrievals.set(log)  # this task's own context; copied into node threads
    recorder = LLMCallRecorder()
    error: str | None = None
    tb = ""
    output: dict[str, Any] = {}
    start = time.perf_counter()
    try:
        result = await graph.ainvoke(
            {"question": example.prompt(), "dataset_id": example.id},
            config={"callbacks": [recorder], "run_name": f"{method}:{example.id}"},
        )
        output = dict(result) if isinstance(result, Mapping) else {"answer": str(result)}
    except Exception as exc:  # one failed question must not end the run
        error = f"{type(exc).__name__}: {exc}"
        tb = traceback.format_exc()
    wall = time.perf_counter() - start

    prediction = str(output.get("answer") or "")
    shown = shown_ids(output)
    retrieved = retrieved_ids(output, log)
    seen = seen_ids(output, log)
    decisions = _decisions(output)
    usage = output.get("usage") or {}
    calls = recorder.calls

    def counted(key: str, fallback: int) -> int:
        # after a failure the graph's usage is lost: count what the recorders saw
        return int(usage.get(key, fallback))

    row: dict[str, Any] = {
        "dataset": dataset.name,
        "id": example.id,
        "method": method,
        "question": example.question,
        "answers": example.answers,
        "prediction": prediction,
        "em": None,
        "f1": None,
        "acc": None,
        "support_recall": None,
        "retrieval_recall": None,
        "llm_calls": counted("llm_calls", len(calls)),
        "prompt_tokens": counted("prompt_tokens", sum(c.get("prompt_tokens", 0) for c in calls)),
        "completion_tokens": counted(
            "completion_tokens", sum(c.get("completion_tokens", 0) for c in calls)
        ),
        "retrieval_calls": counted("retrieval_calls", len(log)),
        "iterations": int(output.get("iterations") or 0),
        "stop_reason": str(output.get("stop_reason") or ("error" if error else "")),
        "wall_s": round(wall, 4),
        "error": error,
        "base_method": base_method or method,
        "decisions": decisions,
        "shown_ids": shown,
        "retrieved_ids": retrieved,
        "cached_tokens": _int_or_none(
            usage.get("cached_tokens", sum(c.get("cached_tokens", 0) for c in calls))
        ),
        "instruction_tokens": _int_or_none(usage.get("instruction_tokens")),
        "passage_tokens": _int_or_none(usage.get("passage_tokens")),
        # LLM calls the shared short-answer step added (already counted in llm_calls)
        "short_answer_calls": sum(
            1
            for t in output.get("trace") or []
            if isinstance(t, dict)
            and t.get("call") == "short_answer"
            and t.get("path") in SHORT_ANSWER_CALL_PATHS
        ),
    }
    if error is None:
        row.update(score(example, prediction, shown, retrieved))
    elif example.options:
        row.update(choice=None, choice_correct=None)
    row["type"] = example.type
    row["evidence_ids"] = [
        ev["id"] for ev in output.get("evidence") or [] if isinstance(ev, dict) and "id" in ev
    ]
    if "missing" in output:
        row["missing"] = output["missing"]
    row["options"] = dict(options)

    standard = {
        "answer", "stop_reason", "iterations", "queries", "evidence", "usage", "trace",
        "decisions", "shown_ids", "retrieved_ids",
    }  # fmt: skip
    touched = [*(shown or []), *retrieved, *example.supporting]
    trace = {
        "dataset": dataset.name,
        "id": example.id,
        "method": method,
        "base_method": base_method or method,
        "options": dict(options),
        "input": example.prompt(),
        "answers": example.answers,
        "supporting": example.supporting,
        "prediction": prediction,
        "metrics": {k: row.get(k) for k in _TRACE_METRICS if k in row},
        "stop_reason": row["stop_reason"],
        "iterations": row["iterations"],
        "usage": usage,
        "wall_s": row["wall_s"],
        "queries": list(output.get("queries") or []),
        "evidence": [
            {k: ev.get(k) for k in ("id", "title", "source", "score", "round")}
            for ev in output.get("evidence") or []
            if isinstance(ev, dict)
        ],
        "retrievals": log,
        "shown_ids": shown,
        "retrieved_ids": retrieved,
        "seen_ids": seen,
        "titles": {i: titles[i] for i in dict.fromkeys(touched) if titles and i in titles},
        "decisions": decisions,
        "llm_calls": calls,
        "trace": list(output.get("trace") or []),
        "extra": {k: v for k, v in output.items() if k not in standard},
        "error": error,
        "traceback": tb or None,
    }
    _write_json(traces / safe_name(method) / f"{safe_name(example.id)}.json", trace)
    return row


def _default_llm_repeatable() -> tuple[LLM, dict[str, Any]]:
    """The default LLM in its repeatable serving mode, and the serving settings to record.

    Uses ``gaprag.llm.factory.default_llm(repeatable=True)`` and ``serving_settings()`` where
    the installed gaprag has them; otherwise the plain default and a note saying so.
    """
    from gaprag import config
    from gaprag.llm import factory

    make: Any = factory.default_llm  # repeatable=True where the engine offers it
    repeatable = "repeatable" in inspect.signature(make).parameters
    llm: LLM = make(repeatable=True) if repeatable else make()
    describe = getattr(factory, "serving_settings", None)
    if describe is None:
        from gaprag.llm import server

        describe = getattr(server, "serving_settings", None)
    settings: dict[str, Any] = {}
    if callable(describe):
        try:
            wants = "repeatable" in inspect.signature(describe).parameters
            settings = dict(describe(repeatable=True) if wants and repeatable else describe())
        except Exception as exc:  # the description must never fail a run
            settings = {"error": f"{type(exc).__name__}: {exc}"}
    url = config.base_url()
    if url:
        settings.setdefault("endpoint", url)
        settings.setdefault("model", config.model_name())
    settings.setdefault("repeatable", repeatable)
    if not repeatable:
        settings.setdefault(
            "note", "this gaprag has no repeatable serving mode (default_llm(repeatable=True))"
        )
    settings.setdefault("temperature", getattr(llm.chat, "temperature", None))
    return llm, json.loads(json.dumps(settings, default=str))


def _client_settings(chat: LLM | BaseChatModel) -> dict[str, Any]:
    inner = chat.chat if isinstance(chat, LLM) else chat
    info = {
        "client": type(inner).__name__,
        "endpoint": getattr(chat, "endpoint", None) or getattr(inner, "openai_api_base", None),
        "model": getattr(inner, "model_name", None) or getattr(inner, "model", None),
        "temperature": getattr(inner, "temperature", None),
        "seed": getattr(inner, "seed", None),
        "repeatable": "not controlled by gaprag (an endpoint or model you passed)",
    }
    return json.loads(json.dumps(info, default=str))  # type: ignore[no-any-return]


async def aevaluate(
    *,
    methods: str | Sequence[str],
    dataset: str | Path | Dataset,
    limit: int | None = None,
    offset: int = 0,
    out: str | Path = "gaprag-eval",
    concurrency: int = 1,
    resume: bool = False,
    max_errors: int = 10,
    sets: Sequence[str] = (),
    options: Mapping[str, Mapping[str, Any]] | None = None,
    variants: VariantSpecs | None = None,
    llm: LLM | BaseChatModel | None = None,
    base_url: str | None = None,
    model: str | None = None,
    store: Any = None,
    embedder: Embedder | None = None,
    progress: bool = True,
    report: bool = True,
    seed: int = 0,
) -> dict[str, Any]:
    """Evaluate ``methods`` on the first ``limit`` questions of ``dataset``; see :func:`evaluate`."""
    from gaprag.graphs import build_graph

    names = [m.strip() for m in methods.split(",")] if isinstance(methods, str) else list(methods)
    names = [m for m in dict.fromkeys(names) if m]
    if not names and not variants:
        raise InputError("no methods given", hint="e.g. --methods standard_rag,migres")
    if concurrency < 1:
        raise InputError("--concurrency must be >= 1", hint="e.g. --concurrency 4")
    keys, bases, opts = plan_methods(names, variants, sets, options)
    ds = dataset if isinstance(dataset, Dataset) else load_dataset(dataset)
    selected = ds.select(limit, offset)
    if not selected:
        raise InputError(
            f"no questions selected from {ds.name} ({len(ds)} in the file)",
            hint="check --limit and --offset",
        )
    if limit is not None and len(selected) < limit:  # a documented truncation, also in run.json
        print(
            f"gaprag: --limit {limit} but {ds.name} has {len(selected)} question(s) from offset "
            f"{offset}: evaluating those {len(selected)} (run.json: limit, selected)",
            file=sys.stderr,
        )
    chat: LLM | BaseChatModel | None = llm
    label = _model_label(llm, base_url, model)
    serving: dict[str, Any]
    if chat is None and base_url:
        from gaprag.llm.factory import openai_llm

        chat = openai_llm(base_url, model)
    if chat is None and not any(o.get("base_url") for o in opts.values()):
        # The default LLM, served repeatably. Started before indexing and before any question,
        # so a default LLM that cannot start (weights not installed, no engine) fails at once.
        chat, serving = _default_llm_repeatable()
    elif chat is None:
        serving = {"endpoints": {k: o.get("base_url") for k, o in opts.items()}}
    else:
        serving = _client_settings(chat)

    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    lock = RunLock(out_dir)
    try:
        return await _evaluate_locked(
            keys=keys, bases=bases, opts=opts, ds=ds, selected=selected, limit=limit,
            offset=offset, out_dir=out_dir, concurrency=concurrency, resume=resume,
            max_errors=max_errors, chat=chat, serving=serving, label=label, store=store, embedder=embedder, progress=progress, report=report, seed=seed,
            build_graph=build_graph,
        )  # fmt: skip
    finally:
        lock.release()


async def _evaluate_locked(
    *,
    keys: list[str],
    bases: dict[str, str],
    opts: dict[str, dict[str, Any]],
    ds: Dataset,
    selected: list[Example],
    limit: int | None,
    offset: int,
    out_dir: Path,
    concurrency: int,
    resume: bool,
    max_errors: int,
    chat: LLM | BaseChatModel | None,
    serving: dict[str, Any],
    label: str,
    store: Any,
    embedder: Embedder | None,
    progress: bool,
    report: bool,
    seed: int,
    build_graph: Any,
) -> dict[str, Any]:
    results_path = out_dir / RESULTS
    if resume:
        _cut_torn_tail(results_path)
    previous = read_results(results_path)
    if previous and not resume:
        raise InputError(
            f"{results_path} already has {len(previous)} rows",
            hint="pass --resume to continue that run, or choose another --out directory",
        )
    if any(r.get("dataset") not in (None, ds.name) for r in previous):
        raise InputError(
            f"{out_dir} holds results of another dataset",
            hint="use one --out directory per dataset",
        )

    if store is None:
        store = dataset_store(ds, embedder=embedder, progress=progress)
    elif isinstance(store, str | Path):
        from gaprag.stores.store import Store

        store = Store.open(store, embedder=embedder)
    retriever = recording(store)

    graphs = {m: build_graph(bases[m], llm=chat, retriever=retriever, **opts[m]) for m in keys}
    manifest = getattr(store, "manifest", {}) or {}
    info: dict[str, Any] = {
        "dataset": ds.name,
        "dataset_path": portable_path(ds.path),
        "dataset_sha256": ds.sha256,
        "questions_in_file": len(ds),
        "limit": limit,
        "offset": offset,
        "selected": len(selected),
        "corpus": {
            "documents": manifest.get("count"),
            "corpus_hash": manifest.get("corpus_hash"),
            "embedder": manifest.get("embedder"),
            "bm25": manifest.get("bm25_engine"),
            "store": portable_path(getattr(store, "root", "")),
        },
        "model": label,
        "serving": serving,
        "methods": json.loads(json.dumps(opts, default=str)),
        "variants": {k: m for k, m in bases.items() if k != m},
        "settings": {k: _graph_settings(graphs[k], bases[k], opts[k]) for k in keys},
        "setting_sources": {k: setting_sources(_context_of(graphs[k])) for k in keys},
        "profile": _profile_info(chat, keys, bases, opts),
        "concurrency": concurrency,
        "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    run_file = out_dir / RUN_FILE
    if resume and run_file.is_file():
        info = _check_resume(run_file, info)
    _write_json(run_file, info)

    done = {(r.get("method"), r.get("id")) for r in previous if not r.get("error")}
    jobs = [(m, ex) for ex in selected for m in keys if (m, ex.id) not in done]
    titles = {d["id"]: d.get("title", "") for d in ds.documents()}

    means = _Means(keys)
    wanted = {ex.id for ex in selected}
    for r in previous:
        if r.get("method") in keys and r.get("id") in wanted and not r.get("error"):
            means.add(r)
    from tqdm import tqdm

    bar = tqdm(
        total=len(jobs),
        desc=f"eval {ds.name}",
        unit="run",
        disable=not progress,
        file=sys.stderr,
        dynamic_ncols=True,
    )
    writer = ResultsWriter(results_path)
    sem = asyncio.Semaphore(concurrency)
    errors: list[str] = []
    stop = asyncio.Event()
    new_rows: list[dict[str, Any]] = []

    async def job(method: str, example: Example) -> None:
        async with sem:
            if stop.is_set():
                return
            row = await _run_one(
                graphs[method], method, ds, example, opts[method], out_dir / "traces",
                base_method=bases[method], titles=titles,
            )  # fmt: skip
            writer.write(row)
            new_rows.append(row)
            means.add(row)
            if row["error"]:
                errors.append(f"{method} on {example.id}: {row['error']}")
                if max_errors > 0 and len(errors) >= max_errors:
                    stop.set()
            bar.update(1)
            bar.set_postfix_str(means.text(), refresh=False)

    try:
        await asyncio.gather(*(job(m, ex) for m, ex in jobs))
    finally:
        writer.close()
        bar.close()

    summary: dict[str, Any] = {}
    if report:
        from gaprag.eval.report import write_report

        summary = write_report([out_dir], out_dir, seed=seed)
    summary = {
        **summary,
        "out": str(out_dir),
        "new_rows": len(new_rows),
        "skipped": len(selected) * len(keys) - len(jobs),
        "errors": len(errors),
    }
    if stop.is_set() or (new_rows and len(errors) == len(new_rows)):
        what = (
            f"stopped after {len(errors)} failed questions (--max-errors {max_errors})"
            if stop.is_set()
            else f"all {len(errors)} questions of this run failed"
        )
        raise TooManyErrors(
            f"{what}; last: {errors[-1]}",
            hint=f"see the 'error' field in {results_path} and traces/; fix the cause and "
            "rerun with --resume (failed questions are retried)",
        )
    return summary


def evaluate(
    *,
    methods: str | Sequence[str],
    dataset: str | Path | Dataset,
    limit: int | None = None,
    offset: int = 0,
    out: str | Path = "gaprag-eval",
    concurrency: int = 1,
    resume: bool = False,
    max_errors: int = 10,
    sets: Sequence[str] = (),
    options: Mapping[str, Mapping[str, Any]] | None = None,
    variants: VariantSpecs | None = None,
    llm: LLM | BaseChatModel | None = None,
    base_url: str | None = None,
    model: str | None = None,
    store: Any = None,
    embedder: Embedder | None = None,
    progress: bool = True,
    report: bool = True,
    seed: int = 0,
) -> dict[str, Any]:
    """Compare ``methods`` on the same questions, store and model; returns the summary.

    ``dataset``: a bundled name (``hotpotqa``), a JSONL path, or a :class:`Dataset`.
    ``limit``/``offset``: the first ``limit`` questions in file order from ``offset``.
    ``options``: per-method settings, ``{"migres": {"max_iterations": 3}}``; ``sets``: the
    same as ``--set`` strings. ``variants``: named variants of a method, each its own method
    key in the results: ``["ik_hybrid=iterkey:top_k=5,retrieval_mode=hybrid"]`` (the
    ``--variant`` syntax) or ``{"ik_hybrid": ("iterkey", {"top_k": 5})}``. ``llm``: a chat
    model (default: ``base_url``/``model``, else the configured endpoint or the embedded
    server, started in its repeatable serving mode). ``store``: a prebuilt store, a store
    directory, or any retriever (default: the dataset's paragraph union, built once under
    ``GAPRAG_HOME`` with ``embedder``). ``resume``: skip (method, id) pairs already answered
    in ``out/results.jsonl``. Raises :class:`TooManyErrors` after ``max_errors`` failures
    (``0``: no cap); rows written so far are kept.
    """
    kwargs = dict(
        methods=methods, dataset=dataset, limit=limit, offset=offset, out=out,
        concurrency=concurrency, resume=resume, max_errors=max_errors, sets=sets,
        options=options, variants=variants, llm=llm, base_url=base_url, model=model, store=store,
        embedder=embedder, progress=progress, report=report, seed=seed,
    )  # fmt: skip

    async def main() -> dict[str, Any]:
        # sync graph nodes run in the loop's default executor: size it to the concurrency
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(max_workers=max(4, concurrency) + 2))
        return await aevaluate(**kwargs)

    return asyncio.run(main())
