"""RFM-RAG in its paper configuration (arXiv 2508.17862), judged at the model boundary with a
scripted model over the Polish-Russian War store of tests/methods/rfm_rag.py: what each call is
sent (which passages, which facts, which query), how many calls a question takes, what the
R-Feedback model is given and what it decides, what the run returns and why it stopped.

Paper steps: once per question the LLM writes the question's entities and relational triples
with placeholders (Prompt 2, its Appendix C, missing from the paper's source); each round
retrieves passages K_i for the query q_i (the question first), skipping those already retrieved,
and Prompt 1 condenses them into evidence E_i = LLM(q_i, K_i) (Eq. 1) that joins the pool
E = {E_0, ..., E_i} (Eq. 2); the R-Feedback model judges the pool: sufficient -> the answer from
the whole pool; not -> the knowledge-gap list G' is the entities whose coverage is below theta
plus the entities Prompt 3 (Fig. 4) reads for the placeholders, and the next query is G'; at
most 3 retrievals."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.memory import InMemorySaver

from gaprag import build_graph
from gaprag.graphs.rfm_rag.feedback_model.model import FeedbackResult, RFeedbackMLP
from gaprag.graphs.rfm_rag.state import OutputState
from gaprag.llm.client import LLM
from gaprag.stores.documents import Document
from gaprag.stores.embeddings import HashingEmbedder
from gaprag.stores.store import Store
from gaprag.testing import ScriptedChatModel
from tests.methods.rfm_rag import (
    DOCS,
    FACT_FILM,
    FACT_MOTHER,
    KINDS,
    QUESTION,
    SeqJudge,
    call_counts,
    extract_reply,
    fake_llm,
)

FILLER = " ".join(["The Polish-Russian War film director."] * 40) + " The end."  # 162 words
# "mother" is named by the question and absent from round 1's evidence: a knowledge gap
STRUCTURE = (
    '{"entities": ["Polish-Russian War", "mother"], '
    '"triples": [["Polish-Russian War", "director", "<X1>"], ["<X1>", "mother", "end"]]}'
)
FILL = "Xawery Żuławski"
FILLS = f'{{"fills": ["{FILL}", "<X2>"]}}'
LONG_ANSWER = "Małgorzata Braunek, the Polish actress who was the mother of Xawery Żuławski"
ANSWER = f"Żuławski's mother is Małgorzata Braunek. So the answer is {LONG_ANSWER}."


@pytest.fixture
def store_docs() -> list[Document]:
    # the film's passage is long: paper mode shows passages whole
    return [{**d, "text": f"{d['text']} {FILLER}"} if d["id"] == "prw" else d for d in DOCS]


class ProbJudge:
    """An R-Feedback model that gives the pool the scripted probabilities of sufficiency."""

    def __init__(self, *probs: float) -> None:
        self.probs = list(probs)
        self.calls: list[list[str]] = []

    def judge(
        self, question: str, entities: list[str], sentences: list[str], s_f: float
    ) -> FeedbackResult:
        self.calls.append(list(sentences))
        p = self.probs[min(len(self.calls) - 1, len(self.probs) - 1)]
        return FeedbackResult(p >= 0.5, p)


def run(
    store: Store,
    judge: Any,
    *,
    question: str = QUESTION,
    structure: str = STRUCTURE,
    extract: str | Callable[[list[BaseMessage]], str] = extract_reply,
    fills: str = FILLS,
    answer: str = ANSWER,
    **options: Any,
) -> tuple[dict[str, Any], ScriptedChatModel]:
    fake = fake_llm(structure=structure, extract=extract, fills=fills, answer=answer)
    graph = build_graph(
        "rfm_rag", llm=LLM(fake, supports_logprobs=True), retriever=store, profile="paper",
        top_k=2, sufficiency_model=judge, **options,
    )  # fmt: skip
    return dict(graph.invoke({"question": question})), fake


def rounds(*replies: str) -> Callable[[list[BaseMessage]], str]:
    """Prompt 1's replies, one a round (then the last one again)."""
    calls: list[int] = []

    def reply(messages: list[BaseMessage]) -> str:
        calls.append(1)
        return replies[min(len(calls), len(replies)) - 1]

    return reply


def users(fake: ScriptedChatModel, kind: str) -> list[str]:
    """The user turns of the calls of ``kind``."""
    return [
        c["messages"][-1][1] for c in fake.calls if any(KINDS[kind] in t for _, t in c["messages"])
    ]


def paragraphs(prompt: str) -> str:
    return prompt.split("Paragraphs:\n", 1)[1].split("\n\nQuestion:", 1)[0]


def test_step_1_prompt_2_writes_the_structure_once_from_the_question(store: Store) -> None:
    out, fake = run(store, SeqJudge(False))
    (structure,) = users(fake, "structure")
    assert structure.rstrip().endswith(f"Question: {QUESTION}")
    assert out["entities"] == ["Polish-Russian War", "mother"] and len(out["triples"]) == 2
    assert out["queries"][0] == QUESTION


def test_step_2_prompt_1_condenses_the_rounds_passages_for_its_query(store: Store) -> None:
    out, fake = run(store, SeqJudge(False, True))
    first, second = users(fake, "extract")
    top = store.search(QUESTION, 2, mode="bm25")
    assert paragraphs(first) == "\n".join(
        f"[{n}] {d['title']}: {d['text']}" for n, d in enumerate(top, 1)
    )  # the question's top k, whole (the film's passage is 176 words long)
    assert "The end." in first
    assert first.rstrip().endswith(f"Question: {QUESTION}")
    # Eq. 1, E_i = LLM(q_i, K_i): a later round is asked about its own query alone
    q2 = out["queries"][1]
    assert second.rstrip().endswith(f"Question: {q2}") and QUESTION not in second
    # no search focus: the prompt speaks of the question alone
    assert all(
        u.startswith("Identify the entities the question is about.") for u in (first, second)
    )


def test_step_2_a_round_retrieves_only_passages_not_retrieved_before(store: Store) -> None:
    out, fake = run(store, SeqJudge(False))
    rounds = users(fake, "extract")
    q = out["queries"][2]
    assert q == out["queries"][1]  # the same gaps and fills: the same query again
    seen = [p["id"] for p in out["retrieved_passages"][:4]]
    unseen = store.search(q, 2, mode="bm25", exclude=seen)
    assert [d["id"] for d in store.search(q, 2, mode="bm25")] == seen[2:]
    assert paragraphs(rounds[2]) == "\n".join(
        f"[{n}] {d['title']}: {d['text']}" for n, d in enumerate(unseen, 1)
    )


def test_step_3_the_pool_gathers_every_rounds_evidence_and_the_r_feedback_model_judges_it(
    store: Store,
) -> None:
    judge = SeqJudge(False, True)
    out, _ = run(store, judge)
    assert judge.calls == [[FACT_FILM], [FACT_FILM, FACT_MOTHER]]
    assert [e["text"] for e in out["evidence_pool"]] == [FACT_FILM, FACT_MOTHER]
    assert [d["path"] for d in out["decisions"]] == ["model", "model"]


def test_step_4_a_probability_of_sufficiency_from_one_half_stops_the_loop(store: Store) -> None:
    out, fake = run(store, ProbJudge(0.45, 0.55))
    assert out["iterations"] == 2 and out["stop_reason"] == "sufficient"
    assert out["decisions"] == [
        {"node": "feedback_classifier", "round": 1, "decision": "continue", "p": 0.45,
         "path": "model", "threshold": 0.5},
        {"node": "feedback_classifier", "round": 2, "decision": "stop", "p": 0.55,
         "path": "model", "threshold": 0.5},
    ]  # fmt: skip
    assert (out["feedback_prob"], out["sufficient"]) == (0.55, True)
    assert call_counts(fake)["answer"] == 1


def test_step_4_a_probability_of_exactly_one_half_stops_the_loop(store: Store) -> None:
    out, _ = run(store, ProbJudge(0.5))
    assert out["iterations"] == 1 and out["stop_reason"] == "sufficient"
    assert [d["decision"] for d in out["decisions"]] == ["stop"]


def test_step_4_a_sufficient_pool_is_answered_from_the_whole_pool(store: Store) -> None:
    out, fake = run(store, SeqJudge(False, True))
    (answer,) = users(fake, "answer")
    assert answer == f"Context:\n{FACT_FILM}\n{FACT_MOTHER}\nQuestion: {QUESTION}"
    # the answer step's own answer, not rewritten by a short-answer step, no other call
    assert out["answer"] == LONG_ANSWER and out["stop_reason"] == "sufficient"
    assert len(fake.calls) == sum(call_counts(fake).values())
    assert call_counts(fake) == {"structure": 1, "extract": 2, "fills": 1, "judge": 0, "answer": 1}
    assert not any(c["kwargs"].get("logprobs") for c in fake.calls)
    # what the run returns: the output schema's fields
    assert set(out) == {f.name for f in dataclasses.fields(OutputState)}


def test_step_5_an_insufficient_pool_queries_the_gap_entities_and_the_placeholder_fills(
    store: Store,
) -> None:
    out, fake = run(store, SeqJudge(False, True))
    (fills,) = users(fake, "fills")
    assert "1. (Polish-Russian War, director, <X1>)\n2. (<X1>, mother, end)" in fills
    assert f"Context:\n{FACT_FILM}\n\nTriples:" in fills  # Prompt 3 reads the pool
    # G' = G (the entities below theta: no pool sentence names "mother"), then the fills
    assert out["queries"] == [QUESTION, f"mother {FILL}"]


def test_step_6_at_most_three_retrievals_and_no_judgement_at_the_cap(store: Store) -> None:
    judge = SeqJudge(False)
    out, fake = run(store, judge)
    assert out["iterations"] == 3 and out["stop_reason"] == "max_iterations"
    assert len(judge.calls) == 2 and call_counts(fake)["fills"] == 2
    assert call_counts(fake)["extract"] == 3 and call_counts(fake)["answer"] == 1
    assert len({p["id"] for p in out["retrieved_passages"]}) == 6  # 3 rounds x 2, all new


def test_every_question_starts_from_an_empty_pool(store: Store) -> None:
    config = {"configurable": {"thread_id": "t"}}
    fake = fake_llm(structure=STRUCTURE)
    graph = build_graph(
        "rfm_rag", llm=fake, retriever=store, profile="paper", top_k=2,
        sufficiency_model=SeqJudge(True), checkpointer=InMemorySaver(),
    )  # fmt: skip
    graph.invoke({"question": QUESTION}, config)
    out = graph.invoke({"question": "Who directed the 1926 film Mother?"}, config)
    assert FACT_FILM not in users(fake, "answer")[-1]
    assert FACT_FILM not in [e["text"] for e in out["evidence_pool"]]


class FeatureJudge:
    """An R-Feedback model that records what it is given (the entities, the pool, S_f) and
    gives the scripted verdicts (then the last one again; sufficient by default)."""

    def __init__(self, *verdicts: bool) -> None:
        self.verdicts = list(verdicts) or [True]
        self.calls: list[tuple[list[str], list[str], float]] = []

    def judge(
        self, question: str, entities: list[str], sentences: list[str], s_f: float
    ) -> FeedbackResult:
        self.calls.append((list(entities), list(sentences), s_f))
        verdict = self.verdicts[min(len(self.calls), len(self.verdicts)) - 1]
        return FeedbackResult(verdict, 1.0 if verdict else 0.0)


PRW_TRIPLES = "1. (Polish-Russian War, director, <X1>)\n2. (<X1>, mother, end)"


@pytest.mark.parametrize(
    ("structure", "entities", "triples"),
    [
        # no entities listed: the triples' concrete heads and tails (not <X1>, not end)
        (
            '{"entities": [], "triples": [["Polish-Russian War", "director", "<X1>"], '
            '["<X1>", "mother", "end"]]}',
            ["Polish-Russian War"],
            PRW_TRIPLES,
        ),
        # placeholders, "end" and repeats are not entities; quoted triple parts are unquoted
        (
            '{"entities": ["Polish-Russian War", "polish-russian war", "<X1>", "End", '
            '"\'end\'", "mother"], "triples": [["\\"Polish-Russian War\\"", "\'director\'", '
            '"\\"<X1>\\""], {"head": "<X1>", "relation": "mother", "tail": "end"}]}',
            ["Polish-Russian War", "mother"],
            PRW_TRIPLES,
        ),
        # a reply that is not JSON: its (head, relation, tail) tuples and its Entities: line
        (
            "Triples: (Polish-Russian War, director, <X1>), (<X1>, mother, end)\n"
            "Entities: Polish-Russian War, mother",
            ["Polish-Russian War", "mother"],
            PRW_TRIPLES,
        ),
        # entities listed: the triples add none; names are kept as written
        (
            '{"entities": ["Xawery Żuławski"], "triples": [["Xawery Żuławski", "mother", '
            '"<X1>"], ["<X1>", "admirer of", "Malcolm X"]]}',
            ["Xawery Żuławski"],
            "1. (Xawery Żuławski, mother, <X1>)\n2. (<X1>, admirer of, Malcolm X)",
        ),
    ],
)
def test_step_1_prompt_2s_reply_gives_the_entities_and_the_triples_prompt_3_reads(
    store: Store, structure: str, entities: list[str], triples: str
) -> None:
    out, fake = run(store, SeqJudge(False, True), structure=structure)
    assert out["entities"] == entities
    (fills,) = users(fake, "fills")
    assert fills.endswith(f"Triples:\n{triples}")


def test_step_2_prompt_1s_reply_gives_one_pool_sentence_per_fact_after_its_last_evidence_line(
    store: Store,
) -> None:
    reply = (
        "The question names a film. EVIDENCE: a draft.\nEVIDENCE:\n"
        f'1. {FACT_FILM} The film is Polish.\n- {FACT_MOTHER}\n(3) "Braunek was an actress."\n'
        "- none\n- None.\n* ok\n- Rye"
    )
    judge = FeatureJudge()
    out, _ = run(store, judge, extract=reply)
    # fragments under 3 characters and "none" lines are dropped
    facts = [FACT_FILM, "The film is Polish.", FACT_MOTHER, "Braunek was an actress.", "Rye"]
    assert [e["text"] for e in out["evidence_pool"]] == facts
    assert judge.calls[0][1] == facts


@pytest.mark.parametrize(
    "reply",
    [
        "EVIDENCE:\nNONE",
        "EVIDENCE: None.",
        "Nothing here.\nEVIDENCE:",
        "EVIDENCE:\nNo relevant information!",
    ],
)
def test_step_2_a_round_with_nothing_relevant_adds_nothing_to_the_pool(
    store: Store, reply: str
) -> None:
    out, fake = run(store, SeqJudge(False), extract=reply)
    assert out["evidence_pool"] == []
    # an empty pool covers no entity: every entity is a gap
    assert out["queries"][1] == f"Polish-Russian War mother {FILL}"
    (answer,) = users(fake, "answer")
    assert answer == f"Context:\n(no facts found)\nQuestion: {QUESTION}"


def test_step_3_a_fact_found_again_is_kept_once_and_a_longer_one_replaces_the_facts_it_holds(
    store: Store,
) -> None:
    soup = "Borscht is a sour soup common in Eastern Europe."
    merged = "Polish-Russian War is a 2009 film directed by Xawery Żuławski."
    extract = rounds(
        f"EVIDENCE:\nPolish-Russian War is a 2009 film\n{soup}\ndirected by Xawery Żuławski",
        # the same fact (case, final period), a sentence inside one of the pool's, and one
        # that holds two of the pool's sentences
        f"EVIDENCE:\n{soup.upper().rstrip('.')}\nPOLISH-RUSSIAN WAR IS A 2009 FILM.\n"
        f"Borscht is a sour soup.\n{merged}",
    )
    judge = SeqJudge(False, True)
    out, fake = run(store, judge, extract=extract)
    first = ["Polish-Russian War is a 2009 film", soup, "directed by Xawery Żuławski"]
    assert judge.calls == [first, [merged, soup]]
    # each fact with its provenance: the round, its query and passages, the question
    ids = [p["id"] for p in out["retrieved_passages"]]
    assert [
        (e["text"], e["round"], e["query"], e["source_passage_ids"], e["question"])
        for e in out["evidence_pool"]
    ] == [
        (merged, 2, out["queries"][1], ids[2:], QUESTION),
        (soup, 1, QUESTION, ids[:2], QUESTION),
    ]
    # the run's evidence: the pool's facts, each as the rounds produced it
    assert out["evidence"] == [
        {"id": e["id"], "title": "", "text": e["text"], "source": "llm", "score": 0.0,
         "round": e["round"]}
        for e in out["evidence_pool"]
    ]  # fmt: skip
    (answer,) = users(fake, "answer")
    assert answer == f"Context:\n{merged}\n{soup}\nQuestion: {QUESTION}"


def test_step_3_the_r_feedback_model_is_given_s_f_the_mean_of_the_entities_clipped_coverage(
    store: Store,
) -> None:
    structure = (
        '{"entities": ["Polish-Russian War (film)", "mother", "Xawery Zuławski"], '
        '"triples": [["Polish-Russian War", "director", "<X1>"], ["<X1>", "mother", "end"]]}'
    )
    pool = [
        "Polish-Russian War is a Polish-Russian War film, the Polish-Russian War of 2009.",
        "Xawery Żuławski's grandmother and the mothers are not named.",
    ]
    judge = FeatureJudge()
    run(store, judge, structure=structure, extract="EVIDENCE:\n" + "\n".join(pool))
    # C_kE / L_E over 2 sentences: 3 / 2 clipped to 1 (the name without "(film)"), 0 ("mother"
    # is a whole word), 1 / 2 (the name without accents); S_f = their mean
    assert judge.calls == [(["Polish-Russian War (film)", "mother", "Xawery Zuławski"], pool, 0.5)]


def test_step_5_an_entity_covered_at_theta_is_not_a_gap(store: Store) -> None:
    structure = (
        '{"entities": ["Polish-Russian War", "mother", "Andrzej Wajda"], '
        '"triples": [["Polish-Russian War", "director", "<X1>"], ["<X1>", "mother", "end"]]}'
    )
    pool = [
        FACT_FILM,
        "Xawery Żuławski's mother is an actress.",
        "Xawery Żuławski was born in 1971.",
        "Xawery Żuławski lives in Warsaw.",
        "Andrzej Żuławski was a director.",
    ]
    out, _ = run(store, SeqJudge(False, True), structure=structure,
                 extract="EVIDENCE:\n" + "\n".join(pool))  # fmt: skip
    # coverage 1 / 5 = θ for the film and "mother", 0 for Andrzej Wajda: only he is a gap
    assert out["queries"] == [QUESTION, f"Andrzej Wajda {FILL}"]


@pytest.mark.parametrize(
    "fills",
    [
        '{"fills": ["Xawery Żuławski.", "<X2>", "end", "\\"xawery żuławski\\"", "none", '
        '"Mother", "\\"Xawery Żuławski.\\"", "\\"Małgorzata Braunek\\".", "Malcolm X"]}',
        # a reply that is not JSON: one fill a line, numbering removed
        "1. Xawery Żuławski.\n2) <X2>\n\n3. end\n4. 'xawery żuławski'\n5. Mother\n"
        '6. "Xawery Żuławski."\n7. "Małgorzata Braunek".\n8. Malcolm X',
    ],
)
def test_step_5_the_query_is_the_gaps_then_the_fills_without_placeholders_end_or_repeats(
    store: Store, fills: str
) -> None:
    out, _ = run(store, SeqJudge(False, True), fills=fills)
    # the fills as the pool writes them: quotes and final punctuation gone, the rest kept
    assert out["queries"] == [QUESTION, f"mother {FILL} Małgorzata Braunek Malcolm X"]


def test_step_5_with_no_gap_and_no_fill_the_next_query_is_the_question(store: Store) -> None:
    out, fake = run(store, SeqJudge(False, True), fills='{"fills": ["<X1>", "end"]}',
                    extract=f"EVIDENCE:\n{FACT_FILM}\nHis mother is an actress.")  # fmt: skip
    assert out["queries"] == [QUESTION, QUESTION]
    # the question again, its passages of round 1 excluded
    seen = [p["id"] for p in out["retrieved_passages"][:2]]
    unseen = store.search(QUESTION, 2, mode="bm25", exclude=seen)
    assert paragraphs(users(fake, "extract")[1]) == "\n".join(
        f"[{n}] {d['title']}: {d['text']}" for n, d in enumerate(unseen, 1)
    )


@pytest.mark.parametrize(
    ("reply", "answer"),
    [
        ("He wrote it. So the answer is J. R. R. Tolkien.", "J. R. R. Tolkien"),
        ("So the answer is St. Louis. It is in Missouri.", "St. Louis"),
        ("The answer is: **Nipper**", "Nipper"),
        ("Reasoning first.\nAnswer: Małgorzata Braunek", "Małgorzata Braunek"),
        ('So, the final answer is "Washington, D.C.".', "Washington, D.C."),
        ("The answer is Andrzej Żuławski. So the answer is Małgorzata Braunek.", "Małgorzata Braunek"),
        # a short answer is kept whole, even one that opens with "No"
        ("So the answer is No Country for Old Men.", "No Country for Old Men"),
        # quotes, markdown and final punctuation around the span go, an initialism's period stays
        ('So the answer is "St. Louis".', "St. Louis"),
        ('So the answer is "Nipper"!', "Nipper"),
        ('So the answer is "Nipper!"', "Nipper"),
        ("So the answer is **Nipper.**", "Nipper"),
        ("So the answer is **U.S.**", "U.S."),
        # a reply cut off after its marker: the last line
        ("Braunek is his mother. So the answer is", "Braunek is his mother. So the answer is"),
        # no marker: the last line that does not open a new example
        ("Małgorzata Braunek was his mother.\nQuestion: Who directed Mowa ptaków?",
         "Małgorzata Braunek was his mother"),
    ],
)  # fmt: skip
def test_step_4_the_answer_is_the_span_the_answer_step_marks(
    store: Store, reply: str, answer: str
) -> None:
    out, _ = run(store, SeqJudge(True), answer=reply)
    assert out["answer"] == answer and out["raw_answer"] == reply


@pytest.mark.parametrize(
    ("reply", "answer"),
    [
        ("It is from 2009, no doubt. So the answer is Yes, it is.", "yes"),
        ("There is no sequel. So the answer is 2009.", "2009"),
    ],
)
def test_step_4_a_yes_no_question_is_answered_yes_or_no_from_the_span_only(
    store: Store, reply: str, answer: str
) -> None:
    out, _ = run(store, SeqJudge(True), question="Is Polish-Russian War a 2009 film?", answer=reply)
    assert out["answer"] == answer


def test_each_call_keeps_its_output_cap(store: Store) -> None:
    _, fake = run(store, SeqJudge(False, True))
    caps = {kind: {c["kwargs"]["max_tokens"] for c in fake.calls
                   if any(KINDS[kind] in t for _, t in c["messages"])}
            for kind in ("structure", "extract", "fills", "answer")}  # fmt: skip
    assert caps == {"structure": {256}, "extract": {320}, "fills": {128}, "answer": {128}}


def test_step_4_the_r_feedback_model_decides_on_p_from_its_mlp_over_s_f_and_g_f(
    store: Store, tmp_path: Path
) -> None:
    """No injected model: the R-Feedback MLP of a weights file (Eq. 9, Platt-scaled), over
    S_f (Eqs. 4, 7) and G_f, the question's cosine with the pool's mean sentence vector (the
    weights' embedder: the store's hashing embedder), stops the loop at p >= 0.5."""
    pools = [[FACT_FILM], [FACT_FILM, FACT_MOTHER]]
    s_f = [0.5, 0.25]  # "Polish-Russian War": 1 / 1, then 1 / 2; "mother": 0
    g_f = []
    for pool in pools:
        question, *sentences = HashingEmbedder().embed([QUESTION, *pool]).astype(np.float64)
        mean = np.mean(sentences, axis=0)
        g_f.append(float(question @ mean / np.linalg.norm(question) / np.linalg.norm(mean)))
    model = RFeedbackMLP.init(seed=1, embedder=HashingEmbedder().name)
    model.mean, model.std = np.array([0.1, 0.2]), np.array([0.5, 2.0])

    def raw_logit(x: list[float]) -> float:
        (w1, b1), (w2, b2), (w3, b3) = model.layers
        h = (np.array(x) - model.mean) / model.std
        h = np.maximum(h @ w1 + b1, 0.0)
        h = np.maximum(h @ w2 + b2, 0.0)
        return float((h @ w3 + b3)[0])

    raw = [raw_logit([s, g]) for s, g in zip(s_f, g_f, strict=True)]
    assert raw[0] < raw[1]  # this network scores the second pool higher
    # Platt scaling that puts p = 0.5 between the two pools: the second one stops the loop
    a = 2.0
    b = -a * (raw[0] + raw[1]) / 2
    model.calibration = (a, b)
    model.save(tmp_path / "w.json")
    p = [1 / (1 + math.exp(-(a * z + b))) for z in raw]
    out, _ = run(store, None, rf_weights=str(tmp_path / "w.json"))
    assert out["iterations"] == 2 and out["stop_reason"] == "sufficient"
    assert [(d["decision"], d["p"], d["path"], d["threshold"]) for d in out["decisions"]] == [
        ("continue", pytest.approx(p[0], abs=1e-5), "model", 0.5),
        ("stop", pytest.approx(p[1], abs=1e-5), "model", 0.5),
    ]
    record = next(t for t in out["trace"] if t["node"] == "feedback_classifier")
    assert record["s_f"] == s_f[0] and record["g_f"] == pytest.approx(g_f[0], abs=1e-5)


def test_step_5_without_triples_prompt_3_is_not_asked_and_the_query_is_the_gaps(
    store: Store,
) -> None:
    structure = '{"entities": ["Polish-Russian War", "mother"], "triples": []}'
    out, fake = run(store, SeqJudge(False, True), structure=structure)
    assert call_counts(fake)["fills"] == 0
    assert out["queries"] == [QUESTION, "mother"]


def test_the_pool_reaches_prompt_3_and_the_answer_step_whole(store: Store) -> None:
    """A pool sentence is never cut, however long (the renderer's default cuts at 150 words)."""
    long_fact = "Polish-Russian War is a film " + " ".join(["and a film"] * 60) + " of 2009."
    _, fake = run(store, SeqJudge(False, True), extract=f"EVIDENCE:\n{long_fact}")
    (fills,) = users(fake, "fills")
    (answer,) = users(fake, "answer")
    assert f"Context:\n{long_fact}\n\nTriples:" in fills
    assert answer == f"Context:\n{long_fact}\nQuestion: {QUESTION}"


def test_step_3_with_no_entities_s_f_is_0_and_the_query_is_the_fills(store: Store) -> None:
    structure = '{"entities": [], "triples": [["<X1>", "mother", "end"]]}'
    judge = FeatureJudge(False, True)
    out, _ = run(store, judge, structure=structure)
    assert out["entities"] == []
    assert [s_f for _, _, s_f in judge.calls] == [0.0, 0.0]
    assert out["queries"] == [QUESTION, FILL]


def test_step_2_a_reply_without_an_evidence_line_is_read_whole(store: Store) -> None:
    out, _ = run(store, SeqJudge(True), extract=f"{FACT_FILM}\n{FACT_MOTHER}")
    assert [e["text"] for e in out["evidence_pool"]] == [FACT_FILM, FACT_MOTHER]


def test_the_run_records_each_step_in_its_trace_and_its_progress_events(store: Store) -> None:
    """Not a paper rule: what the run records of each step (its trace) and reports while it
    runs (``stream_mode="custom"``), for a question answered after 2 rounds."""
    out, _ = run(store, SeqJudge(False, True))
    first, second = out["retrieved_passages"][:2], out["retrieved_passages"][2:]
    ids = [p["id"] for p in out["retrieved_passages"]]
    query = f"mother {FILL}"
    judged = {"node": "feedback_classifier", "mode": "SeqJudge", "g_f": None}
    assert out["trace"] == [
        {"node": "extract_question_structure", "call": "structure", "path": "parsed"},
        {"node": "extract_question_structure", "entities": ["Polish-Russian War", "mother"],
         "triples": 2, "pool_kept": 0},
        {**judged, "round": 1, "s_f": 0.5, "prob": 0.0, "sufficient": False,
         "pool": [FACT_FILM], "pool_passages": sorted(p["id"] for p in first)},
        {"node": "regenerate_keywords", "call": "fills", "path": "parsed"},
        {**judged, "round": 2, "s_f": 0.25, "prob": 1.0, "sufficient": True,
         "pool": [FACT_FILM, FACT_MOTHER], "pool_passages": sorted(ids)},
        {"node": "generate_answer", "stop_reason": "sufficient", "retrievals": 2, "pool": 2},
        {"node": "short_answer", "call": "short_answer", "path": "off"},
    ]  # fmt: skip
    assert out["shown_ids"] == out["retrieved_ids"] == ids
    assert [p["round"] for p in out["retrieved_passages"]] == [1, 1, 2, 2]
    assert len(second) == 2
    fake = fake_llm(structure=STRUCTURE, fills=FILLS, answer=ANSWER)
    graph = build_graph(
        "rfm_rag", llm=LLM(fake, supports_logprobs=True), retriever=store, profile="paper",
        top_k=2, sufficiency_model=SeqJudge(False, True),
    )  # fmt: skip
    events = list(graph.stream({"question": QUESTION}, stream_mode="custom"))
    rfm = {"method": "rfm_rag"}
    assert events == [
        {**rfm, "round": 1, "query": QUESTION, "retrieved": 2},
        {**rfm, "round": 1, "added": 1, "pool": 1, "coverage": 0.5},
        {**rfm, "round": 1, "sufficient": False, "prob": 0.0},
        {**rfm, "round": 2, "fills": [FILL], "next_query": query},
        {**rfm, "round": 2, "query": query, "retrieved": 2},
        {**rfm, "round": 2, "added": 1, "pool": 2, "coverage": 0.25},
        {**rfm, "round": 2, "sufficient": True, "prob": 1.0},
    ]
