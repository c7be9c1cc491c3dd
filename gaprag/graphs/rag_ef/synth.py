"""The synthetic set S: the LLM writes Q&A pairs for every corpus chunk (paper's Appendix A).

``synthesize`` is resumable: each chunk's pairs are committed with the chunk marked done in the
store, so a rerun after an interruption skips finished chunks (chunks that yielded no pairs
included) and loses at most the chunk in flight.
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gaprag.aio import run_sync
from gaprag.errors import InputError
from gaprag.llm.client import LLM
from gaprag.prompts import load_prompts
from gaprag.stores.documents import Document
from gaprag.stores.pairs import PairStore, chunk_hash, normalize_text

PROMPTS = load_prompts("gaprag.graphs.rag_ef")
MAX_ANSWER_CHARS = 300

_BULLET = r"(?:\d+[.)]\s*|[-*•]\s*)?"
_Q_LINE = re.compile(rf"^\s*{_BULLET}Q\s*[:：]\s*(.+)$", re.I)
_A_LINE = re.compile(rf"^\s*{_BULLET}A\s*[:：]\s*(.+)$", re.I)
_A_INLINE = re.compile(r"\s+A\s*[:：]\s*", re.I)
_Q_SPLIT = re.compile(r"(?<=\S)[ \t]+(?=Q\s*[:：])")
_QUOTES = "\"'“”‘’`"


def _clean(text: str) -> str:
    return text.strip().strip(_QUOTES).strip()


def parse_qa(text: str) -> list[tuple[str, str]]:
    """``Q: … A: …`` pairs from a generation (numbering, bullets, one-line runs tolerated).

    Pairs with an empty question or answer, answers over 300 characters and repeats are dropped.
    """
    text = _Q_SPLIT.sub("\n", text.replace("**", ""))
    lines = text.splitlines()
    out: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    i = 0
    while i < len(lines):
        m = _Q_LINE.match(lines[i])
        i += 1
        if not m:
            continue
        rest = m.group(1)
        parts = _A_INLINE.split(rest, maxsplit=1)
        if len(parts) == 2:
            question, answer = parts
        else:
            question, answer = rest, ""
            if i < len(lines) and (a := _A_LINE.match(lines[i])):
                answer = a.group(1)
                i += 1
        question, answer = _clean(question), _clean(answer)
        if not question or not answer or len(answer) > MAX_ANSWER_CHARS:
            continue
        key = (normalize_text(question).lower(), normalize_text(answer).lower())
        if key not in seen:
            seen.add(key)
            out.append((question, answer))
    return out


def chunk_text(doc: Document) -> str:
    """How a corpus document is stored as a pair's chunk (title first, when there is one)."""
    return f"{doc['title']}: {doc['text']}" if doc["title"] else doc["text"]


#: the instruction that writes set S: ``tuned`` (answerable from the passage alone, short
#: answers, one pair a line) or ``paper`` (the paper's Appendix A instruction only)
SynthPrompt = Literal["tuned", "paper"]
_SYNTH_PROMPTS: dict[str, str] = {"tuned": "generate_qa", "paper": "generate_qa_paper"}


async def agenerate_pairs(
    llm: LLM, chunk: str, *, max_tokens: int = 512, prompt: SynthPrompt = "tuned"
) -> list[tuple[str, str]]:
    """One LLM call: the Q&A pairs for ``chunk``, written under ``prompt``."""
    messages = PROMPTS[_SYNTH_PROMPTS[prompt]].render(chunk=chunk)
    return parse_qa(await llm.agenerate(messages, max_tokens=max_tokens))


@dataclass
class SynthReport:
    chunks: int = 0  # chunks in the corpus
    skipped: int = 0  # already done by an earlier run
    processed: int = 0  # generated in this run
    empty: int = 0  # generated, but no pair parsed
    pairs: int = 0  # pairs added in this run


def synthesize(
    store: PairStore,
    docs: Sequence[Document],
    llm: LLM,
    *,
    source: str = "synthetic",
    limit: int | None = None,
    progress: bool = True,
    max_tokens: int = 512,
    concurrency: int = 1,
    prompt: SynthPrompt = "tuned",
) -> SynthReport:
    """Write Q&A pairs for every chunk not done yet; ``limit`` caps chunks generated this run;
    ``prompt`` picks the instruction (``tuned``, or ``paper``: Appendix A's alone).

    ``concurrency``: LLM calls in flight at once (an endpoint that serves several requests
    together, such as vLLM or a llama.cpp server with several slots, gets through a corpus
    that much sooner). Chunks are still written in corpus order, each with its done mark, so
    an interruption loses at most the calls in flight. Inside a running event loop, await
    :func:`asynthesize` instead."""
    if concurrency < 1:
        raise InputError(f"concurrency must be >= 1, not {concurrency}", hint="use 1 or more")
    run = asynthesize(
        store,
        docs,
        llm,
        source=source,
        limit=limit,
        progress=progress,
        max_tokens=max_tokens,
        concurrency=concurrency,
        prompt=prompt,
    )
    if concurrency == 1:
        return run_sync(run)  # one call at a time: no event loop needed
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run)
    run.close()
    raise InputError(
        "synthesize(concurrency > 1) cannot start an event loop inside a running one",
        hint="await gaprag.graphs.rag_ef.synth.asynthesize(...) instead",
    )


async def asynthesize(
    store: PairStore,
    docs: Sequence[Document],
    llm: LLM,
    *,
    source: str = "synthetic",
    limit: int | None = None,
    progress: bool = True,
    max_tokens: int = 512,
    concurrency: int = 1,
    prompt: SynthPrompt = "tuned",
) -> SynthReport:
    """:func:`synthesize` as a coroutine: up to ``concurrency`` calls in flight, results
    written in corpus order."""
    job = f"synthesize:{source}"
    done = store.processed(job)
    todo = [d for d in docs if chunk_hash(chunk_text(d)) not in done]
    report = SynthReport(chunks=len(docs), skipped=len(docs) - len(todo))
    if limit is not None:
        todo = todo[: max(limit, 0)]
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(todo), desc="synthesizing Q&A", unit="chunk")

    def write(doc: Document, text: str, pairs: list[tuple[str, str]]) -> None:
        if pairs:
            store.add_many(
                [(q, a, text) for q, a in pairs], source=source, chunk_ids=[doc["id"]] * len(pairs)
            )
        else:
            report.empty += 1
        store.mark_processed(job, [chunk_hash(text)])
        report.processed += 1
        report.pairs += len(pairs)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(pairs=report.pairs)

    def generate(text: str) -> Coroutine[Any, Any, list[tuple[str, str]]]:
        return agenerate_pairs(llm, text, max_tokens=max_tokens, prompt=prompt)

    flight: deque[tuple[Document, str, asyncio.Task[list[tuple[str, str]]]]] = deque()
    try:
        for doc in todo:
            text = chunk_text(doc)
            if concurrency == 1:
                write(
                    doc,
                    text,
                    await agenerate_pairs(llm, text, max_tokens=max_tokens, prompt=prompt),
                )
                continue
            flight.append((doc, text, asyncio.create_task(generate(text))))
            if len(flight) >= concurrency:
                first, first_text, task = flight.popleft()
                write(first, first_text, await task)
        while flight:
            first, first_text, task = flight.popleft()
            write(first, first_text, await task)
    finally:
        for _, _, task in flight:
            task.cancel()
        if bar is not None:
            bar.close()
    return report
