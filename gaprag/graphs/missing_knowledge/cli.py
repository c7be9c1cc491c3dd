"""``gaprag kb``: build the question-answer pair knowledge base of missing_knowledge.

``gaprag kb qa-pairs CORPUS... --out FILE`` asks the LLM for question-answer pairs from each
chunk (source ``generated``) and stores them in a :class:`~gaprag.stores.pairs.PairStore`.
The job is resumable: every finished chunk is recorded in the store, so a second run skips it.
``--historical`` imports existing question-answer records instead (source ``historical``, no
LLM). Pairs whose question equals an evaluation question are left out (leakage filter).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator

from gaprag.errors import InputError
from gaprag.llm.client import LLM
from gaprag.metrics import normalize_answer
from gaprag.prompts import load_prompts
from gaprag.stores.documents import read_jsonl

PROMPTS = load_prompts("gaprag.graphs.missing_knowledge")
JOB = "missing_knowledge.qa_pairs"
_CJK = re.compile(r"[\u4e00-\u9fff]")


class QAItem(BaseModel):
    question: str
    answer: str

    @field_validator("question", "answer", mode="before")
    @classmethod
    def _text(cls, value: Any) -> str:
        if isinstance(value, list):  # ["answer"] -> "answer"
            value = ", ".join(str(v) for v in value)
        return "" if value is None else str(value).strip()


class QAList(BaseModel):
    pairs: list[QAItem] = Field(default_factory=list)


def eval_questions(paths: Iterable[str | Path]) -> set[str]:
    """Normalised ``question`` fields of dataset JSONL files (for the leakage filter)."""
    out: set[str] = set()
    for raw in paths:
        path = Path(raw)
        if path.is_dir() or not path.exists():
            continue
        for _, record in read_jsonl(path):
            q = record.get("question")
            if isinstance(q, str) and q.strip():
                out.add(normalize_answer(q))
    return out


def historical_pairs(path: Path) -> list[tuple[str, str, str]]:
    """(question, answer, chunk) from records with ``question`` and ``answer`` (or
    ``answers``: the first); the chunk is ``chunk``/``context`` or the pair's own text."""
    out: list[tuple[str, str, str]] = []
    for lineno, record in read_jsonl(path):
        question = record.get("question")
        answer = record.get("answer")
        if answer is None and isinstance(record.get("answers"), list) and record["answers"]:
            answer = record["answers"][0]
        if not isinstance(question, str) or not question.strip():
            raise InputError(
                f"{path}:{lineno}: field 'question' is missing or empty",
                hint="--historical records need 'question' and 'answer' (or 'answers')",
            )
        if answer is None or not str(answer).strip():
            raise InputError(
                f"{path}:{lineno}: field 'answer' (or 'answers') is missing or empty",
                hint="--historical records need 'question' and 'answer' (or 'answers')",
            )
        q, a = question.strip(), str(answer).strip()
        chunk = record.get("chunk") or record.get("context") or f"Q: {q}\nA: {a}"
        out.append((q, a, str(chunk)))
    return out


def generate_pairs(
    llm: LLM, passage: str, *, max_pairs: int, max_tokens: int = 384, max_chars: int = 2000
) -> list[QAItem]:
    """The LLM's question-answer pairs for one chunk (none if the reply is unusable)."""
    lang = "zh" if _CJK.search(passage) else "en"
    text = passage if len(passage) <= max_chars else passage[:max_chars] + " ..."
    messages = PROMPTS[f"qa_pairs_{lang}"].render(max_pairs=max_pairs, passage=text)
    reply = llm.structured(
        messages, QAList, default=QAList(pairs=[]), max_tokens=max_tokens, call="qa_pairs"
    )
    seen: set[str] = set()
    out: list[QAItem] = []
    for item in reply.value.pairs:
        key = normalize_answer(item.question)
        if item.question and item.answer and key not in seen:
            seen.add(key)
            out.append(item)
    return out[:max_pairs]


def _llm(args: argparse.Namespace) -> LLM:
    from gaprag.llm.factory import default_llm, openai_llm

    if args.base_url:
        return openai_llm(args.base_url, args.model or None)
    return default_llm()


def cmd_qa_pairs(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from gaprag.stores.embeddings import embedder_by_name
    from gaprag.stores.pairs import PairStore, chunk_hash

    if args.max_pairs < 1:
        raise InputError(f"--max-pairs must be at least 1, got {args.max_pairs}", hint="e.g. 3")
    if args.limit is not None and args.limit < 0:
        raise InputError(f"--limit must be >= 0, got {args.limit}", hint="e.g. --limit 100")
    for raw in args.exclude_questions or []:
        if not Path(raw).is_file():
            raise InputError(f"no such file: {raw}", hint="--exclude-questions takes dataset JSONL")
    for raw in args.corpus:
        if not Path(raw).exists():
            raise InputError(
                f"no such file or folder: {raw}", hint="give a JSONL file or a folder of .txt/.md"
            )
    out = Path(args.out)
    if out.is_dir():
        raise InputError(f"--out {out} is a folder", hint="give a file path, e.g. qa_pairs.sqlite")
    excluded = eval_questions(args.exclude_questions or [])
    if not args.keep_eval_questions and not args.historical:
        excluded |= eval_questions(args.corpus)  # the corpus's own questions (dataset JSONL)
    embedder = embedder_by_name(args.embedder) if args.embedder else None
    store = PairStore.open(out, embedder=embedder)

    if args.historical:
        items = [it for raw in args.corpus for it in historical_pairs(Path(raw))]
        kept = [it for it in items if normalize_answer(it[0]) not in excluded]
        if args.limit is not None:
            kept = kept[: args.limit]
        before = len(store)
        store.add_many(kept, source="historical", progress=not args.quiet)
        print(
            f"gaprag: {len(store) - before} historical pairs added ({len(items) - len(kept)} "
            f"left out, {len(kept) - (len(store) - before)} already there); "
            f"{out} holds {len(store)} pairs"
        )
        return 0

    from gaprag.stores.loaders import load_documents

    docs = load_documents(args.corpus, chunk_size=args.chunk_size, overlap=0)
    done = store.processed(JOB)
    chunks = [(d, f"{d['title']}: {d['text']}" if d["title"] else d["text"]) for d in docs]
    todo = [(d, text) for d, text in chunks if chunk_hash(text) not in done]
    skipped = len(chunks) - len(todo)
    if args.limit is not None:
        todo = todo[: args.limit]
    llm = _llm(args)
    added = left_out = empty = 0
    bar = tqdm(todo, desc="qa-pairs", unit="chunk", disable=args.quiet, file=sys.stderr)
    for doc, text in bar:
        pairs = generate_pairs(llm, text, max_pairs=args.max_pairs, max_tokens=args.max_tokens)
        good = [p for p in pairs if normalize_answer(p.question) not in excluded]
        left_out += len(pairs) - len(good)
        if good:
            store.add_many(
                [(p.question, p.answer, text) for p in good],
                source="generated",
                chunk_ids=[doc["id"]] * len(good),
            )
            added += len(good)
        else:
            empty += 1
        store.mark_processed(JOB, [chunk_hash(text)])  # only after its pairs are stored
        bar.set_postfix(pairs=added)
    print(
        f"gaprag: {len(todo)} chunks processed ({skipped} already done), {added} pairs added, "
        f"{left_out} left out as evaluation questions, {empty} chunks gave no pairs; "
        f"{out} holds {len(store)} pairs"
    )
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("kb", help="knowledge bases for missing_knowledge")
    sub = p.add_subparsers(dest="kb_command", required=True)
    q = sub.add_parser(
        "qa-pairs",
        help="build a question-answer pair store from a corpus (resumable)",
        description="Ask the LLM for question-answer pairs from each chunk of CORPUS and add "
        "them to the pair store FILE (source 'generated'). Chunks already done are skipped, so "
        "an interrupted run can be started again. With --historical, CORPUS holds "
        "question/answer records that are imported as they are (source 'historical').",
    )
    q.add_argument(
        "corpus", nargs="+", help="JSONL {id,title,text}, dataset JSONL, or folder of .txt/.md"
    )
    q.add_argument("--out", required=True, help="the pair store file (created if missing)")
    q.add_argument("--max-pairs", type=int, default=3, help="pairs asked for per chunk")
    q.add_argument("--limit", type=int, help="process at most this many new chunks / records")
    q.add_argument(
        "--historical",
        action="store_true",
        help="CORPUS holds {question, answer|answers[, chunk]} records: import, no LLM",
    )
    q.add_argument(
        "--exclude-questions",
        action="append",
        metavar="DATASET",
        help="leave out pairs whose question equals one of this dataset's (repeatable)",
    )
    q.add_argument(
        "--keep-eval-questions",
        action="store_true",
        help="do not leave out pairs that repeat the corpus's own dataset questions",
    )
    q.add_argument("--chunk-size", type=int, default=299, help="words per chunk for text files")
    q.add_argument("--max-tokens", type=int, default=384, help="output cap per LLM call")
    q.add_argument("--embedder", help="embedder name for a new store (default: MiniLM)")
    q.add_argument("--base-url", help="OpenAI-compatible endpoint (default: GAPRAG_BASE_URL)")
    q.add_argument("--model", help="model name for --base-url")
    q.add_argument("--quiet", action="store_true", help="no progress bar")
    q.set_defaults(func=cmd_qa_pairs)
