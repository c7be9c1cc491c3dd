"""Labelled examples for the R-Feedback Model: ``(question, entities, pool)`` and whether the
pool is sufficient (adapted to gaprag's data; see docs/methods/rfm_rag.md).

Two sources:

``paragraphs`` (the default, no LLM needed; the paper's recipe on our data). The bundled
multi-hop sets (``gaprag/data/eval``) give each question its paragraphs and the ids of the
supporting ones:

* ``sufficient`` (y=1): every sentence of every supporting paragraph, shuffled;
* ``partial`` (y=0): the sentences of a non-empty proper subset of the supporting paragraphs,
  plus sentences from distractor paragraphs, to about the same length;
* ``irrelevant`` (y=0): only distractor sentences, the same number as the positive has.

Half the examples are positive, a quarter of each negative kind; the question's entities come
from a capitalised-span heuristic (:func:`heuristic_entities`).

``graph_pools``: the pools the graph itself built, read from the traces of ``gaprag eval``
runs of rfm_rag on calibration questions (index >= 60): each judged round's pool (curated
fact sentences, the LLM's entities) and the final pool, labelled ``support`` (every gold
supporting paragraph is behind some pool fact) or ``answer`` (the answer the method would have
given from that pool, recorded at every decision of a ``calibration`` run, scores F1 >= 0.5).
These are the inputs the model sees at run time.

Questions are split into train / validation (early stopping) / calibration (Platt scaling) /
test (the reported held-out metrics), disjoint (:class:`FeedbackSplits`). No evaluation
question is ever used: bundled sets are read from :data:`~gaprag.datasets.CALIBRATION_START`
on (:func:`~gaprag.datasets.calibration_slice`), and every record, whatever its source, is
matched by id and question text against the bundled sets and refused by
:func:`~gaprag.datasets.check_no_overlap` if it is one of their first questions.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from gaprag.datasets import CALIBRATION_START, calibration_slice, check_no_overlap
from gaprag.errors import GapragError
from gaprag.graphs.rfm_rag.feedback_model.features import split_sentences
from gaprag.metrics import f1_score
from gaprag.traces import iter_traces

Kind = Literal["sufficient", "partial", "irrelevant"]
PoolLabel = Literal["support", "answer"]
DEFAULT_DATASETS: tuple[str, ...] = ("hotpotqa", "2wikimultihopqa", "musique")
EVAL_RESERVED = CALIBRATION_START
"""Questions 0-59 of every bundled set are reserved for evaluation: never trained on."""
DEFAULT_SKIP_FIRST = EVAL_RESERVED
ANSWER_F1 = 0.5
"""``answer`` label: the pool is sufficient when the answer given from it has F1 >= this."""


# -- question entities without an LLM (training data only) --------------------------------
_CONNECTORS = {"of", "the", "de", "la", "le", "du", "von", "van", "der", "di", "da"}
_STOP_STARTS = {
    "who", "what", "which", "when", "where", "why", "how", "is", "are", "was", "were", "do",
    "does", "did", "the", "a", "an", "in", "on", "of", "for", "at", "by", "from", "to", "and",
    "whose", "whom", "can", "could", "has", "have", "had", "will", "would", "should",
    "both", "between", "name", "this", "that", "these", "those",
}  # fmt: skip
_TOKEN = re.compile(r"\([^)]*\)|\"[^\"]+\"|[\w'’.\-&]+", re.UNICODE)


def heuristic_entities(question: str) -> list[str]:
    """Capitalised spans and quoted titles of a question (the training-time stand-in for the
    LLM's Prompt 2 entities, which would cost one LLM call per training question)."""
    out: list[str] = []
    for quoted in re.findall(r"\"([^\"]+)\"", question):
        out.append(quoted.strip())
    tokens = _TOKEN.findall(question.replace("?", " "))
    span: list[str] = []

    def flush() -> None:
        while span and span[-1].lower() in _CONNECTORS:
            span.pop()
        if span:
            name = " ".join(span).strip(" ,.'’")
            if name and (len(span) > 1 or name.lower() not in _STOP_STARTS):
                out.append(name)
        span.clear()

    for i, tok in enumerate(tokens):
        word = tok.strip(",;:")
        capital = word[:1].isupper() or (word[:1].isdigit() and len(word) == 4)
        if word.startswith("(") and span:
            span.append(word)  # "Move (1970 film)"
            continue
        if capital and not (i == 0 and word.lower() in _STOP_STARTS):
            span.append(word)
            if tok.endswith((",", ";", ":")):
                flush()
        elif span and word.lower() in _CONNECTORS:
            span.append(word)
        else:
            flush()
    flush()
    seen: set[str] = set()
    unique: list[str] = []
    for e in out:
        e = re.sub(r"'s$|’s$", "", e).strip()
        if e and e.casefold() not in seen:
            seen.add(e.casefold())
            unique.append(e)
    return unique


@dataclass
class QuestionMaterial:
    qid: str
    question: str
    entities: list[str]
    support: list[list[str]]  # sentences of each supporting paragraph
    distractors: list[str]  # sentences of non-supporting paragraphs

    @property
    def support_sentences(self) -> list[str]:
        return [s for para in self.support for s in para]


@dataclass
class Sample:
    qid: str
    question: str
    entities: list[str]
    sentences: list[str]
    label: int
    kind: str  # paragraphs: sufficient / partial / irrelevant; graph pools: round1, round2...


@dataclass
class FeedbackSplits:
    """Question-disjoint splits of labelled examples."""

    train: list[Sample]
    val: list[Sample]
    test: list[Sample] = field(default_factory=list)
    cal: list[Sample] = field(default_factory=list)
    """Held-out questions for the Platt calibration (neither trained on nor reported)."""


# -- loading ------------------------------------------------------------------------------
def load_records(name: str, *, skip_first: int = DEFAULT_SKIP_FIRST) -> list[dict[str, Any]]:
    """Records of a bundled eval set (``hotpotqa``...) from index ``skip_first`` on (the
    shared :func:`~gaprag.datasets.calibration_slice`: refused below 60), or of a JSONL
    path after its first ``skip_first`` (its records are checked by content in training)."""
    path = Path(name)
    if path.suffix == ".jsonl" and path.is_file():
        lines = path.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()][skip_first:]
    res = resources.files("gaprag.data") / "eval" / f"{name}.dev.jsonl"
    if not res.is_file():
        raise GapragError(
            f"no bundled multi-hop set {name!r}",
            hint="use hotpotqa, 2wikimultihopqa, musique or a JSONL path",
        )
    text = res.read_text(encoding="utf-8")
    records = [json.loads(line) for line in text.splitlines() if line.strip()]
    if skip_first >= len(records) >= CALIBRATION_START:
        return []
    return calibration_slice(records, start=skip_first, what="R-Feedback training")


def question_material(
    record: dict[str, Any],
    *,
    entity_fn: Callable[[str], list[str]] = heuristic_entities,
    max_distractor_paragraphs: int = 6,
    rng: random.Random | None = None,
) -> QuestionMaterial | None:
    """Supporting and distractor sentences of one record; None if it has < 2 supporting
    paragraphs or no distractors (a partial pool needs both)."""
    supporting = set(record.get("supporting") or [])
    support: list[list[str]] = []
    others: list[list[str]] = []
    for para in record.get("paragraphs") or []:
        sentences = split_sentences(str(para.get("text", "")))
        if not sentences:
            continue
        (support if para.get("id") in supporting else others).append(sentences)
    if len(support) < 2 or not others:
        return None
    if rng is not None and len(others) > max_distractor_paragraphs:
        others = rng.sample(others, max_distractor_paragraphs)
    else:
        others = others[:max_distractor_paragraphs]
    question = str(record["question"])
    return QuestionMaterial(
        qid=str(record.get("id", question)),
        question=question,
        entities=entity_fn(question),
        support=support,
        distractors=[s for para in others for s in para],
    )


def _question_key(text: str) -> str:
    return " ".join(str(text).split()).casefold()


def bundled_indices() -> dict[str, tuple[dict[str, int], dict[str, int]]]:
    """For every bundled set: (id -> index, normalised question text -> first index)."""
    from gaprag.datasets import SUFFIX, bundled, data_dir

    out: dict[str, tuple[dict[str, int], dict[str, int]]] = {}
    for name in bundled():
        lines = (data_dir() / f"{name}{SUFFIX}").read_text(encoding="utf-8").splitlines()
        by_id: dict[str, int] = {}
        by_text: dict[str, int] = {}
        for i, r in enumerate(json.loads(line) for line in lines if line.strip()):
            if r.get("id"):
                by_id.setdefault(str(r["id"]), i)
            if r.get("question"):
                by_text.setdefault(_question_key(r["question"]), i)
        out[name] = (by_id, by_text)
    return out


def refuse_evaluation_questions(records: Sequence[dict[str, Any]]) -> None:
    """Raise :class:`InputError` if any record is one of the reserved questions (index < 60)
    of a bundled set, matched by id or by question text (so a renamed copy is caught too);
    the refusal is the shared one, :func:`gaprag.datasets.check_no_overlap`."""
    indices: dict[str, list[int]] = {}
    for name, (by_id, by_text) in bundled_indices().items():
        for r in records:
            i = by_id.get(str(r.get("id", "")))
            if i is None:
                i = by_text.get(_question_key(r.get("question", "")))
            if i is not None:
                indices.setdefault(name, []).append(i)
    for name, found in indices.items():
        check_no_overlap(found, what=f"R-Feedback training ({name})")


# -- building samples ---------------------------------------------------------------------
def _negative(m: QuestionMaterial, kind: Kind, rng: random.Random) -> list[str]:
    n = len(m.support_sentences)
    if kind == "irrelevant":
        return rng.sample(m.distractors, min(n, len(m.distractors)))
    k = rng.randint(1, len(m.support) - 1)  # a non-empty proper subset of the paragraphs
    kept = [s for para in rng.sample(m.support, k) for s in para]
    target = max(n + rng.choice((-1, 0, 1)), len(kept) + 1)
    fill = rng.sample(m.distractors, min(max(target - len(kept), 1), len(m.distractors)))
    pool = kept + fill
    rng.shuffle(pool)
    return pool


def build_samples(
    materials: Sequence[QuestionMaterial], n: int, rng: random.Random
) -> list[Sample]:
    """``n`` samples (rounded down to even): one positive and one negative per question per
    pass, negatives alternating irrelevant / partial, cycling through the questions."""
    out: list[Sample] = []
    if not materials or n < 2:
        return out
    order = list(materials)
    negative_kinds: tuple[Kind, Kind] = ("irrelevant", "partial")
    turn = 0
    while len(out) + 2 <= n:
        rng.shuffle(order)
        for m in order:
            if len(out) + 2 > n:
                break
            positive = list(m.support_sentences)
            rng.shuffle(positive)
            kind = negative_kinds[turn % 2]
            turn += 1
            out.append(Sample(m.qid, m.question, m.entities, positive, 1, "sufficient"))
            out.append(Sample(m.qid, m.question, m.entities, _negative(m, kind, rng), 0, kind))
    return out


def build_splits(
    records: Iterable[dict[str, Any]],
    *,
    n_train: int = 10_000,
    n_val: int = 800,
    n_test: int = 800,
    n_cal: int = 800,
    val_fraction: float = 0.15,
    test_fraction: float = 0.15,
    cal_fraction: float = 0.1,
    seed: int = 0,
    entity_fn: Callable[[str], list[str]] = heuristic_entities,
) -> FeedbackSplits:
    """Balanced samples from question-disjoint train / validation / calibration / test splits."""
    rng = random.Random(seed)
    materials = [
        m for r in records if (m := question_material(r, entity_fn=entity_fn, rng=rng)) is not None
    ]
    if len(materials) < 3:
        raise GapragError(
            f"only {len(materials)} usable questions (need >= 3 with >= 2 supporting paragraphs)",
            hint="add datasets or lower --skip-first",
        )
    rng.shuffle(materials)
    val_m, cal_m, test_m, train_m = split_by_question(
        materials,
        val=val_fraction if n_val else 0.0,
        cal=cal_fraction if n_cal else 0.0,
        test=test_fraction if n_test else 0.0,
    )
    return FeedbackSplits(
        train=build_samples(train_m, n_train, rng),
        val=build_samples(val_m, n_val, rng),
        test=build_samples(test_m, n_test, rng),
        cal=build_samples(cal_m, n_cal, rng),
    )


def split_by_question(
    items: Sequence[Any], *, val: float, cal: float, test: float
) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
    """(validation, calibration, test, train) parts of an already shuffled list of questions
    (or of per-question groups): at least one question in each part whose fraction is > 0."""
    sizes = [max(1, math.ceil(len(items) * f)) if f > 0 else 0 for f in (val, cal, test)]
    parts: list[list[Any]] = []
    start = 0
    for size in sizes:
        parts.append(list(items[start : start + size]))
        start += size
    return parts[0], parts[1], parts[2], list(items[start:])


# -- graph pools: what the graph built, read from `gaprag eval` traces ------------------------
def graph_traces(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    """The usable rfm_rag traces (of rfm_rag or a variant of it, finished, with the graph's
    output) under the given run folders (``gaprag eval --out``), trace folders or files."""
    return [
        t
        for t in iter_traces(paths)
        if t.get("base_method", t.get("method")) == "rfm_rag"
        and not t.get("error")
        and isinstance(t.get("extra"), dict)
    ]


def pool_snapshots(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """Each judged round's pool and the final pool of one traced question:
    ``{round, sentences, passages, answer}``; the final pool only when it differs from the
    last judged one (a loop stopped by the judge answers from that same pool)."""
    question = str(trace.get("input", ""))
    answers_by_round = {
        d.get("round"): d.get("answer")
        for d in trace.get("decisions") or []
        if isinstance(d, dict) and d.get("node") == "feedback_classifier"
    }
    out: list[dict[str, Any]] = []
    for rec in trace.get("trace") or []:
        if isinstance(rec, dict) and rec.get("node") == "feedback_classifier" and "pool" in rec:
            out.append(
                {
                    "round": int(rec.get("round", 0)),
                    "sentences": [str(t) for t in rec["pool"]],
                    "passages": [str(i) for i in rec.get("pool_passages") or []],
                    "answer": answers_by_round.get(rec.get("round")),
                }
            )
    pool = [
        e
        for e in trace["extra"].get("evidence_pool") or []
        if isinstance(e, dict) and e.get("question", question) == question
    ]
    final = {
        "round": int(trace.get("iterations") or 0),
        "sentences": [str(e.get("text", "")) for e in pool],
        "passages": sorted({str(i) for e in pool for i in e.get("source_passage_ids") or []}),
        "answer": trace.get("prediction"),
    }
    if not out or out[-1]["sentences"] != final["sentences"]:
        out.append(final)
    return out


def graph_pool_samples(
    paths: Sequence[str | Path], *, label: PoolLabel = "support", answer_f1: float = ANSWER_F1
) -> list[Sample]:
    """Labelled samples from the pools rfm_rag runs built (see the module docstring). Refuses
    any traced question that is an evaluation question (index < 60 of a bundled set)."""
    traces = graph_traces(paths)
    refuse_evaluation_questions(
        [{"id": t.get("id", ""), "question": t.get("input", "")} for t in traces]
    )
    samples: list[Sample] = []
    for t in traces:
        qid = f"{t.get('dataset', '')}/{t.get('id', '')}"
        entities = [str(e) for e in t["extra"].get("entities") or []]
        gold = {str(i) for i in t.get("supporting") or []}
        for snap in pool_snapshots(t):
            if label == "support":
                if not gold:
                    continue
                y = int(gold <= set(snap["passages"]))
            else:
                if snap["answer"] is None:
                    continue
                y = int(f1_score(str(snap["answer"]), t.get("answers") or []) >= answer_f1)
            samples.append(
                Sample(
                    qid,
                    str(t.get("input", "")),
                    entities,
                    snap["sentences"],
                    y,
                    f"round{snap['round']}",
                )
            )
    return samples


def graph_pool_splits(
    samples: Sequence[Sample],
    *,
    val_fraction: float = 0.15,
    cal_fraction: float = 0.15,
    test_fraction: float = 0.2,
    seed: int = 0,
) -> FeedbackSplits:
    """Question-disjoint splits of graph-pool samples (all of a question's rounds together)."""
    by_q: dict[str, list[Sample]] = {}
    for s in samples:
        by_q.setdefault(s.qid, []).append(s)
    groups = list(by_q.values())
    if len(groups) < 4:
        raise GapragError(
            f"only {len(groups)} traced questions with usable pools (need >= 4)",
            hint="run `gaprag eval --methods rfm_rag --offset 60 --set calibration=true` on more "
            "questions",
        )
    random.Random(seed).shuffle(groups)
    val, cal, test, train = split_by_question(
        groups, val=val_fraction, cal=cal_fraction, test=test_fraction
    )

    def flat(parts: list[list[Sample]]) -> list[Sample]:
        return [s for g in parts for s in g]

    return FeedbackSplits(train=flat(train), val=flat(val), test=flat(test), cal=flat(cal))
