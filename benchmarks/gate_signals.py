"""Which cheap signal says that plain RAG's answer is right? Measured on calibration questions.

For each question (index ``--start`` on, 60 at the lowest, of HotpotQA, 2Wiki and MuSiQue,
interleaved: question 60 of each set, then 61 of each, ...) over the corpus ``gaprag eval``
uses for that set (the union of the set's question paragraphs, the same cached store), this
runs standard_rag exactly as ``gaprag eval`` does (the model's profile applied, the shared
short-answer step last) and records:

- plain RAG's answer, its EM/F1 against the gold answers, and the token logprobs of its answer
  call's reply (first-token logprob and top-1/top-2 margin, mean and minimum token logprob).
  The logprobs come with the answer call itself (the client asks every call for them), so the
  reply is the one ``gaprag eval`` gets and they cost no extra call;
- cheap agreements: the answer from the top 3 passages, from bm25-only and from dense-only
  retrieval (standard_rag with ``top_k=3`` or that ``retrieval_mode``, everything else the
  same), and a closed-book draft (the same answer prompt with no passages), each compared with
  plain RAG's answer (normalised equality and token F1). A variant that retrieves exactly plain
  RAG's passages in plain RAG's order sends the same prompt, so its answer is plain RAG's at no
  call (``reused``);
- retrieval scores: top-1 and top-1 minus top-2 of the fused (hybrid), bm25 and dense scores;
- what each signal cost: LLM calls, tokens and seconds beyond plain RAG's own.

One JSON line per question, appended when the question is done (``--resume`` skips the
questions already there; a line cut short by a kill is dropped and its question runs again).
``--summarize`` prints, per set and pooled, each signal's AUC for "plain RAG's answer has
F1 >= 0.5" with a bootstrap interval, and each signal's cost.

    python benchmarks/gate_signals.py --start 60 --per-set 40 \\
        --out docs/results/calibration/gate_signals/qwen2.5-coder-1.5b.jsonl --resume
    python benchmarks/gate_signals.py --summarize \\
        --out docs/results/calibration/gate_signals/qwen2.5-coder-1.5b.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.outputs import LLMResult

from gaprag.datasets import CALIBRATION_START, Dataset, Example, calibration_slice
from gaprag.llm.client import LLM
from gaprag.metrics import exact_match, f1_score

DATASETS = ("hotpotqa", "2wikimultihopqa", "musique")
LABEL_F1 = 0.5  # "plain RAG's answer is right": its F1 against the gold answers is at least this
TOP_LOGPROBS = 5
#: the answer variants compared with plain RAG's answer: name -> standard_rag run-time settings
VARIANTS: dict[str, dict[str, Any]] = {
    "top3": {"top_k": 3},
    "bm25": {"retrieval_mode": "bm25"},
    "dense": {"retrieval_mode": "dense"},
}


# -- signals -----------------------------------------------------------------------------
def _position_logprob(position: Mapping[str, Any]) -> float | None:
    value = position.get("logprob")
    return float(value) if isinstance(value, int | float) else None


def answer_confidence(content: Sequence[Mapping[str, Any]] | None) -> dict[str, float | None]:
    """Confidence of a reply from its per-token logprobs (OpenAI ``logprobs.content``).

    Tokens that are only whitespace are left out (a trailing newline says nothing about the
    answer). ``first_margin`` is the first answer token's top-1 minus top-2 logprob (from its
    ``top_logprobs``; None with fewer than two alternatives)."""
    empty: dict[str, float | None] = {
        "first": None, "first_margin": None, "mean": None, "min": None, "tokens": 0,
    }  # fmt: skip
    if not content:
        return empty
    kept = [
        p for p in content if str(p.get("token", "")).strip() and _position_logprob(p) is not None
    ]
    if not kept:
        return empty
    values = [lp for p in kept if (lp := _position_logprob(p)) is not None]
    top = sorted(
        (
            float(t["logprob"])
            for t in kept[0].get("top_logprobs") or []
            if isinstance(t.get("logprob"), int | float)
        ),
        reverse=True,
    )
    return {
        "first": values[0],
        "first_margin": top[0] - top[1] if len(top) >= 2 else None,
        "mean": sum(values) / len(values),
        "min": min(values),
        "tokens": len(values),
    }


def agreement(answer: str, reference: str) -> dict[str, float]:
    """How far two answers agree: normalised equality and token F1."""
    return {
        "em": exact_match(answer, [reference]),
        "f1": round(f1_score(answer, [reference]), 6),
    }


def score_margin(hits: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """Top-1 score and top-1 minus top-2 score of a ranked retrieval."""
    scores = [float(h["score"]) for h in hits if isinstance(h.get("score"), int | float)]
    return {
        "top1": scores[0] if scores else None,
        "margin": scores[0] - scores[1] if len(scores) >= 2 else None,
    }


# -- LLM plumbing ----------------------------------------------------------------------------
class CallRecorder(BaseCallbackHandler):
    """Every chat call's reply logprobs (``logprobs.content``) and seconds, in order."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self._open: dict[UUID, dict[str, Any]] = {}

    def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[Any]], *, run_id: UUID, **kw: Any
    ) -> None:
        call: dict[str, Any] = {"logprobs": None, "started": time.perf_counter()}
        self._open[run_id] = call
        self.calls.append(call)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kw: Any) -> None:
        call = self._open.pop(run_id, None)
        if call is None:
            return
        gen = (
            response.generations[0][0] if response.generations and response.generations[0] else None
        )
        info = dict(getattr(gen, "generation_info", None) or {})
        meta = dict(getattr(getattr(gen, "message", None), "response_metadata", None) or {})
        logprobs = info.get("logprobs") or meta.get("logprobs")
        content = logprobs.get("content") if isinstance(logprobs, Mapping) else None
        call["logprobs"] = list(content) if isinstance(content, list) else None
        call["reply"] = gen.text if gen is not None else ""
        call["seconds"] = round(time.perf_counter() - call.pop("started"), 3)

    def take(self) -> list[dict[str, Any]]:
        """The calls recorded since the last ``take``."""
        calls, self.calls = self.calls, []
        return calls


def with_logprobs(chat: BaseChatModel, recorder: CallRecorder) -> BaseChatModel:
    """The chat model asking every call for its reply's logprobs (where its client has the
    ``logprobs``/``top_logprobs`` settings, as ChatOpenAI does), reporting to ``recorder``."""
    update: dict[str, Any] = {"callbacks": [recorder]}
    fields = type(chat).model_fields
    if "logprobs" in fields and "top_logprobs" in fields:
        update.update(logprobs=True, top_logprobs=TOP_LOGPROBS)
    return chat.model_copy(update=update)


def repeatable_llm(model: str, recorder: CallRecorder) -> tuple[LLM, dict[str, Any]]:
    """The embedded server of ``model`` in the repeatable mode ``gaprag eval`` uses (one slot,
    fixed seed, temperature 0), its client asking for logprobs; and the serving settings."""
    os.environ["GAPRAG_LOCAL_MODEL"] = model
    from gaprag.llm import factory

    base = factory.default_llm(repeatable=True)
    serving = factory.serving_settings(repeatable=True)
    chat = with_logprobs(base.chat, recorder)
    llm = LLM(
        chat, structured_mode=base.structured_mode, endpoint=base.endpoint,
        context_window=base.context_window,
    )  # fmt: skip
    return llm, serving


# -- one question ------------------------------------------------------------------------------
class Bench:
    """What every question of one set runs with: the standard_rag graph, its store, the LLM."""

    def __init__(
        self, dataset: Dataset, graph: Any, store: Any, llm: LLM, recorder: CallRecorder,
        settings: dict[str, Any],
    ) -> None:  # fmt: skip
        self.dataset, self.graph, self.store = dataset, graph, store
        self.llm, self.recorder, self.settings = llm, recorder, settings

    @classmethod
    def build(cls, dataset: Dataset, llm: LLM, recorder: CallRecorder, store: Any) -> Bench:
        from gaprag.context import effective_settings
        from gaprag.graphs import build_graph

        graph = build_graph("standard_rag", llm=llm, retriever=store)
        settings = {
            k: v["value"] for k, v in effective_settings(graph.builder.context_schema).items()
        }
        return cls(dataset, graph, store, llm, recorder, settings)


def _usage(output: Mapping[str, Any]) -> dict[str, int]:
    usage = output.get("usage") or {}
    return {
        "llm_calls": int(usage.get("llm_calls", 0)),
        "prompt_tokens": int(usage.get("prompt_tokens", 0)),
        "completion_tokens": int(usage.get("completion_tokens", 0)),
    }


def _short_path(output: Mapping[str, Any]) -> str | None:
    for t in output.get("trace") or []:
        if isinstance(t, Mapping) and t.get("call") == "short_answer":
            return str(t.get("path"))
    return None


def _run_rag(bench: Bench, example: Example, context: Mapping[str, Any]) -> dict[str, Any]:
    bench.recorder.take()
    start = time.perf_counter()
    output = bench.graph.invoke(
        {"question": example.prompt(), "dataset_id": example.id}, context=dict(context)
    )
    seconds = time.perf_counter() - start
    calls = bench.recorder.take()
    answer = str(output.get("answer") or "")
    evidence = [e for e in output.get("evidence") or [] if isinstance(e, Mapping)]
    return {
        "answer": answer,
        "f1": round(f1_score(answer, example.answers), 6),
        "em": exact_match(answer, example.answers),
        "short_answer": _short_path(output),
        "evidence_ids": [str(e.get("id")) for e in evidence],
        **_usage(output),
        "seconds": round(seconds, 3),
        "answer_call": calls[0] if calls else None,
    }


def _closed_book(bench: Bench, example: Example) -> dict[str, Any]:
    """Plain RAG's answer prompt with no passages; the short-answer rules (no call)."""
    from gaprag.accounting import metered
    from gaprag.nodes import clean_answer, render_passages
    from gaprag.nodes.gate import plain_rag
    from gaprag.nodes.short_answer import rule_answer

    bench.recorder.take()
    plain, fmt = plain_rag()
    prompt = plain.render(question=example.prompt(), passages=render_passages([], fmt))
    start = time.perf_counter()
    with metered() as meter:
        raw = bench.llm.generate(prompt, max_tokens=int(bench.settings["answer_max_tokens"]))
    seconds = time.perf_counter() - start
    calls = bench.recorder.take()
    cleaned = clean_answer(raw)
    answer = rule_answer(example.question, cleaned) or cleaned
    return {
        "answer": answer,
        "f1": round(f1_score(answer, example.answers), 6),
        "llm_calls": meter.llm_calls,
        "prompt_tokens": meter.prompt_tokens,
        "completion_tokens": meter.completion_tokens,
        "seconds": round(seconds, 3),
        "confidence": answer_confidence(calls[0]["logprobs"] if calls else None),
    }


def measure(bench: Bench, example: Example, index: int) -> dict[str, Any]:
    """One row: plain RAG's answer and every signal, with what each cost."""
    started = time.perf_counter()
    settings = bench.settings
    k, mode = int(settings["top_k"]), str(settings["retrieval_mode"])
    query = example.prompt()

    t0 = time.perf_counter()
    ranked = {m: bench.store.search(query, k, mode=m) for m in ("hybrid", "bm25", "dense")}
    retrieval_s = time.perf_counter() - t0

    rag = _run_rag(bench, example, {})
    answer_call = rag.pop("answer_call")
    rag["confidence"] = answer_confidence(answer_call["logprobs"] if answer_call else None)
    rag["logprobs_returned"] = bool(answer_call and answer_call["logprobs"])
    rag["support_recall"] = _support_recall(example, rag["evidence_ids"])

    variants: dict[str, dict[str, Any]] = {}
    for name, overrides in VARIANTS.items():
        v_k = int(overrides.get("top_k", k))
        v_mode = str(overrides.get("retrieval_mode", mode))
        same = v_k == k and [h["id"] for h in ranked[v_mode][:v_k]] == rag["evidence_ids"]
        if same:  # the very prompt plain RAG sent: its answer, no call
            out = {
                "answer": rag["answer"], "f1": rag["f1"], "llm_calls": 0, "prompt_tokens": 0,
                "completion_tokens": 0, "seconds": 0.0, "reused": True,
            }  # fmt: skip
        else:
            out = _run_rag(bench, example, overrides)
            out.pop("answer_call")
            out.pop("em")
            out["reused"] = False
        out["agreement"] = agreement(str(out["answer"]), rag["answer"])
        variants[name] = out
    closed = _closed_book(bench, example)
    closed["agreement"] = agreement(closed["answer"], rag["answer"])
    variants["closed_book"] = closed

    retrieval = {m: score_margin(hits) for m, hits in ranked.items()}
    row: dict[str, Any] = {
        "dataset": bench.dataset.name,
        "index": index,
        "id": example.id,
        "question": example.question,
        "answers": example.answers,
        "type": example.type,
        "label": rag["f1"] >= LABEL_F1,
        "rag": rag,
        "variants": variants,
        "retrieval": {**retrieval, "seconds": round(retrieval_s, 3)},
        "settings": {k: settings[k] for k in ("top_k", "retrieval_mode", "max_passage_words",
                                               "answer_max_tokens", "reader")},
        "wall_s": round(time.perf_counter() - started, 3),
    }  # fmt: skip
    row["signals"] = signals(row)
    return row


def _support_recall(example: Example, shown: Sequence[str]) -> float | None:
    from gaprag.metrics import support_recall

    return support_recall(example.supporting, shown)


# -- signals of a row ------------------------------------------------------------------------
def signals(row: Mapping[str, Any]) -> dict[str, float | None]:
    """Every signal of a row, oriented so that higher means "plain RAG is more likely right"."""
    rag, variants, ret = row["rag"], row["variants"], row["retrieval"]
    conf, cb = rag["confidence"], variants["closed_book"]["confidence"]
    out: dict[str, float | None] = {
        "lp_first_margin": conf["first_margin"],
        "lp_first": conf["first"],
        "lp_mean": conf["mean"],
        "lp_min": conf["min"],
    }
    for name in (*VARIANTS, "closed_book"):
        agree = variants[name]["agreement"]
        out[f"agree_{name}_em"] = agree["em"]
        out[f"agree_{name}_f1"] = agree["f1"]
    out["agree_modes_em"] = (
        variants["bm25"]["agreement"]["em"] + variants["dense"]["agreement"]["em"]
    )
    out["agree_all_em"] = sum(variants[n]["agreement"]["em"] for n in (*VARIANTS, "closed_book"))
    out["cb_lp_first_margin"] = cb["first_margin"]
    out["cb_lp_mean"] = cb["mean"]
    for mode in ("hybrid", "bm25", "dense"):
        out[f"ret_{mode}_top1"] = ret[mode]["top1"]
        out[f"ret_{mode}_margin"] = ret[mode]["margin"]
    out["gold_support_recall"] = rag.get("support_recall")
    return out


#: signal -> the answer variants it needs (its cost beyond plain RAG's); logprobs and retrieval
#: scores come with plain RAG's own calls and retrievals
SIGNAL_COST: dict[str, tuple[str, ...]] = {
    "agree_modes_em": ("bm25", "dense"),
    "agree_all_em": (*VARIANTS, "closed_book"),
    "cb_lp_first_margin": ("closed_book",),
    "cb_lp_mean": ("closed_book",),
    **{f"agree_{n}_{m}": (n,) for n in (*VARIANTS, "closed_book") for m in ("em", "f1")},
}
#: signals that look at the gold paragraphs: a reference, not available when answering
REFERENCE = {"gold_support_recall"}


# -- the run ---------------------------------------------------------------------------------
def plan(
    datasets: Sequence[Dataset], start: int, per_set: int
) -> Iterator[tuple[Dataset, int, Example]]:
    """Questions ``start`` .. ``start + per_set - 1`` of each set, interleaved: the first of
    each set, then the second of each, ...; refuses questions below 60."""
    picked = [
        calibration_slice(ds.examples, start, per_set, what="gate signals") for ds in datasets
    ]
    for offset in range(per_set):
        for ds, examples in zip(datasets, picked, strict=True):
            if offset < len(examples):
                yield ds, start + offset, examples[offset]


def read_rows(path: Path) -> list[dict[str, Any]]:
    from gaprag.eval.results import read_results

    return read_results(path)


def run(
    datasets: Sequence[Dataset],
    *,
    start: int,
    per_set: int,
    out: Path,
    resume: bool,
    make_bench: Callable[[Dataset], Bench],
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
    max_errors: int = 5,
) -> int:
    """Measure every planned question not in ``out`` yet; returns the rows written."""
    from gaprag.errors import InputError
    from gaprag.eval.results import ResultsWriter

    out.parent.mkdir(parents=True, exist_ok=True)
    if out.is_file() and out.stat().st_size and not resume:
        raise InputError(f"{out} already has rows", hint="pass --resume to continue it")
    writer = ResultsWriter(out)  # drops a last line cut short by a kill
    done = {(r.get("dataset"), r.get("id")) for r in read_rows(out)}
    benches: dict[str, Bench] = {}
    written = errors = 0
    try:
        for ds, index, example in plan(datasets, start, per_set):
            if (ds.name, example.id) in done:
                continue
            if ds.name not in benches:
                benches[ds.name] = make_bench(ds)
            try:
                row = measure(benches[ds.name], example, index)
            except Exception as exc:  # one failed question must not end the run
                errors += 1
                log(f"{ds.name} {index} ({example.id}): {type(exc).__name__}: {exc}")
                if errors >= max_errors:
                    log(f"stopping after {errors} failed questions")
                    break
                continue
            writer.write(row)
            written += 1
            log(
                f"{ds.name} {index}: f1={row['rag']['f1']:.2f} "
                f"lp_mean={_fmt(row['signals']['lp_mean'])} "
                f"top3={row['variants']['top3']['agreement']['em']:.0f} {row['wall_s']:.0f}s"
            )
    finally:
        writer.close()
    return written


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


# -- summary ---------------------------------------------------------------------------------
def rank_auc(labels: Sequence[bool], scores: Sequence[float]) -> float | None:
    """Area under the ROC curve: the chance that a positive scores above a negative (ties
    count one half); None without both classes."""
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    if not pos or not neg:
        return None
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    ranks = [0.0] * len(scores)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for t in range(i, j + 1):
            ranks[order[t]] = (i + j) / 2 + 1
        i = j + 1
    pos_ranks = sum(r for r, y in zip(ranks, labels, strict=True) if y)
    return (pos_ranks - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg))


def auc(labels: Sequence[bool], scores: Sequence[float]) -> float | None:
    """ROC AUC (scikit-learn's where installed, else :func:`rank_auc`)."""
    if len(set(labels)) < 2:
        return None
    try:
        from sklearn.metrics import roc_auc_score
    except ImportError:
        return rank_auc(labels, scores)
    return float(roc_auc_score(labels, scores))


def bootstrap_auc(
    labels: Sequence[bool], scores: Sequence[float], *, resamples: int = 1000, seed: int = 0
) -> tuple[float | None, float | None]:
    """95% percentile interval of the AUC over question resamples (resamples with one class
    left out)."""
    rng = random.Random(seed)
    n = len(labels)
    values: list[float] = []
    for _ in range(resamples):
        idx = [rng.randrange(n) for _ in range(n)]
        value = rank_auc([labels[i] for i in idx], [scores[i] for i in idx])
        if value is not None:
            values.append(value)
    if len(values) < resamples // 2:
        return None, None
    values.sort()
    return values[int(0.025 * len(values))], values[min(len(values) - 1, int(0.975 * len(values)))]


def _cost(rows: Sequence[Mapping[str, Any]], signal: str) -> dict[str, float]:
    needs = SIGNAL_COST.get(signal, ())
    calls = tokens = seconds = 0.0
    for row in rows:
        for name in needs:
            v = row["variants"][name]
            calls += v["llm_calls"]
            tokens += v["prompt_tokens"] + v["completion_tokens"]
            seconds += v["seconds"]
    n = max(1, len(rows))
    return {"llm_calls": calls / n, "tokens": tokens / n, "seconds": seconds / n}


def summarize(rows: Sequence[Mapping[str, Any]]) -> str:
    """A Markdown report: per set and pooled, each signal's AUC with its interval, and cost."""
    sets = [d for d in DATASETS if any(r["dataset"] == d for r in rows)]
    sets += sorted({str(r["dataset"]) for r in rows} - set(sets))
    groups: dict[str, list[Mapping[str, Any]]] = {
        **{d: [r for r in rows if r["dataset"] == d] for d in sets},
        "pooled": list(rows),
    }
    names = list(rows[0]["signals"]) if rows else []
    lines = [
        f'AUC of each signal for "plain RAG\'s answer has F1 >= {LABEL_F1}" (95% bootstrap '
        "interval over questions, 1000 resamples); higher signal = more confident. "
        "Extra cost: mean per question beyond plain RAG's own calls.",
        "",
        "| group | questions | indices | right (F1 >= 0.5) | plain RAG F1 | LLM calls | tokens "
        "| seconds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for g, rs in groups.items():
        n = max(1, len(rs))
        indices = [int(r["index"]) for r in rs]
        span = f"{min(indices)}-{max(indices)}" if indices else "-"
        lines.append(
            f"| {g} | {len(rs)} | {span} | {sum(1 for r in rs if r['label'])} | "
            f"{sum(r['rag']['f1'] for r in rs) / n:.3f} | "
            f"{sum(r['rag']['llm_calls'] for r in rs) / n:.2f} | "
            f"{sum(r['rag']['prompt_tokens'] + r['rag']['completion_tokens'] for r in rs) / n:.0f} | "
            f"{sum(r['rag']['seconds'] for r in rs) / n:.1f} |"
        )
    lines += [
        "",
        "| signal | " + " | ".join(f"{g} AUC (n)" for g in groups)
        + " | extra LLM calls | extra tokens | extra seconds |",
        "|---|" + "---|" * (len(groups) + 3),
    ]  # fmt: skip
    for name in names:
        cells = []
        for rs in groups.values():
            pairs = [(bool(r["label"]), r["signals"].get(name)) for r in rs]
            kept = [(y, float(s)) for y, s in pairs if isinstance(s, int | float)]
            labels, scores = [y for y, _ in kept], [s for _, s in kept]
            value = auc(labels, scores) if kept else None
            if value is None:
                cells.append(f"- ({len(kept)})")
                continue
            lo, hi = bootstrap_auc(labels, scores)
            interval = f" [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else ""
            cells.append(f"{value:.2f}{interval} ({len(kept)})")
        cost = _cost(rows, name)
        label = f"{name} (gold; reference)" if name in REFERENCE else name
        lines.append(
            f"| {label} | " + " | ".join(cells)
            + f" | {cost['llm_calls']:.2f} | {cost['tokens']:.0f} | {cost['seconds']:.1f} |"
        )  # fmt: skip
    reused = {n: sum(1 for r in rows if r["variants"][n].get("reused")) for n in VARIANTS}
    returned = sum(1 for r in rows if r["rag"].get("logprobs_returned"))
    lines += [
        "",
        f"Answer calls that returned logprobs: {returned} of {len(rows)}. Variants that "
        "retrieved plain RAG's passages in its order (its answer reused, no call): "
        + ", ".join(f"{n} {c}" for n, c in reused.items())
        + ".",
    ]
    return "\n".join(lines) + "\n"


# -- command line ----------------------------------------------------------------------------
def _load(names: Iterable[str]) -> list[Dataset]:
    from gaprag.datasets import load_dataset

    return [load_dataset(n) for n in names]


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated sets")
    ap.add_argument("--start", type=int, default=CALIBRATION_START, help="first question index")
    ap.add_argument("--per-set", type=int, default=40, help="questions of each set")
    ap.add_argument("--model", default="qwen2.5-coder-1.5b", help="embedded model (registry)")
    ap.add_argument("--out", type=Path, required=True, help="rows (JSONL)")
    ap.add_argument("--resume", action="store_true", help="skip the questions already in --out")
    ap.add_argument("--summarize", action="store_true", help="print the AUC report of --out")
    ap.add_argument("--summary-out", type=Path, help="also write the report here (Markdown)")
    args = ap.parse_args(argv)
    if args.summarize:
        rows = read_rows(args.out)
        if not rows:
            sys.exit(f"no rows in {args.out}")
        text = summarize(rows)
        print(text)
        if args.summary_out:
            args.summary_out.write_text(text, encoding="utf-8")
        return
    datasets = _load(n.strip() for n in args.datasets.split(",") if n.strip())
    for ds in datasets:  # refuse reserved questions before starting anything
        calibration_slice(ds.examples, args.start, args.per_set, what="gate signals")
    recorder = CallRecorder()
    llm, serving = repeatable_llm(args.model, recorder)
    serving_path = args.out.with_suffix(".serving.json")
    serving_path.parent.mkdir(parents=True, exist_ok=True)
    serving_path.write_text(json.dumps(serving, indent=2) + "\n", encoding="utf-8")

    def make_bench(ds: Dataset) -> Bench:
        from gaprag.datasets import dataset_store

        return Bench.build(ds, llm, recorder, dataset_store(ds, progress=False))

    written = run(
        datasets, start=args.start, per_set=args.per_set, out=args.out, resume=args.resume,
        make_bench=make_bench,
    )  # fmt: skip
    print(f"{written} rows written to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()


__all__ = [
    "Bench", "CallRecorder", "agreement", "answer_confidence", "auc", "bootstrap_auc",
    "main", "measure", "plan", "rank_auc", "run", "score_margin", "signals",
    "summarize", "with_logprobs",
]  # fmt: skip
