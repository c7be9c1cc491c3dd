"""Run several methods over the same questions, with the same store and model.

Writes into ``out``:

* ``results.jsonl``: one row per (method, question), appended as each finishes
  (:mod:`gaprag.eval.results`: the row schema, resume after a kill, the directory lock);
* ``traces/METHOD.jsonl.xz``: per question, queries, retrievals, passages shown, decisions,
  every LLM prompt and reply, the graph's decision trace, and the error with its traceback if
  the question failed (:mod:`gaprag.traces`);
* ``run.json``: the protocol (:mod:`gaprag.eval.record`);
* ``summary.json``, ``summary.md``, plots and ``report.html`` (see :mod:`gaprag.eval.report`).

The run is one async loop over (method, question) jobs with one :class:`Run` holding its
settings, at most ``concurrency`` questions at a time; :func:`evaluate` is its synchronous
wrapper.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel

from gaprag.accounting import retrieval_log
from gaprag.context import setting_sources
from gaprag.datasets import Dataset, Example, dataset_store, load_dataset
from gaprag.errors import GapragError, InputError
from gaprag.eval.capture import LLMCallRecorder
from gaprag.eval.planning import (
    VariantSpecs,
    context_of,
    graph_settings,
    plan_methods,
    profile_info,
)
from gaprag.eval.record import RUN_FILE, check_resume, model_label, portable_path
from gaprag.eval.report import write_report
from gaprag.eval.results import (
    FORMAT_VERSION,
    RESULTS,
    ResultsWriter,
    RunLock,
    cut_torn_tail,
    read_results,
    write_json,
)
from gaprag.eval.scoring import retrieved_ids, score, seen_ids, shown_ids
from gaprag.eval.serving import run_model
from gaprag.llm.client import LLM
from gaprag.nodes.short_answer import CALL_PATHS as SHORT_ANSWER_CALL_PATHS
from gaprag.stores.embeddings import Embedder
from gaprag.traces import TraceWriter


class TooManyErrors(GapragError):
    """The error cap was reached, or every question of the run failed; finished rows are kept."""


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


async def run_one(
    graph: Any,
    method: str,
    dataset: Dataset,
    example: Example,
    options: Mapping[str, Any],
    traces: TraceWriter,
    *,
    base_method: str | None = None,
    titles: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Run one question through one method's graph; returns its row (:class:`Row`) and
    appends its trace (the question's retrievals, LLM calls, decisions and output) to
    ``traces``. A failed question is a row with its ``error``, never an exception."""
    recorder = LLMCallRecorder()
    error: str | None = None
    tb = ""
    output: dict[str, Any] = {}
    start = time.perf_counter()
    with retrieval_log() as log:  # this task's own context; copied into node threads
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
            {
                k: ev.get(k)
                for k in ("id", "title", "source", "score", "round", "metadata")
                if k != "metadata" or ev.get(k)
            }
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
    traces.write(method, trace)
    return row


@dataclasses.dataclass
class Run:
    """One evaluation's settings, planned once: the method keys with their methods and
    options, the questions, the model, where it writes, and how it runs."""

    keys: list[str]
    bases: dict[str, str]
    opts: dict[str, dict[str, Any]]
    dataset: Dataset
    selected: list[Example]
    limit: int | None
    offset: int
    out_dir: Path
    concurrency: int = 1
    resume: bool = False
    max_errors: int = 10
    chat: LLM | BaseChatModel | None = None
    serving: dict[str, Any] = dataclasses.field(default_factory=dict)
    label: str = ""
    store: Any = None
    embedder: Embedder | None = None
    progress: bool = True
    report: bool = True
    seed: int = 0


def plan_run(
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
) -> Run:
    """Check the arguments of :func:`evaluate`, select the questions and start the model."""
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
    label = model_label(llm, base_url, model)
    chat, serving = run_model(llm, base_url, model, opts)
    return Run(
        keys=keys,
        bases=bases,
        opts=opts,
        dataset=ds,
        selected=selected,
        limit=limit,
        offset=offset,
        out_dir=Path(out),
        concurrency=concurrency,
        resume=resume,
        max_errors=max_errors,
        chat=chat,
        serving=serving,
        label=label,
        store=store,
        embedder=embedder,
        progress=progress,
        report=report,
        seed=seed,
    )


def _open_store(run: Run) -> Any:
    if run.store is None:
        return dataset_store(run.dataset, embedder=run.embedder, progress=run.progress)
    if isinstance(run.store, str | Path):
        from gaprag.stores.store import Store

        return Store.open(run.store, embedder=run.embedder)
    return run.store


def _run_info(run: Run, graphs: Mapping[str, Any], store: Any) -> dict[str, Any]:
    """What ``run.json`` records of this run."""
    ds = run.dataset
    manifest = getattr(store, "manifest", {}) or {}
    return {
        "dataset": ds.name,
        "dataset_path": portable_path(ds.path),
        "dataset_sha256": ds.sha256,
        "questions_in_file": len(ds),
        "limit": run.limit,
        "offset": run.offset,
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
        "concurrency": run.concurrency,
        "results_format": FORMAT_VERSION,
        "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


async def run_questions(run: Run) -> dict[str, Any]:
    """Every (method, question) job of ``run`` not already answered, ``concurrency`` at a
    time; then the report. The output directory must be held (:class:`RunLock`)."""
    from gaprag.graphs import build_graph

    ds, out_dir = run.dataset, run.out_dir
    results_path = out_dir / RESULTS
    if run.resume:
        cut_torn_tail(results_path)
    previous = read_results(results_path)
    if previous and not run.resume:
        raise InputError(
            f"{results_path} already has {len(previous)} rows",
            hint="pass --resume to continue that run, or choose another --out directory",
        )
    if any(r.get("dataset") not in (None, ds.name) for r in previous):
        raise InputError(
            f"{out_dir} holds results of another dataset",
            hint="use one --out directory per dataset",
        )

    store = _open_store(run)
    graphs = {
        m: build_graph(run.bases[m], llm=run.chat, retriever=store, **run.opts[m]) for m in run.keys
    }
    info = _run_info(run, graphs, store)
    run_file = out_dir / RUN_FILE
    if run.resume and run_file.is_file():
        info = check_resume(run_file, info)
    write_json(run_file, info)

    done = {(r.get("method"), r.get("id")) for r in previous if not r.get("error")}
    jobs = [(m, ex) for ex in run.selected for m in run.keys if (m, ex.id) not in done]
    titles = {d["id"]: d.get("title", "") for d in ds.documents()}

    means = _Means(run.keys)
    wanted = {ex.id for ex in run.selected}
    for r in previous:
        if r.get("method") in run.keys and r.get("id") in wanted and not r.get("error"):
            means.add(r)
    from tqdm import tqdm

    bar = tqdm(
        total=len(jobs),
        desc=f"eval {ds.name}",
        unit="run",
        disable=not run.progress,
        file=sys.stderr,
        dynamic_ncols=True,
    )
    writer = ResultsWriter(results_path)
    traces = TraceWriter(out_dir)
    sem = asyncio.Semaphore(run.concurrency)
    errors: list[str] = []
    stop = asyncio.Event()
    new_rows: list[dict[str, Any]] = []

    async def job(method: str, example: Example) -> None:
        async with sem:
            if stop.is_set():
                return
            row = await run_one(
                graphs[method],
                method,
                ds,
                example,
                run.opts[method],
                traces,
                base_method=run.bases[method],
                titles=titles,
            )
            writer.write(row)
            new_rows.append(row)
            means.add(row)
            if row["error"]:
                errors.append(f"{method} on {example.id}: {row['error']}")
                if run.max_errors > 0 and len(errors) >= run.max_errors:
                    stop.set()
            bar.update(1)
            bar.set_postfix_str(means.text(), refresh=False)

    try:
        await asyncio.gather(*(job(m, ex) for m, ex in jobs))
    finally:
        writer.close()
        bar.close()
    traces.compact()

    summary: dict[str, Any] = {}
    if run.report:
        summary = write_report([out_dir], out_dir, seed=run.seed)
    summary = {
        **summary,
        "out": str(out_dir),
        "new_rows": len(new_rows),
        "skipped": len(run.selected) * len(run.keys) - len(jobs),
        "errors": len(errors),
    }
    if stop.is_set() or (new_rows and len(errors) == len(new_rows)):
        what = (
            f"stopped after {len(errors)} failed questions (--max-errors {run.max_errors})"
            if stop.is_set()
            else f"all {len(errors)} questions of this run failed"
        )
        raise TooManyErrors(
            f"{what}; last: {errors[-1]}",
            hint=f"see the 'error' field in {results_path} and traces/; fix the cause and "
            "rerun with --resume (failed questions are retried)",
        )
    return summary


async def aevaluate(**kwargs: Any) -> dict[str, Any]:
    """Evaluate ``methods`` on the first ``limit`` questions of ``dataset``; the arguments
    are those of :func:`evaluate`."""
    run = plan_run(**kwargs)
    run.out_dir.mkdir(parents=True, exist_ok=True)
    lock = RunLock(run.out_dir)
    try:
        return await run_questions(run)
    finally:
        lock.release()


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
        methods=methods,
        dataset=dataset,
        limit=limit,
        offset=offset,
        out=out,
        concurrency=concurrency,
        resume=resume,
        max_errors=max_errors,
        sets=sets,
        options=options,
        variants=variants,
        llm=llm,
        base_url=base_url,
        model=model,
        store=store,
        embedder=embedder,
        progress=progress,
        report=report,
        seed=seed,
    )

    async def main() -> dict[str, Any]:
        # sync graph nodes run in the loop's default executor: size it to the concurrency
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(max_workers=max(4, concurrency) + 2))
        return await aevaluate(**kwargs)

    return asyncio.run(main())
