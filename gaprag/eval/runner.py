"""Run several methods over the same questions, with the same store and model.

Writes into ``out``:

* ``results.jsonl``: one line per (method, question), appended as each finishes (DESIGN §8);
* ``traces/METHOD/ID.json``: queries, retrievals, evidence, every LLM prompt and reply, the
  graph's decision trace, and the error with its traceback if the question failed;
* ``run.json``: the protocol (dataset file hash, corpus, model, methods and their options);
* ``summary.json``, ``summary.md`` and plots (see :mod:`gaprag.eval.report`).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import traceback
import warnings
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel

from gaprag.errors import GapragError, InputError
from gaprag.eval.datasets import Dataset, Example, dataset_store, load_dataset
from gaprag.eval.metrics import (
    accuracy,
    choose_option,
    exact_match,
    f1_score,
    gold_option,
    support_recall,
)
from gaprag.eval.trace import LLMCallRecorder, current_retrievals, recording, safe_name
from gaprag.llm.client import LLM
from gaprag.stores.embeddings import Embedder

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
    "llm_calls",
    "prompt_tokens",
    "completion_tokens",
    "retrieval_calls",
    "iterations",
    "stop_reason",
    "wall_s",
    "error",
)
RESULTS = "results.jsonl"
RUN_FILE = "run.json"
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


class ResultsWriter:
    """Append-only JSONL; one complete line per row, flushed at once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if path.is_file() and path.stat().st_size:
            with path.open("rb") as fh:
                fh.seek(-1, os.SEEK_END)
                torn = fh.read(1) != b"\n"
            if torn:  # an interrupted line: start ours on a fresh one
                with path.open("a", encoding="utf-8") as fh:
                    fh.write("\n")
        self._fh = path.open("a", encoding="utf-8")

    def write(self, row: Mapping[str, Any]) -> None:
        self._fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


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


def seen_ids(output: Mapping[str, Any], retrievals: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every paragraph id the run saw: its evidence, every retrieval result, ids in its trace."""
    seen: dict[str, None] = {}
    for ev in output.get("evidence") or []:
        if isinstance(ev, dict) and isinstance(ev.get("id"), str):
            seen[ev["id"]] = None
    for hit in retrievals:
        for i in hit.get("ids", []):
            seen[i] = None
    for entry in output.get("trace") or []:
        if isinstance(entry, dict):
            for key in _ID_KEYS:
                for i in _ids_in(entry.get(key)):
                    seen[i] = None
    return list(seen)


def score(example: Example, prediction: str, seen: Iterable[str]) -> dict[str, Any]:
    """The metric fields of a row (plus ``choice``/``choice_correct`` for multiple choice).

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
        "support_recall": support_recall(example.supporting, seen),
        **extra,
    }


# -- options and resume --------------------------------------------------------------------
def method_options(
    methods: Sequence[str], sets: Sequence[str], options: Mapping[str, Mapping[str, Any]] | None
) -> dict[str, dict[str, Any]]:
    """Per-method options from ``--set`` pairs and the Python ``options`` mapping."""
    from gaprag.graphs import METHODS, context_class
    from gaprag.options import options_for, parse_sets

    parsed = parse_sets(sets)
    for scope in parsed:
        if scope != "*" and scope not in METHODS:
            raise InputError(
                f"--set names an unknown method {scope!r}",
                hint="use METHOD.option=value with one of: " + ", ".join(METHODS),
            )
    for key in parsed.get("*", {}):
        import dataclasses

        if not any(key in {f.name for f in dataclasses.fields(context_class(m))} for m in methods):
            raise InputError(
                f"no method in this run has an option {key!r}",
                hint="check the spelling; method options are listed by `gaprag ask --help`",
            )
    result: dict[str, dict[str, Any]] = {}
    for m in methods:
        merged = options_for(m, parsed)
        merged.update((options or {}).get(m, {}))
        result[m] = merged
    return result


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
    for method, opts in info["methods"].items():
        before = old.get("methods", {}).get(method)
        if before is not None and before != json.loads(json.dumps(opts, default=str)):
            raise InputError(
                f"options for {method} differ from the run being resumed ({before} vs {opts})",
                hint="resume with the same --set values, or use a new --out directory",
            )
    merged = dict(old)
    merged.update({k: v for k, v in info.items() if k != "methods"})
    merged["methods"] = {**old.get("methods", {}), **info["methods"]}
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


async def _run_one(
    graph: Any,
    method: str,
    dataset: Dataset,
    example: Example,
    options: Mapping[str, Any],
    traces: Path,
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
    seen = seen_ids(output, log)
    usage = output.get("usage") or {}
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
        # after a failure the graph's usage is lost: count what the recorders saw
        "llm_calls": int(usage.get("llm_calls", len(recorder.calls))),
        "prompt_tokens": int(
            usage.get("prompt_tokens", sum(c.get("prompt_tokens", 0) for c in recorder.calls))
        ),
        "completion_tokens": int(
            usage.get(
                "completion_tokens", sum(c.get("completion_tokens", 0) for c in recorder.calls)
            )
        ),
        "retrieval_calls": int(usage.get("retrieval_calls", len(log))),
        "iterations": int(output.get("iterations") or 0),
        "stop_reason": str(output.get("stop_reason") or ("error" if error else "")),
        "wall_s": round(wall, 4),
        "error": error,
    }
    if error is None:
        row.update(score(example, prediction, seen))
    elif example.options:
        row.update(choice=None, choice_correct=None)
    row["type"] = example.type
    row["evidence_ids"] = [
        ev["id"] for ev in output.get("evidence") or [] if isinstance(ev, dict) and "id" in ev
    ]
    if "missing" in output:
        row["missing"] = output["missing"]
    row["options"] = dict(options)

    standard = {"answer", "stop_reason", "iterations", "queries", "evidence", "usage", "trace"}
    trace = {
        "dataset": dataset.name,
        "id": example.id,
        "method": method,
        "options": dict(options),
        "input": example.prompt(),
        "answers": example.answers,
        "supporting": example.supporting,
        "prediction": prediction,
        "metrics": {
            k: row.get(k)
            for k in ("em", "f1", "acc", "support_recall", "choice", "choice_correct")
            if k in row
        },
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
        "seen_ids": seen,
        "llm_calls": recorder.calls,
        "trace": list(output.get("trace") or []),
        "extra": {k: v for k, v in output.items() if k not in standard},
        "error": error,
        "traceback": tb or None,
    }
    _write_json(traces / safe_name(method) / f"{safe_name(example.id)}.json", trace)
    return row


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
    from gaprag.graphs import METHODS, build_graph

    names = [m.strip() for m in methods.split(",")] if isinstance(methods, str) else list(methods)
    names = [m for m in dict.fromkeys(names) if m]
    if not names:
        raise InputError("no methods given", hint="e.g. --methods standard_rag,migres")
    for m in names:
        if m not in METHODS:
            raise InputError(f"unknown method {m!r}", hint="choose from: " + ", ".join(METHODS))
    if concurrency < 1:
        raise InputError("--concurrency must be >= 1", hint="e.g. --concurrency 4")
    ds = dataset if isinstance(dataset, Dataset) else load_dataset(dataset)
    selected = ds.select(limit, offset)
    if not selected:
        raise InputError(
            f"no questions selected from {ds.name} ({len(ds)} in the file)",
            hint="check --limit and --offset",
        )
    opts = method_options(names, sets, options)
    if llm is None and not base_url and not any(o.get("base_url") for o in opts.values()):
        # Fail before indexing and before any question when the default LLM cannot start (its
        # weights are not installed, no engine): every question would fail the same way.
        from gaprag.llm.factory import default_llm

        default_llm()

    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    results_path = out_dir / RESULTS
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
    chat: LLM | BaseChatModel | None = llm
    if chat is None and base_url:
        from gaprag.llm.factory import openai_llm

        chat = openai_llm(base_url, model)

    manifest = getattr(store, "manifest", {}) or {}
    info: dict[str, Any] = {
        "dataset": ds.name,
        "dataset_path": str(ds.path),
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
            "store": str(getattr(store, "root", "")),
        },
        "model": _model_label(chat, base_url, model),
        "methods": json.loads(json.dumps(opts, default=str)),
        "concurrency": concurrency,
        "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    run_file = out_dir / RUN_FILE
    if resume and run_file.is_file():
        info = _check_resume(run_file, info)
    _write_json(run_file, info)

    done = {(r.get("method"), r.get("id")) for r in previous if not r.get("error")}
    jobs = [(m, ex) for ex in selected for m in names if (m, ex.id) not in done]
    graphs = {m: build_graph(m, llm=chat, retriever=retriever, **opts[m]) for m in names}

    means = _Means(names)
    wanted = {ex.id for ex in selected}
    for r in previous:
        if r.get("method") in names and r.get("id") in wanted and not r.get("error"):
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
                graphs[method], method, ds, example, opts[method], out_dir / "traces"
            )
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
        "skipped": len(selected) * len(names) - len(jobs),
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
    same as ``--set`` strings. ``llm``: a chat model (default: ``base_url``/``model``, else
    the configured endpoint or the embedded server). ``store``: a prebuilt store, a store
    directory, or any retriever (default: the dataset's paragraph union, built once under
    ``GAPRAG_HOME`` with ``embedder``). ``resume``: skip (method, id) pairs already answered
    in ``out/results.jsonl``. Raises :class:`TooManyErrors` after ``max_errors`` failures
    (``0``: no cap); rows written so far are kept.
    """
    kwargs = dict(
        methods=methods, dataset=dataset, limit=limit, offset=offset, out=out,
        concurrency=concurrency, resume=resume, max_errors=max_errors, sets=sets,
        options=options, llm=llm, base_url=base_url, model=model, store=store,
        embedder=embedder, progress=progress, report=report, seed=seed,
    )  # fmt: skip

    async def main() -> dict[str, Any]:
        # sync graph nodes run in the loop's default executor: size it to the concurrency
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(max_workers=max(4, concurrency) + 2))
        return await aevaluate(**kwargs)

    return asyncio.run(main())
