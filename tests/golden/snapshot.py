"""Golden outputs: every method on fixed questions with a deterministic scripted model.

``python -m tests.golden.snapshot OUT.json`` runs the six methods through the public API
(``build_graph``) over a tiny HashingEmbedder store, with a scripted chat model whose reply to
each call is picked by a hash of the prompt. Any change to a prompt, a parser, a route or a
state update changes the recorded prompts or outputs, so comparing two snapshots shows whether
a refactoring kept behaviour. Wall times are dropped; everything else is kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage

METHODS = ["standard_rag", "missing_knowledge", "iterkey", "rag_ef", "migres", "rfm_rag"]
QUESTIONS = [
    "Who wrote Hamlet?",
    "What is the capital of France?",
    "Who built the Eiffel Tower, and in which city is it?",
    "Is Berlin the capital of Germany?",
]
DOCS = [
    {"id": "fr", "title": "France", "text": "Paris is the capital and largest city of France."},
    {"id": "de", "title": "Germany", "text": "Berlin is the capital of Germany and its largest city."},
    {"id": "eiffel", "title": "Eiffel Tower",
     "text": "The Eiffel Tower is a wrought-iron tower in Paris built by Gustave Eiffel."},
    {"id": "hamlet", "title": "Hamlet",
     "text": "Hamlet is a tragedy written by William Shakespeare around 1600."},
    {"id": "shakes", "title": "William Shakespeare",
     "text": "William Shakespeare was an English playwright born in Stratford-upon-Avon."},
    {"id": "gustave", "title": "Gustave Eiffel",
     "text": "Gustave Eiffel was a French civil engineer whose company built the tower in 1889."},
]  # fmt: skip
REPLIES = [
    '["Hamlet", "author", "Shakespeare"]',
    "True",
    "False",
    "Paris",
    "William Shakespeare",
    '{"thought": "The passages may miss who built it.", "judge": true, '
    '"queries": ["Eiffel Tower builder", "Gustave Eiffel company"]}',
    '{"thought": "Enough.", "judge": false, "queries": []}',
    '{"answer": {"text": "Gustave Eiffel", "confidence": 4}, "missing_information": "none", '
    '"explanation": "The passage says so."}',
    '{"answer": {"text": "unanswerable", "confidence": 1}, '
    '"missing_information": "the city of the tower", "explanation": "Not known yet."}',
    '{"useful_information": [{"info": "Paris is the capital of France", "support_passages": [0]}]}',
    '{"entities": ["Eiffel Tower", "Paris"], "triples": [["Eiffel Tower", "built by", "?"]]}',
    "Gustave Eiffel built the Eiffel Tower in Paris. So the answer is Gustave Eiffel.",
    "yes",
    "Eiffel Tower builder; Paris landmark",
    "[END]",
]


# wall times and creation stamps differ between runs; the contract fields added by the
# restructuring (issue 17) are not part of the old outputs and are compared by their own tests
DROPPED = {
    "wall_s", "elapsed_s", "created", "retrieved_ids", "shown_ids", "decisions",
    "cached_tokens", "instruction_tokens", "passage_tokens",
}  # fmt: skip
# ties in the tiny store's scores make these runs' retrieval order vary between processes
UNSTABLE = {"missing_knowledge|Who wrote Hamlet?"}


def pick(messages: list[BaseMessage]) -> str:
    text = "\n".join(f"{m.type}:{m.content}" for m in messages)
    digest = int(hashlib.sha256(text.encode("utf-8")).hexdigest(), 16)
    return REPLIES[digest % len(REPLIES)]


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if k not in DROPPED}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, float):
        # 4 places: vector scores differ in the 6th between CPUs (AVX2 and AVX-512 BLAS kernels
        # sum in other orders: 0.261766 against 0.261765 on 2026-11-24)
        return round(value, 4)
    return value


def run(out: Path) -> None:
    from gaprag import build_graph
    from gaprag.stores.embeddings import HashingEmbedder
    from gaprag.stores.pairs import PairStore
    from gaprag.stores.store import Store
    from gaprag.testing import ScriptedChatModel

    tmp = Path(tempfile.mkdtemp(prefix="gaprag-golden-"))
    os.environ["GAPRAG_HOME"] = str(tmp / "home")
    store = Store.build(tmp / "store", DOCS, embedder=HashingEmbedder(), progress=False)
    pairs = PairStore.open(tmp / "home" / "feedback.sqlite")
    for doc in DOCS[:4]:
        pairs.add(f"What does the passage about {doc['title']} say?", doc["title"], doc["text"])
    result: dict[str, Any] = {}
    # the snapshot is compared as data: keys that vary between identical runs are skipped
    for method in METHODS:
        for question in QUESTIONS:
            llm = ScriptedChatModel(default=pick)
            graph = build_graph(method, llm=llm, retriever=store)
            output = graph.invoke({"question": question})
            prompts = ["\n".join(f"{r}:{t}" for r, t in c["messages"]) for c in llm.calls]
            key = f"{method}|{question}"
            if key in UNSTABLE:
                continue
            result[key] = _clean(
                {
                    "output": dict(output),
                    "prompts": prompts,
                    "replies": [c["reply"] for c in llm.calls],
                }
            )
    out.write_text(json.dumps(result, indent=1, sort_keys=True, default=str), encoding="utf-8")
    print(f"wrote {out}: {len(result)} runs")


if __name__ == "__main__":
    run(Path(sys.argv[1]))
