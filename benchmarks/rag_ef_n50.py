"""RAG-EF's ladder on the reported questions, beside its own plain RAG.

For one bundled set, on its first ``--limit`` questions (0-49 for the reported results):

1. The corpus is the union of those questions' paragraphs (``<dataset>.jsonl``, written here
   from the bundled file; its name is the set's name in the rows and the report). S, the
   synthetic Q&A pairs, is written for every paragraph of it by the model in use; E, the
   expert feedback, is one (rewording, expert answer, golden paragraph) triple per question,
   the rewording and answer by the same model.
   E is built as it was first built: the model's greedy rewrite, whatever its overlap.
2. How far E's questions are from the test questions is measured (word-overlap F1, identical,
   near copies) and written to ``expert_divergence.json``: E is an oracle to the degree its
   questions are the test questions.
3. E_r (``--rewrites``, default 4; 0 skips it): E again, with every near copy replaced by a
   sampled rewrite that rewords the question and keeps its names and numbers
   (``lab.ladder.paraphrase``), in a store of its own beside S
   (``pairs_reworded.sqlite``; its pairs as text in ``expert_reworded.jsonl``, its divergence
   in ``expert_divergence_reworded.json``).
4. One ``gaprag eval`` on those questions and that corpus compares ``standard_rag`` with
   ``rag_ef_S`` (pairs of S), ``rag_ef_SE`` (S ∪ E), ``rag_ef_SE_reworded`` (S ∪ E_r) and
   ``rag_ef_standard`` (the paper's Eq. 1 baseline: rank S's chunks, no pairs).

Building S costs one LLM call per paragraph (hours on a CPU), so every step resumes. The pair
store (``pairs.sqlite``) is a cache: what was built is also kept as text in ``pairs.jsonl``,
rewritten after every ``--batch`` paragraphs, and a missing store is rebuilt from it, so a run
continues on another machine from the committed files.

    python benchmarks/rag_ef_n50.py --dataset hotpotqa --out docs/results/n50/rag_ef/hotpotqa

``--synth-prompt paper --profile paper`` is the ladder as the paper gives it: S written with
the Appendix A instruction alone, and every rag_ef variant in paper mode.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Collection
from pathlib import Path
from typing import Any

# the repository's research lab (lab/) is not installed: import it from this checkout
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gaprag.datasets import load_dataset
from gaprag.eval.runner import evaluate
from gaprag.graphs.rag_ef.synth import SynthPrompt, chunk_text, synthesize
from gaprag.llm.client import LLM
from gaprag.llm.factory import default_llm
from gaprag.stores.embeddings import Embedder
from gaprag.stores.pairs import PairStore, chunk_hash
from lab.ladder import (
    REWRITES,
    build_expert,
    expert_divergence,
    write_first_questions,
)

SOURCES = ("synthetic", "expert")
JOBS = ("synthesize:synthetic", "ladder:expert")


def save_journal(
    store: PairStore,
    path: Path,
    *,
    sources: Collection[str] = SOURCES,
    jobs: Collection[str] = JOBS,
) -> None:
    """Every pair of ``sources`` (chunks by id) and the finished ``jobs``, one JSON line each."""
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for source in sources:
            meta = store.metadata(source=source)
            for p in store.list(source=source):
                row = {"source": source, "question": p["question"], "answer": p["answer"],
                       "chunk_id": p["chunk_id"], "meta": meta.get(p["id"], {})}  # fmt: skip
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        for job in jobs:
            keys = sorted(store.processed(job))
            fh.write(json.dumps({"processed": job, "keys": keys}) + "\n")
    tmp.replace(path)


def restore_journal(
    store: PairStore,
    path: Path,
    chunks: dict[str, str],
    *,
    sources: Collection[str] = SOURCES,
    jobs: Collection[str] = JOBS,
) -> None:
    """Put a journal's pairs of ``sources`` and its finished ``jobs`` into an empty store."""
    for line in path.read_text(encoding="utf-8").splitlines():
        row: dict[str, Any] = json.loads(line)
        if "processed" in row:
            if row["processed"] in jobs:
                store.mark_processed(str(row["processed"]), row["keys"])
        elif row["source"] in sources:
            store.add(row["question"], row["answer"], chunks[row["chunk_id"]],
                      source=row["source"], chunk_id=row["chunk_id"], meta=row["meta"])  # fmt: skip


def build(
    subset: Path,
    out: Path,
    llm: LLM,
    *,
    limit: int,
    batch: int,
    embedder: Embedder | None = None,
    concurrency: int = 1,
    prompt: SynthPrompt = "tuned",
) -> PairStore:
    data = load_dataset(subset)
    docs = data.documents()
    chunks = {d["id"]: chunk_text(d) for d in docs}
    store_path, journal = out / "pairs.sqlite", out / "pairs.jsonl"
    fresh = not store_path.is_file()
    store = PairStore.open(store_path, embedder=embedder)
    if fresh and journal.is_file():
        restore_journal(store, journal, chunks)
        print(f"rag_ef_n50: restored {len(store)} pairs from {journal}", file=sys.stderr)
    while True:
        done = store.processed("synthesize:synthetic")
        left = [d for d in docs if chunk_hash(chunk_text(d)) not in done]
        print(f"rag_ef_n50: S {len(docs) - len(left)} of {len(docs)} paragraphs",
              file=sys.stderr, flush=True)  # fmt: skip
        if not left:
            break
        synthesize(
            store, left, llm, limit=batch, progress=False, concurrency=concurrency, prompt=prompt
        )
        save_journal(store, journal)
    build_expert(store, data.select(limit), llm, rewrites=0, progress=False)  # as first built
    save_journal(store, journal)
    return store


def build_reworded(
    subset: Path,
    out: Path,
    llm: LLM,
    *,
    limit: int,
    rewrites: int,
    embedder: Embedder | None = None,
) -> PairStore:
    """S (from ``pairs.jsonl``) and E_r in ``pairs_reworded.sqlite``; resumable like S."""
    data = load_dataset(subset)
    chunks = {d["id"]: chunk_text(d) for d in data.documents()}
    store_path, journal = out / "pairs_reworded.sqlite", out / "expert_reworded.jsonl"
    if not store_path.is_file():  # built aside and moved in, so a stopped restore is redone
        tmp = store_path.with_suffix(".tmp")
        for stale in out.glob(f"{tmp.name}*"):
            stale.unlink()
        store = PairStore.open(tmp, embedder=embedder)
        restore_journal(store, out / "pairs.jsonl", chunks, sources=["synthetic"], jobs=[])
        if journal.is_file():
            restore_journal(store, journal, chunks, sources=["expert"], jobs=["ladder:expert"])
        store.close()
        tmp.replace(store_path)
    store = PairStore.open(store_path, embedder=embedder)
    build_expert(store, data.select(limit), llm, rewrites=rewrites, progress=False)
    save_journal(store, journal, sources=["expert"], jobs=["ladder:expert"])
    return store


def write_divergence(store: PairStore, path: Path, paragraphs: int) -> None:
    divergence = {
        **expert_divergence(store),
        "store_pairs": {s: store.count(source=s) for s in SOURCES},
        "paragraphs": paragraphs,
    }
    path.write_text(json.dumps(divergence, indent=2) + "\n")
    print(f"rag_ef_n50: {path.name}: {json.dumps(divergence)}", file=sys.stderr)


def ladder_variants(
    out: Path, *, reworded: bool, profile: str | None
) -> dict[str, tuple[str, dict[str, Any]]]:
    """The rag_ef variants of the ladder over the pair stores in ``out``, each run with
    ``profile`` when one is named."""
    pairs = str(out / "pairs.sqlite")
    variants: dict[str, tuple[str, dict[str, Any]]] = {
        "rag_ef_S": ("rag_ef", {"feedback_store": pairs, "sources": "synthetic"}),
        "rag_ef_SE": ("rag_ef", {"feedback_store": pairs, "sources": "synthetic+expert"}),
        "rag_ef_standard": (
            "rag_ef",
            {"feedback_store": pairs, "sources": "synthetic", "retrieval_mode": "standard"},
        ),
    }
    if reworded:
        variants["rag_ef_SE_reworded"] = (
            "rag_ef",
            {"feedback_store": str(out / "pairs_reworded.sqlite"), "sources": "synthetic+expert"},
        )
    if profile:
        variants = {k: (m, {**o, "profile": profile}) for k, (m, o) in variants.items()}
    return variants


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="hotpotqa")
    ap.add_argument("--limit", type=int, default=50)
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=25, help="paragraphs between journal writes")
    ap.add_argument("--build-only", action="store_true", help="build S and E, evaluate nothing")
    ap.add_argument(
        "--rewrites", type=int, default=REWRITES,
        help="E_r: sampled rewrites that may replace a near-copy paraphrase (0: no E_r)",
    )  # fmt: skip
    ap.add_argument(
        "--concurrency", type=int, default=1,
        help="S: calls in flight at once, on an embedded server with as many slots (not the "
        "repeatable one: S is data, built once; the evaluation still serves repeatably)",
    )  # fmt: skip
    ap.add_argument(
        "--synth-prompt", choices=("tuned", "paper"), default="tuned",
        help="S's instruction: tuned, or paper (the Appendix A instruction alone); one --out each",
    )  # fmt: skip
    ap.add_argument(
        "--profile", default=None,
        help="the profile the rag_ef variants run with (e.g. paper: whole passages, the paper's "
        "answer step); default the model's own",
    )  # fmt: skip
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    subset = out / f"{args.dataset}.jsonl"  # the rows' "dataset", so a report tells the sets apart
    write_first_questions(args.dataset, args.limit, subset)
    if args.concurrency > 1:
        os.environ.setdefault("GAPRAG_LOCAL_SLOTS", str(args.concurrency))
    llm = default_llm(repeatable=args.concurrency == 1)
    store = build(
        subset, out, llm, limit=args.limit, batch=args.batch, concurrency=args.concurrency,
        prompt=args.synth_prompt,
    )  # fmt: skip
    paragraphs = len(load_dataset(subset).documents())
    write_divergence(store, out / "expert_divergence.json", paragraphs)
    store.close()
    if args.rewrites > 0:
        reworded = build_reworded(subset, out, llm, limit=args.limit, rewrites=args.rewrites)
        write_divergence(reworded, out / "expert_divergence_reworded.json", paragraphs)
        reworded.close()
    if args.build_only:
        return
    variants = ladder_variants(out, reworded=args.rewrites > 0, profile=args.profile)
    evaluate(
        methods=["standard_rag"],
        variants=variants,
        dataset=subset,
        limit=args.limit,
        out=out,
        resume=True,
    )  # the repeatable embedded server (the build's, unless it ran with --concurrency > 1)


if __name__ == "__main__":
    main()
