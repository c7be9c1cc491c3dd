"""RAG-EF ladder on a miniature corpus, with the real model.

S is synthesised from the paragraphs of the first N questions of a dataset (the corpus of a
dataset restricted to those questions, so S stays affordable on a CPU); E adds paraphrased
questions answered by the "expert" from the gold paragraph; O adds the original questions with
their gold answers and paragraphs, and is reported only as an upper bound. Then the
feedback check: for the first question that S answers wrongly, one expert triple is added and
a paraphrase of that question is asked again; the answers to the other questions must not
change.

    python benchmarks/rag_ef_ladder.py --dataset hotpotqa --limit 5 --out runs/rag_ef

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

# the repository's research lab (lab/) is not installed: import it from this checkout
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gaprag import build_graph
from gaprag.datasets import load_dataset
from gaprag.llm.factory import default_llm
from gaprag.metrics import accuracy
from gaprag.stores.pairs import PairStore
from lab.ladder import (
    build_ladder,
    evaluate_ladder,
    expert_divergence,
    golden_chunk,
    paraphrase,
    write_first_questions,
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="hotpotqa")
    ap.add_argument("--limit", type=int, default=5)
    ap.add_argument("--out", default="runs/rag_ef")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    full = load_dataset(args.dataset)
    subset = write_first_questions(
        full.path, args.limit, out / f"{full.name}-first{args.limit}.jsonl"
    )
    llm = default_llm()
    t0 = time.perf_counter()
    store_path = out / "ladder.sqlite"
    build_ladder(subset, store_path, llm=llm, limit=args.limit)
    build_s = time.perf_counter() - t0
    store = PairStore.open(store_path)
    ladder = evaluate_ladder(store, subset, llm=llm, limit=args.limit, out=out / "ladder.jsonl")
    print(f"ladder: {ladder}", file=sys.stderr, flush=True)

    # feedback check on a store holding S only
    data = load_dataset(subset)
    fb_path = out / "feedback.sqlite"
    fb_path.unlink(missing_ok=True)
    fb = PairStore.open(fb_path)
    for pair in store.list(source="synthetic"):
        fb.add(
            pair["question"],
            pair["answer"],
            pair["chunk"],
            source="synthetic",
            chunk_id=pair["chunk_id"],
        )
    graph = build_graph("rag_ef", llm=llm, pair_store=fb, empty_store_fallback=False)
    before = {ex.id: str(graph.invoke({"question": ex.question})["answer"]) for ex in data.examples}
    failed = next(
        (
            ex
            for ex in data.examples
            if not accuracy(before[ex.id], ex.answers) and golden_chunk(ex)
        ),
        None,
    )
    check: dict[str, object] = {"failed_question": None}
    if failed is not None:
        gold = golden_chunk(failed)
        assert gold is not None
        fb.add(
            failed.question, failed.answers[0], gold["text"], source="expert", chunk_id=gold["id"]
        )
        para = paraphrase(llm, failed.question).text
        fixed = str(graph.invoke({"question": para})["answer"])
        after = {
            ex.id: str(graph.invoke({"question": ex.question})["answer"])
            for ex in data.examples
            if ex.id != failed.id
        }
        check = {
            "failed_question": failed.question,
            "gold": failed.answers,
            "answer_before": before[failed.id],
            "paraphrase": para,
            "answer_to_paraphrase_after_feedback": fixed,
            "paraphrase_fixed": bool(accuracy(fixed, failed.answers)),
            "unrelated_unchanged": sum(after[i] == before[i] for i in after),
            "unrelated_total": len(after),
        }
    result = {
        "dataset": full.name,
        "questions": args.limit,
        "corpus_paragraphs": len(data.documents()),
        "pairs": {s: store.count(source=s) for s in ("synthetic", "expert", "oracle")},
        "expert_divergence": expert_divergence(store),
        "build_s": round(build_s, 1),
        "ladder": ladder,
        "feedback_check": check,
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    (out / "summary.json").write_text(json.dumps(result, indent=2, ensure_ascii=False))
    print(json.dumps(result, ensure_ascii=False))


if __name__ == "__main__":
    main()
