"""The paper's evaluation ladder: S, S ∪ E, S ∪ E ∪ O over one dataset.

All three sets live in **one** pair store, told apart by their source label; a tier is a
``sources`` filter on the same store, so the ladder costs one build:

- **S** (``synthetic``): the LLM writes Q&A pairs for every chunk of the dataset's corpus
  (the union of its questions' paragraphs, one chunk per paragraph).
- **E** (``expert``): for every test question, the expert LLM paraphrases it and answers the
  paraphrase from the question's supporting paragraphs; the stored triple is (paraphrase,
  expert answer, golden chunk). Expert answers are stored as produced, never corrected.
- **O** (``oracle``): (test question, gold answer, golden chunk). An **upper bound**, not a
  realistic setting: every test query finds its own question and answer in the store.

Every step is resumable (finished items are recorded in the store). Typical use::

    from lab.ladder import build_ladder, evaluate_ladder
    store = build_ladder("hotpotqa", "ladder-hotpotqa.sqlite", llm=llm, limit=200)
    print(evaluate_ladder(store, "hotpotqa", llm=llm, limit=200))
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from gaprag.datasets import Dataset, Example, load_dataset
from gaprag.errors import InputError
from gaprag.graphs.rag_ef.synth import PROMPTS, SynthReport, chunk_text, synthesize
from gaprag.llm.client import LLM, Messages
from gaprag.llm.factory import resolve_llm
from gaprag.metrics import accuracy, exact_match, f1_score, normalize_answer
from gaprag.nodes import clean_answer, truncate_words
from gaprag.stores.documents import Document
from gaprag.stores.embeddings import Embedder
from gaprag.stores.pairs import PairStore

TIERS: dict[str, tuple[str, ...]] = {
    "S": ("synthetic",),
    "S+E": ("synthetic", "expert"),
    "S+E+O": ("synthetic", "expert", "oracle"),
}
TIER_LABELS: dict[str, str] = {
    "S": "S (synthetic)",
    "S+E": "S ∪ E (synthetic + expert feedback)",
    "S+E+O": "S ∪ E ∪ O (oracle: upper bound, not a realistic setting)",
}


def golden_chunk(ex: Example) -> Document | None:
    """The supporting paragraph that contains a gold answer, else the first supporting one,
    else any paragraph containing the answer, else None."""
    by_id = {p["id"]: p for p in ex.paragraphs}
    supporting = [by_id[s] for s in ex.supporting if s in by_id]

    def has_answer(doc: Document) -> bool:
        text = normalize_answer(chunk_text(doc))
        return any(normalize_answer(a) and normalize_answer(a) in text for a in ex.answers)

    for doc in supporting:
        if has_answer(doc):
            return doc
    if supporting:
        return supporting[0]
    for doc in ex.paragraphs:
        if has_answer(doc):
            return doc
    return None


def _usable(examples: Sequence[Example]) -> list[tuple[Example, Document]]:
    out = []
    for ex in examples:
        gold = golden_chunk(ex)
        if gold is not None and ex.answers and not ex.is_multiple_choice:
            out.append((ex, gold))
    return out


def build_oracle(store: PairStore, examples: Sequence[Example]) -> int:
    """O: one (question, first gold answer, golden chunk) pair per usable test item."""
    items = _usable(examples)
    store.add_many(
        [(ex.question, ex.answers[0], chunk_text(gold)) for ex, gold in items],
        source="oracle",
        chunk_ids=[gold["id"] for _, gold in items],
    )
    return len(items)


NEAR_COPY = 0.8
"""Word-overlap F1 at or above which a paraphrase counts as a near copy of its original."""
REWRITES = 4
"""How many sampled rewrites may replace a near-copy paraphrase (:func:`paraphrase`)."""
REWRITE_TEMPERATURE = 0.8
"""The temperature of the sampled rewrites."""


def paraphrase_overlap(question: str, original: str) -> tuple[float, bool]:
    """How close a paraphrase is to the question it rewords: its word-overlap F1 against it
    (the answer metric's normalisation: 1.0 = the same words, whatever the order) and whether
    the two are identical after normalisation."""
    return f1_score(question, [original]), normalize_answer(question) == normalize_answer(original)


def names_and_numbers(question: str) -> list[str]:
    """The words a rewording must keep: the question's capitalised words after the first and
    its words with digits, normalised (articles drop out)."""
    out = []
    for i, word in enumerate(question.split()):
        bare = word.lstrip("\"'(“‘")
        named = (i > 0 and bare[:1].isupper()) or any(c.isdigit() for c in word)
        if named and (norm := normalize_answer(word)):
            out.append(norm)
    return out


def keeps_names(rewrite: str, question: str) -> bool:
    """Whether ``rewrite`` still names everything ``question`` names (a word may gain a
    suffix: "Massenet" is kept by "Massenet's")."""
    words = normalize_answer(rewrite).split()
    return all(any(w.startswith(n) for w in words) for n in names_and_numbers(question))


class Paraphrase(NamedTuple):
    text: str
    #: None: the greedy (temperature 0) rewrite; else the seed of the sampled rewrite kept
    seed: int | None = None


def _rewrite(llm: LLM, messages: Messages, **sampling: Any) -> str:
    reply = llm.generate(messages, max_tokens=96, **sampling)
    return clean_answer(reply).removeprefix("Question:").strip()


def paraphrase(
    llm: LLM, question: str, *, rewrites: int = REWRITES, temperature: float = REWRITE_TEMPERATURE
) -> Paraphrase:
    """The expert's rewrite of a test question.

    First at temperature 0, asked once more if it comes back unchanged. A small model still
    often returns a near copy (word-overlap F1 >= ``NEAR_COPY``), and a near copy makes E an
    oracle. So a near copy is replaced: up to ``rewrites`` rewrites are sampled at
    ``temperature`` with seeds 1, 2, ... (repeatable on a repeatable endpoint), and the first
    that is no near copy, keeps the question's names and numbers (:func:`keeps_names`) and is
    still a question is kept; if none is, the greedy rewrite stays. ``rewrites=0`` keeps the
    greedy rewrite whatever its overlap (how E was first built)."""
    messages = PROMPTS["paraphrase"].render(question=question)
    out = _rewrite(llm, messages)
    if normalize_answer(out) == normalize_answer(question) or not out:
        retry = [
            *messages,
            ("user", "That is the same wording. Rewrite it with different words and word order."),
        ]
        out = _rewrite(llm, retry) or out
    out = out or question
    if rewrites <= 0 or paraphrase_overlap(out, question)[0] < NEAR_COPY:
        return Paraphrase(out)
    asks = question.rstrip().endswith("?")
    for seed in range(1, rewrites + 1):
        candidate = _rewrite(llm, messages, temperature=temperature, seed=seed)
        if (
            candidate
            and (candidate.endswith("?") or not asks)
            and paraphrase_overlap(candidate, question)[0] < NEAR_COPY
            and keeps_names(candidate, question)
        ):
            return Paraphrase(candidate, seed)
    return Paraphrase(out)


def expert_answer(llm: LLM, question: str, document: str) -> str:
    messages = PROMPTS["expert_answer"].render(
        document=truncate_words(document, 600), question=question
    )
    return clean_answer(llm.generate(messages, max_tokens=48))


def build_expert(
    store: PairStore,
    examples: Sequence[Example],
    llm: LLM,
    *,
    rewrites: int = REWRITES,
    progress: bool = True,
) -> int:
    """E: (paraphrase, expert answer, golden chunk) per usable test item; resumable.
    ``rewrites``: see :func:`paraphrase`; when above 0 the pair's metadata records which
    sampled rewrite was kept (``rewrite_seed``, None for the greedy one)."""
    job = "ladder:expert"
    done = store.processed(job)
    items = [(ex, gold) for ex, gold in _usable(examples) if ex.id not in done]
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(items), desc="expert feedback (E)", unit="question")
    added = 0
    try:
        for ex, gold in items:
            para = paraphrase(llm, ex.question, rewrites=rewrites)
            by_id = {p["id"]: p for p in ex.paragraphs}
            docs = [by_id[s] for s in ex.supporting if s in by_id] or [gold]
            answer = expert_answer(llm, para.text, "\n\n".join(chunk_text(d) for d in docs))
            if answer:
                meta: dict[str, Any] = {"origin_id": ex.id, "original_question": ex.question}
                if rewrites > 0:
                    meta["rewrite_seed"] = para.seed
                store.add(
                    para.text,
                    answer,
                    chunk_text(gold),
                    source="expert",
                    chunk_id=gold["id"],
                    meta=meta,
                )
                added += 1
            store.mark_processed(job, [ex.id])
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return added


def write_first_questions(dataset: str | Path, limit: int, path: str | Path) -> Path:
    """The first ``limit`` records of a dataset file as a dataset file of their own, so S is
    built from (and the questions searched in) the corpus of those questions only. The file is
    rewritten only when its text would change."""
    lines = load_dataset(dataset).path.read_text(encoding="utf-8").splitlines()
    text = "\n".join(lines[:limit]) + "\n"
    target = Path(path)
    if not target.is_file() or target.read_text(encoding="utf-8") != text:
        target.write_text(text, encoding="utf-8")
    return target


def expert_divergence(store: PairStore) -> dict[str, Any]:
    """How far E's questions are from the test questions they reword.

    Per expert pair, :func:`paraphrase_overlap` against its original. E is an oracle to the
    degree its questions are the test questions: reported as the mean overlap, the number
    identical after normalisation, and the number with overlap >= ``NEAR_COPY`` (near copies)."""
    originals = {
        pid: str(m["original_question"])
        for pid, m in store.metadata(source="expert").items()
        if m.get("original_question")
    }
    questions = {p["id"]: p["question"] for p in store.list(source="expert")}
    scored = [
        paraphrase_overlap(questions[pid], orig)
        for pid, orig in originals.items()
        if pid in questions
    ]
    overlaps = [o for o, _ in scored]
    n = len(scored)
    return {
        "pairs": n,
        "mean_word_overlap_f1": round(sum(overlaps) / n, 3) if n else None,
        "identical": sum(same for _, same in scored),
        "near_copies": sum(o >= NEAR_COPY for o in overlaps),
    }


@dataclass
class LadderBuild:
    synthetic: SynthReport
    expert_added: int
    oracle: int
    store: PairStore = field(repr=False)


def build_ladder(
    dataset: str | Path | Dataset,
    store_path: str | Path,
    *,
    llm: Any = None,
    expert_llm: Any = None,
    embedder: Embedder | None = None,
    limit: int | None = None,
    synth_limit: int | None = None,
    expert_rewrites: int = REWRITES,
    progress: bool = True,
) -> LadderBuild:
    """Build S (whole corpus), E and O (first ``limit`` questions) into one pair store.

    ``llm`` writes S; ``expert_llm`` (default: ``llm``) plays the expert for E — use the
    strongest model available and record which. ``synth_limit`` caps chunks synthesised now.
    ``expert_rewrites``: how many sampled rewrites may replace an expert paraphrase that
    nearly copies its test question (:func:`paraphrase`; 0 keeps it).
    """
    data = dataset if isinstance(dataset, Dataset) else load_dataset(dataset)
    examples = data.select(limit)
    docs = data.documents()
    if not docs:
        raise InputError(f"dataset {data.name!r} has no paragraphs", hint="S needs a corpus")
    gen = resolve_llm(llm)
    expert = resolve_llm(expert_llm) if expert_llm is not None else gen
    store = PairStore.open(store_path, embedder=embedder)
    report = synthesize(store, docs, gen, limit=synth_limit, progress=progress)
    added = build_expert(store, examples, expert, rewrites=expert_rewrites, progress=progress)
    oracle = build_oracle(store, examples)
    if progress:
        print(
            f"gaprag: ladder {data.name}: S {store.count(source='synthetic')} pairs, "
            f"E {store.count(source='expert')}, O {store.count(source='oracle')} (upper bound)",
            file=sys.stderr,
        )
    return LadderBuild(synthetic=report, expert_added=added, oracle=oracle, store=store)


def evaluate_ladder(
    store: PairStore,
    dataset: str | Path | Dataset,
    *,
    llm: Any = None,
    limit: int | None = None,
    tiers: Sequence[str] = ("S", "S+E", "S+E+O"),
    out: str | Path | None = None,
    **options: Any,
) -> dict[str, dict[str, Any]]:
    """Answer the first ``limit`` questions with rag_ef over each tier; EM/F1/acc in percent.

    ``options`` are rag_ef Context fields (e.g. ``similarity="bm25"``). With ``out``, one JSON
    line per (tier, question) is written there.
    """
    from gaprag import build_graph

    data = dataset if isinstance(dataset, Dataset) else load_dataset(dataset)
    examples = data.select(limit)
    unknown = [t for t in tiers if t not in TIERS]
    if unknown:
        raise InputError(f"unknown tier(s) {unknown}", hint="use S, S+E, S+E+O")
    graph = build_graph(
        "rag_ef", llm=resolve_llm(llm), pair_store=store, empty_store_fallback=False, **options
    )
    results: dict[str, dict[str, Any]] = {}
    with ExitStack() as stack:
        fh = stack.enter_context(Path(out).open("w", encoding="utf-8")) if out else None
        for tier in tiers:
            ctx = {"sources": ",".join(TIERS[tier])}
            totals = {"em": 0.0, "f1": 0.0, "acc": 0.0}
            for ex in examples:
                res = graph.invoke({"question": ex.question}, context=ctx)
                pred = str(res.get("answer", ""))
                scores = {
                    "em": exact_match(pred, ex.answers),
                    "f1": f1_score(pred, ex.answers),
                    "acc": accuracy(pred, ex.answers),
                }
                for key, value in scores.items():
                    totals[key] += value
                if fh is not None:
                    row = {
                        "tier": tier,
                        "id": ex.id,
                        "question": ex.question,
                        "answers": ex.answers,
                        "prediction": pred,
                        **scores,
                    }
                    fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                    fh.flush()
            n = max(len(examples), 1)
            results[tier] = {
                "label": TIER_LABELS[tier],
                "n": len(examples),
                **{key: round(100 * value / n, 2) for key, value in totals.items()},
            }
    return results
