"""Run several methods over the same questions, with the same store and model.

Writes into ``out``:

* ``results.jsonl``: one row per (method, question), appended as each finishes
  (:mod:`gaprag.eval.results`: the row schema, resume after a kill, the directory lock);
* ``traces/METHOD.jsonl.xz``: per question, queries, retrievals, passages shown, decisions,
  every LLM prompt and reply, the graph's decision trace, and the error with its traceback if
  the question failed (:mod:`gaprag.traces`);
* ``run.json``: the protocol (:mod:`gaprag.eval.record`);
* ``summary.json``, ``summary.md``, plots and ``report.html`` (see :mod:`gaprag.eval.report`).

The options are one :class:`EvalSettings` (:mod:`gaprag.eval.settings`); :func:`plan_run`
checks them and plans one :class:`Run`; :func:`run_questions` prepares the output directory
and hands the (method, question) jobs to the executor (:mod:`gaprag.eval.executor`, at most
``concurrency`` questions at a time), each question run by :func:`run_one`
(:mod:`gaprag.eval.question`). :func:`evaluate` is the synchronous wrapper of
:func:`aevaluate`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel

from gaprag.context import setting_sources
from gaprag.datasets import Dataset, Example, dataset_store, load_dataset
from gaprag.errors import GapragError, InputError
from gaprag.eval.executor import Executed, Means, execute
from gaprag.eval.planning import (
    context_of,
    graph_settings,
    plan_methods,
    profile_info,
)
from gaprag.eval.question import run_one
from gaprag.eval.record import RUN_FILE, check_resume, code_version, model_label, portable_path
from gaprag.eval.report import write_report
from gaprag.eval.results import (
    FORMAT_VERSION,
    RESULTS,
    RunLock,
    cut_torn_tail,
    read_results,
    write_json,
)
from gaprag.eval.serving import run_model
from gaprag.eval.settings import EvalSettings, settings_of
from gaprag.llm.client import LLM
from gaprag.llm.memo import SharedReplies
from gaprag.traces import TraceWriter


class TooManyErrors(GapragError):
    """The error cap was reached, or every question of the run failed; finished rows are kept."""


@dataclasses.dataclass
class Run:
    """One evaluation, planned once from its settings: the method keys with their methods and
    options, the dataset and its selected questions, and the model with its serving."""

    settings: EvalSettings
    keys: list[str]
    bases: dict[str, str]
    opts: dict[str, dict[str, Any]]
    dataset: Dataset
    selected: list[Example]
    chat: LLM | BaseChatModel | None = None
    serving: dict[str, Any] = dataclasses.field(default_factory=dict)
    label: str = ""

    @property
    def out_dir(self) -> Path:
        return Path(self.settings.out)


def _method_names(methods: str | Sequence[str]) -> list[str]:
    names = [m.strip() for m in methods.split(",")] if isinstance(methods, str) else list(methods)
    return [m for m in dict.fromkeys(names) if m]


def plan_run(settings: EvalSettings) -> Run:
    """Check ``settings``, select the questions and start the model."""
    s = settings
    names = _method_names(s.methods)
    if not names and not s.variants:
        raise InputError("no methods given", hint="e.g. --methods standard_rag,migres")
    if s.concurrency < 1:
        raise InputError("--concurrency must be >= 1", hint="e.g. --concurrency 4")
    keys, bases, opts = plan_methods(names, s.variants, s.sets, s.options)
    ds = s.dataset if isinstance(s.dataset, Dataset) else load_dataset(s.dataset)
    selected = ds.select(s.limit, s.offset)
    if not selected:
        raise InputError(
            f"no questions selected from {ds.name} ({len(ds)} in the file)",
            hint="check --limit and --offset",
        )
    if s.limit is not None and len(selected) < s.limit:  # a documented truncation, in run.json
        print(
            f"gaprag: --limit {s.limit} but {ds.name} has {len(selected)} question(s) from "
            f"offset {s.offset}: evaluating those {len(selected)} (run.json: limit, selected)",
            file=sys.stderr,
        )
    label = model_label(s.llm, s.base_url, s.model)
    chat, serving = run_model(s.llm, s.base_url, s.model, opts)
    return Run(s, keys, bases, opts, ds, selected, chat=chat, serving=serving, label=label)


def _open_store(run: Run) -> Any:
    store, embedder = run.settings.store, run.settings.embedder
    if store is None:
        return dataset_store(run.dataset, embedder=embedder, progress=run.settings.progress)
    if isinstance(store, str | Path):
        from gaprag.stores.store import Store

        return Store.open(store, embedder=embedder)
    return store


def _run_info(run: Run, graphs: Mapping[str, Any], store: Any) -> dict[str, Any]:
    """What ``run.json`` records of this run."""
    ds = run.dataset
    manifest = getattr(store, "manifest", {}) or {}
    code = code_version()
    return {
        "dataset": ds.name,
        "dataset_path": portable_path(ds.path),
        "dataset_sha256": ds.sha256,
        "questions_in_file": len(ds),
        "limit": run.settings.limit,
        "offset": run.settings.offset,
        "selected": len(run.selected),
        "corpus": {
            "documents": manifest.get("count"),
            "corpus_hash": manifest.get("corpus_hash"),
            "embedder": manifest.get("embedder"),
            "bm25": manifest.get("bm25_engine"),
            "store": portable_path(getattr(store, "root", "")),
        },
        "model": run.label,
        "serving": run.serving,
        "methods": json.loads(json.dumps(run.opts, default=str)),
        "variants": {k: m for k, m in run.bases.items() if k != m},
        "settings": {k: graph_settings(graphs[k], run.bases[k], run.opts[k]) for k in run.keys},
        "setting_sources": {k: setting_sources(context_of(graphs[k])) for k in run.keys},
        "profile": profile_info(run.chat, run.keys, run.bases, run.opts),
        "code": {k: [code] for k in run.keys},
        "concurrency": run.settings.concurrency,
        "results_format": FORMAT_VERSION,
        "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _previous_rows(run: Run) -> list[dict[str, Any]]:
    """The rows already in the output directory (a torn last line cut on resume); refused
    without ``resume``, or when they are of another dataset."""
    results_path = run.out_dir / RESULTS
    if run.settings.resume:
        cut_torn_tail(results_path)
    previous = read_results(results_path)
    if previous and not run.settings.resume:
        raise InputError(
            f"{results_path} already has {len(previous)} rows",
            hint="pass --resume to continue that run, or choose another --out directory",
        )
    if any(r.get("dataset") not in (None, run.dataset.name) for r in previous):
        raise InputError(
            f"{run.out_dir} holds results of another dataset",
            hint="use one --out directory per dataset",
        )
    return previous


def _build_graphs(run: Run) -> dict[str, Any]:
    """Each method key's graph over the run's store, and ``run.json`` written (checked against
    the earlier run's on resume)."""
    from gaprag.graphs import build_graph

    store = _open_store(run)
    graphs = {
        m: build_graph(run.bases[m], llm=run.chat, retriever=store, **run.opts[m]) for m in run.keys
    }
    info = _run_info(run, graphs, store)
    run_file = run.out_dir / RUN_FILE
    if run.settings.resume and run_file.is_file():
        info = check_resume(run_file, info)
    write_json(run_file, info)
    return graphs


def _shared_replies(run: Run) -> SharedReplies | None:
    """The run's replies shared across methods per question: ``reuse``, or by default on
    exactly when the serving is repeatable (the same request gets the same reply)."""
    on = run.settings.reuse
    if on is None:
        on = run.serving.get("repeatable") is True
    return SharedReplies() if on else None


def _record_reuse(run: Run, shared: SharedReplies | None) -> None:
    """Add the calls answered from the shared store and the seconds saved to ``run.json``
    (summed over resumed invocations)."""
    run_file = run.out_dir / RUN_FILE
    info = json.loads(run_file.read_text(encoding="utf-8")) if run_file.is_file() else {}
    before = info.get("reuse") or {}
    reused = shared.reused if shared is not None else 0
    saved = shared.seconds_saved if shared is not None else 0.0
    info["reuse"] = {
        "on": shared is not None,
        "reused_calls": int(before.get("reused_calls", 0)) + reused,
        "seconds_saved": round(float(before.get("seconds_saved", 0.0)) + saved, 3),
    }
    write_json(run_file, info)


def _means_so_far(run: Run, previous: list[dict[str, Any]]) -> Means:
    """The progress bar's means, starting from this run's successful earlier rows."""
    means = Means(run.keys)
    wanted = {ex.id for ex in run.selected}
    for r in previous:
        if r.get("method") in run.keys and r.get("id") in wanted and not r.get("error"):
            means.add(r)
    return means


def _check_errors(run: Run, done: Executed) -> None:
    """Raise :class:`TooManyErrors` when the error cap stopped the run or every question of
    the run failed."""
    errors = done.errors
    if done.stopped or (done.rows and len(errors) == len(done.rows)):
        what = (
            f"stopped after {len(errors)} failed questions (--max-errors {run.settings.max_errors})"
            if done.stopped
            else f"all {len(errors)} questions of this run failed"
        )
        raise TooManyErrors(
            f"{what}; last: {errors[-1]}",
            hint=f"see the 'error' field in {run.out_dir / RESULTS} and traces/; fix the cause "
            "and rerun with --resume (failed questions are retried)",
        )


async def run_questions(run: Run) -> dict[str, Any]:
    """Every (method, question) job of ``run`` not already answered, ``concurrency`` at a
    time; then the report. The output directory must be held (:class:`RunLock`)."""
    ds, out_dir, s = run.dataset, run.out_dir, run.settings
    previous = _previous_rows(run)
    graphs = _build_graphs(run)
    done = {(r.get("method"), r.get("id")) for r in previous if not r.get("error")}
    jobs = [(m, ex) for ex in run.selected for m in run.keys if (m, ex.id) not in done]
    titles = {d["id"]: d.get("title", "") for d in ds.documents()}
    traces = TraceWriter(out_dir)
    shared = _shared_replies(run)

    async def answer(method: str, example: Example) -> dict[str, Any]:
        return await run_one(
            graphs[method],
            method,
            ds,
            example,
            run.opts[method],
            traces,
            base_method=run.bases[method],
            titles=titles,
            shared=shared,
        )

    executed = await execute(
        jobs,
        answer,
        out_dir / RESULTS,
        means=_means_so_far(run, previous),
        concurrency=s.concurrency,
        max_errors=s.max_errors,
        desc=f"eval {ds.name}",
        progress=s.progress,
    )
    traces.compact()
    _record_reuse(run, shared)
    summary = write_report([out_dir], out_dir, seed=s.seed) if s.report else {}
    summary = {
        **summary,
        "out": str(out_dir),
        "new_rows": len(executed.rows),
        "skipped": len(run.selected) * len(run.keys) - len(jobs),
        "errors": len(executed.errors),
    }
    _check_errors(run, executed)
    return summary


async def aevaluate(settings: EvalSettings | None = None, /, **options: Any) -> dict[str, Any]:
    """:func:`evaluate` for callers that run an event loop: the same settings, the same
    summary."""
    run = plan_run(settings_of(settings, options))
    run.out_dir.mkdir(parents=True, exist_ok=True)
    lock = RunLock(run.out_dir)
    try:
        return await run_questions(run)
    finally:
        lock.release()


def evaluate(settings: EvalSettings | None = None, /, **options: Any) -> dict[str, Any]:
    """Compare ``methods`` on the same questions, store and model; returns the summary.

    The options are the fields of :class:`EvalSettings`, given as keywords
    (``evaluate(methods=["standard_rag", "migres"], dataset="hotpotqa", limit=100)``), as one
    :class:`EvalSettings`, or both (the keywords replace its fields).

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
    chosen = settings_of(settings, options)

    async def main() -> dict[str, Any]:
        # sync graph nodes run in the loop's default executor: size it to the concurrency
        loop = asyncio.get_running_loop()
        workers = max(4, chosen.concurrency) + 2
        loop.set_default_executor(ThreadPoolExecutor(max_workers=workers))
        return await aevaluate(chosen)

    return asyncio.run(main())
