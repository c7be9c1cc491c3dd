"""missing_knowledge (MisK-RAG): wiring, routing, the one judge call and the decision on
P(nothing missing), exclusion of seen chunks, md5 merge and budget, prompt layout (example and
follow-up turns), knowledge-base setups, and the `gaprag kb qa-pairs` job."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest

from gaprag import build_graph
from gaprag.cli import main
from gaprag.errors import GapragError
from gaprag.graphs.missing_knowledge import KnowledgeBaseRetriever, format_options
from gaprag.graphs.missing_knowledge import cli as kb_cli
from gaprag.graphs.missing_knowledge.judge import Judgement, mk_queries, search_queries
from gaprag.graphs.missing_knowledge.knowledge_base import budget, md5_text, merge_round_robin
from gaprag.graphs.missing_knowledge.nodes import format_chunks
from gaprag.graphs.missing_knowledge.question import split_question
from gaprag.graphs.missing_knowledge.state import Chunk, State
from gaprag.llm.client import LLM
from gaprag.llm.parse import parse_model
from gaprag.state.base import Evidence
from gaprag.stores import HashingEmbedder, Retriever, Store
from gaprag.stores.documents import Document
from gaprag.stores.pairs import PairStore
from gaprag.stores.store import RetrievalMode
from gaprag.testing import ScriptedChatModel, scripted

QUESTION = "who carried the us flag in the 2014 olympics"
DOCS: list[Document] = [
    {"id": "open", "title": "2014 opening ceremony", "text": "Todd Lodwick carried the US flag at the 2014 Olympics opening ceremony."},
    {"id": "close", "title": "2014 closing ceremony", "text": "Julie Chu carried the US flag at the 2014 Olympics closing ceremony."},
    {"id": "sochi", "title": "Sochi", "text": "The 2014 Winter Olympics were held in Sochi, Russia."},
    {"id": "google", "title": "Google", "text": "Google was founded by Larry Page and Sergey Brin in 1998."},
    {"id": "hamlet", "title": "Hamlet", "text": "Hamlet is a tragedy written by William Shakespeare."},
    {"id": "paris", "title": "Paris", "text": "Paris is the capital and largest city of France."},
]  # fmt: skip
PAIRS = [
    ("who carried the us flag at the 2014 opening ceremony", "Todd Lodwick", DOCS[0]["text"]),
    ("who founded google", "Larry Page and Sergey Brin", DOCS[3]["text"]),
    ("what is the capital of france", "Paris", DOCS[5]["text"]),
]
Q_OPEN = "who carried the us flag at the 2014 opening ceremony"  # ranks "open" first
JUDGE = "## First Round Answer"  # only the judge prompt (and its follow-up) has this heading
FINAL = "## Missing Knowledge Context"  # only the final prompt has this heading
ASK = "Answer Yes or No."  # only the decision's follow-up question (after the judge) has this


class Recorder:
    """Wraps a retriever and records every (query, k) and the ids each search excluded."""

    def __init__(self, inner: Retriever) -> None:
        self.inner = inner
        self.calls: list[tuple[str, int]] = []
        self.excluded: list[set[str]] = []

    def search(
        self,
        query: str,
        k: int = 5,
        *,
        mode: RetrievalMode | None = None,
        exclude: Collection[str] = (),
    ) -> list[Evidence]:
        self.calls.append((query, k))
        self.excluded.append(set(exclude))
        return self.inner.search(query, k, mode=mode, exclude=exclude)


class Fixed:
    """A retriever that answers every query with fixed hits (per query when a dict)."""

    def __init__(self, hits: dict[str, list[Evidence]]) -> None:
        self.hits = hits
        self.calls: list[str] = []

    def search(
        self,
        query: str,
        k: int = 5,
        *,
        mode: RetrievalMode | None = None,
        exclude: Collection[str] = (),
    ) -> list[Evidence]:
        self.calls.append(query)
        return self.hits.get(query, self.hits.get("*", []))[:k]


def ev(doc_id: str, text: str, score: float = 0.5) -> Evidence:
    return Evidence(id=doc_id, title="", text=text, source="dense", score=score, round=0)


def verdict(
    judge: Any, queries: Any = (), missing: Any = (), thought: str = "the context lacks it"
) -> str:
    body = {
        "thought": thought,
        "judge": judge,
        "missing_knowledge": list(missing),
        "query": list(queries),
    }
    return "```json\n" + json.dumps(body) + "\n```"


def logprobs_for(p_enough: float) -> dict[str, float]:
    """First-token logprobs that give P("Yes") = ``p_enough`` among Yes/No."""
    return {"Yes": math.log(p_enough), "No": math.log(1 - p_enough)}


def fake_llm(
    judge_reply: Any,
    *,
    final: Any = "Todd Lodwick and Julie Chu",
    draft: str = "Todd Lodwick",
    enough: str = "Yes",
    p_enough: float | None = None,
) -> ScriptedChatModel:
    """Replies by prompt kind; with ``p_enough`` every logprobs request (the decision's forced
    choice only) gets Yes/No logprobs giving that probability."""
    return ScriptedChatModel(
        rules=[(ASK, enough), (JUDGE, judge_reply), (FINAL, final)], default=draft,
        logprobs=None if p_enough is None else logprobs_for(p_enough),
    )  # fmt: skip


def with_logprobs(fake: ScriptedChatModel) -> LLM:
    """The fake as an endpoint that offers logprobs (a plain fake is taken as one without)."""
    return LLM(fake, supports_logprobs=True)


def judge_calls(fake: ScriptedChatModel) -> list[str]:
    """The judge's own calls (its repair retry included), not the decision's follow-up."""
    return [p for p in calls_of(fake, JUDGE) if ASK not in p]


def calls_of(fake: ScriptedChatModel, needle: str) -> list[str]:
    return [p for p in fake.prompts() if needle in p]


def user_msg(fake: ScriptedChatModel, needle: str) -> str:
    for call in fake.calls:
        if needle in "\n".join(t for _, t in call["messages"]):
            return str(call["messages"][-1][1])
    raise AssertionError(f"no call with {needle!r}")


def full_state(graph: Any, question: str, **context: Any) -> dict[str, Any]:
    """The state after the run: every field, those no node wrote at their defaults."""
    last: dict[str, Any] = dataclasses.asdict(State(question=question))
    for values in graph.stream(
        {"question": question}, context=context or None, stream_mode="values"
    ):
        last = {**last, **values}
    return last


@pytest.fixture
def store_docs() -> list[Document]:
    """The ``store`` fixture's documents."""
    return DOCS


@pytest.fixture
def pairs(tmp_path: Path) -> PairStore:
    ps = PairStore.open(tmp_path / "qa.sqlite", embedder=HashingEmbedder())
    ps.add_many(PAIRS, source="generated")
    return ps


# -- graph structure -----------------------------------------------------------------------
def test_graph_nodes_and_edges() -> None:
    g = build_graph("missing_knowledge", llm=scripted()).get_graph()
    assert set(g.nodes) - {"__start__", "__end__"} == {
        "retrieve", "generate_draft", "judge_missing", "retrieve_missing", "update_evidence_pool", "generate_answer", "short_answer", "gate", "reader", "select",
    }  # fmt: skip
    edges = {(e.source, e.target): e.conditional for e in g.edges}
    assert (
        edges[("judge_missing", "retrieve_missing")] and edges[("judge_missing", "generate_answer")]
    )
    assert edges[("update_evidence_pool", "generate_answer")] is False
    assert ("update_evidence_pool", "generate_draft") not in edges  # single pass, no loop back
    assert edges[("gate", "retrieve")] and edges[("gate", "short_answer")]
    assert edges[("generate_answer", "reader")] is False
    assert edges[("reader", "select")] is False and edges[("select", "short_answer")] is False


# -- routing -------------------------------------------------------------------------------
def test_enough_knowledge_stops_after_the_first_retrieval(store: Store) -> None:
    rec = Recorder(store)
    fake = fake_llm(
        verdict(False, ["ignored query"], ["ignored"], thought="all there"), p_enough=0.9
    )
    llm = with_logprobs(fake)
    state = full_state(build_graph("missing_knowledge", llm=llm, retriever=rec), QUESTION)
    assert rec.calls == [(QUESTION, 5)]  # the user question once, on KB A (first_k=5)
    assert state["mk_contexts"] == [] and state["mk_queries"] == [] and state["missing"] is False
    assert state["stop_reason"] == "enough_knowledge" and state["iterations"] == 1
    # draft, judge, the decision's forced choice, final
    assert len(fake.calls) == 4 and len(judge_calls(fake)) == 1 and len(calls_of(fake, ASK)) == 1
    assert "all there" in user_msg(fake, FINAL)  # the thought still reaches the final call
    assert state["answer"] == "Todd Lodwick and Julie Chu"


def test_reuse_draft_saves_the_final_call(store: Store) -> None:
    fake = fake_llm(verdict(False), p_enough=0.9)
    out = build_graph(
        "missing_knowledge", llm=with_logprobs(fake), retriever=store,
        final_when_not_missing="reuse_draft",
    ).invoke({"question": QUESTION})  # fmt: skip
    assert len(fake.calls) == 3 and out["answer"] == out["draft_answer"] == "Todd Lodwick"
    assert out["usage"]["llm_calls"] == 3
    assert out["decisions"][0]["answer"] == "Todd Lodwick"  # known without a call: recorded


def test_missing_runs_one_judge_and_each_query_once(store: Store) -> None:
    rec = Recorder(store)
    fake = fake_llm(verdict(True, ["q1", "q2"], ["opening bearer", "closing bearer"]), p_enough=0.2)
    llm = with_logprobs(fake)
    state = full_state(build_graph("missing_knowledge", llm=llm, retriever=rec), QUESTION)
    assert rec.calls == [(QUESTION, 5), ("q1", 2), ("q2", 2)]  # exact strings, no prefix
    assert len(judge_calls(fake)) == 1 and len(fake.calls) == 4
    assert (
        state["mk_round"] == 1
        and state["iterations"] == 2
        and state["stop_reason"] == "answered_after_missing_knowledge"
    )
    assert state["queries"] == [QUESTION, "q1", "q2"] and state["missing"] is True
    assert state["usage"]["retrieval_calls"] == 3


def test_misk_a_plus_b_routes_queries_to_the_chosen_stores(store: Store, pairs: PairStore) -> None:
    docs, qa = Recorder(store), Recorder(pairs.as_retriever(gamma=1.0, source_label="qa_pairs"))
    fake = fake_llm(verdict(True, ["2014 Olympics closing ceremony US flag bearer"]))
    graph = build_graph(
        "missing_knowledge",
        llm=fake,
        retriever=docs,
        kb_pairs=qa,
        kb_primary="qa_pairs",
        kb_secondary="passages",
    )
    state = full_state(graph, QUESTION)
    assert [q for q, _ in qa.calls] == [QUESTION] and [q for q, _ in docs.calls] == [
        "2014 Olympics closing ceremony US flag bearer"
    ]
    assert state["initial_contexts"] and all(
        c["kb"] == "qa_pairs" and c["kind"] == "qa" and c["retrieved_by"] == "orig"
        for c in state["initial_contexts"]
    )
    assert state["mk_contexts"] and all(
        c["kb"] == "passages" and c["kind"] == "doc" and c["retrieved_by"] == "mk"
        for c in state["mk_contexts"]
    )
    assert state["mk_contexts"][0]["id"] == "close"
    prompt = user_msg(fake, FINAL)
    assert (
        prompt.index("### History QA pairs") < prompt.index(FINAL) < prompt.index("### Documents")
    )


def test_empty_query_list_falls_back_to_missing_knowledge(store: Store) -> None:
    rec = Recorder(store)
    full_state(
        build_graph("missing_knowledge", llm=fake_llm(verdict(True, [], ["x"])), retriever=rec),
        QUESTION,
    )
    assert [q for q, _ in rec.calls] == [QUESTION, "x"]
    # no query and no missing piece: the user question again, for chunks not seen yet
    rec2 = Recorder(store)
    fake = fake_llm(verdict(True, [], []))
    state = full_state(build_graph("missing_knowledge", llm=fake, retriever=rec2), QUESTION)
    assert [q for q, _ in rec2.calls] == [QUESTION, QUESTION] and state["mk_round"] == 1
    assert state["mk_queries"] == [QUESTION] and state["mk_contexts"]
    first = {c["id"] for c in state["initial_contexts"]}
    assert not first & {c["id"] for c in state["mk_contexts"]}
    assert len(calls_of(fake, FINAL)) == 1 and state["answer"]
    # with max_mk_queries=0 there is nothing to search: straight to the answer
    rec3 = Recorder(store)
    state = full_state(
        build_graph("missing_knowledge", llm=fake_llm(verdict(True, ["q"])), retriever=rec3,
                    max_mk_queries=0),
        QUESTION,
    )  # fmt: skip
    assert len(rec3.calls) == 1 and state["stop_reason"] == "no_missing_knowledge_queries"


# -- parsing -------------------------------------------------------------------------------
def test_judge_reply_with_prose_and_fence_or_bare_json() -> None:
    prose = 'Let me think. The context misses the closing ceremony.\n```json\n{"thought": "t", "judge": true, "missing_knowledge": ["a"], "query": ["q"]}\n```'
    parsed = parse_model(prose, Judgement)
    assert parsed is not None and parsed.judge is True and parsed.query == ["q"]
    bare = parse_model(
        '{"thought": "t", "judge": false, "missing_knowledge": [], "query": []}', Judgement
    )
    assert bare is not None and bare.judge is False


@pytest.mark.parametrize("value", ["True", "true", "是", "yes", 1])
def test_judge_verdict_spellings(value: Any) -> None:
    raw = (
        '{"thought": "t", "judge": '
        + (value if value == "True" else json.dumps(value))
        + ', "query": "single query"}'
    )
    parsed = parse_model(raw, Judgement)
    assert parsed is not None and parsed.judge is True and parsed.query == ["single query"]


def test_judge_false_spellings_and_garbage() -> None:
    for value in ['"否"', '"false"', "False", "0"]:
        parsed = parse_model('{"judge": ' + value + "}", Judgement)
        assert parsed is not None and parsed.judge is False
    assert parse_model('{"judge": "perhaps"}', Judgement) is None


def test_query_normalisation() -> None:
    j = Judgement(
        thought="",
        judge=True,
        missing_knowledge=[],
        query=["A b", " a  B ", "", "  ", "c", "d", "e", "f", "g"],
    )
    assert mk_queries(j, 5) == ["A b", "c", "d", "e", "f"]
    assert mk_queries(j, 2) == ["A b", "c"]
    # the verdict does not gate the queries: the decision is taken on the probability
    assert mk_queries(Judgement(judge=False, query=["x"]), 5) == ["x"]
    assert search_queries(Judgement(judge=False), " who  won? ", 5) == ["who won?"]
    assert search_queries(Judgement(judge=True, query=["q"]), "who won?", 5) == ["q"]
    assert search_queries(Judgement(judge=True), "who won?", 0) == []


@pytest.mark.parametrize("p_enough", [0.9, 0.2, None])
def test_malformed_judge_twice_the_probability_still_decides(
    store: Store, p_enough: float | None
) -> None:
    """An unparsable judge reply gives no thought, verdict or query; the forced choice still
    decides: stop on a high P(enough), else retrieve with the user question."""
    rec = Recorder(store)
    fake = fake_llm("not json", p_enough=p_enough)
    llm = with_logprobs(fake) if p_enough is not None else fake
    state = full_state(build_graph("missing_knowledge", llm=llm, retriever=rec), QUESTION)
    assert len(judge_calls(fake)) == 2  # the call and one repair retry
    assert state["judge_parse_ok"] is False and state["judge_verdict"] is False
    assert any(
        t.get("node") == "judge_missing" and t.get("path") == "default" for t in state["trace"]
    )
    assert state["answer"]
    if p_enough == 0.9:
        assert state["missing"] is False and len(rec.calls) == 1
        assert state["stop_reason"] == "enough_knowledge"
    else:
        assert state["missing"] is True and rec.calls == [(QUESTION, 5), (QUESTION, 2)]
        assert state["stop_reason"] == "answered_after_missing_knowledge"


def test_malformed_once_then_valid(store: Store) -> None:
    replies = iter(["not json", verdict(True, ["closing ceremony flag"])])
    rec = Recorder(store)
    fake = fake_llm(lambda _messages: next(replies))
    state = full_state(build_graph("missing_knowledge", llm=fake, retriever=rec), QUESTION)
    assert state["judge_parse_ok"] is True and state["missing"] is True
    assert [q for q, _ in rec.calls] == [QUESTION, "closing ceremony flag"]


# -- evidence pool, md5 dedup, budget ------------------------------------------------------
def test_md5_dedup_against_initial_and_across_queries() -> None:
    first = Fixed({QUESTION: [ev("i1", "Shared text. "), ev("i2", "Other")]})
    second = Fixed(
        {
            "q1": [ev("x1", "  Shared text."), ev("n1", "New one")],
            "q2": [ev("n1b", "New one"), ev("n2", "New two")],
        }
    )
    rec = build_graph("missing_knowledge", llm=fake_llm(verdict(True, ["q1", "q2"])), retriever=first, kb_pairs=second,
                                  kb_secondary="qa_pairs", top_k=8)  # fmt: skip
    state = full_state(rec, QUESTION)
    assert [c["text"].strip() for c in state["mk_contexts"]] == ["New one", "New two"]
    hashes = [md5_text(e["text"]) for e in state["evidence"]]
    assert len(hashes) == len(set(hashes)) == 4


@pytest.mark.parametrize(
    ("top_k", "mode", "k_orig", "k_mk"),
    [(4, "matched", 2, 2), (2, "matched", 1, 1), (4, "additive", 4, 2), (5, "matched", 2, 3)],
)
def test_budget(store: Store, top_k: int, mode: Any, k_orig: int, k_mk: int) -> None:
    assert budget(top_k, mode)[0::2] == (k_orig, k_mk)
    fake = fake_llm(verdict(True, ["Olympics flag", "Google founded", "Hamlet tragedy"]))
    state = full_state(
        build_graph("missing_knowledge", llm=fake, retriever=store, top_k=top_k, budget_mode=mode,
                    first_k=0),  # the paper's budget
        QUESTION,
    )  # fmt: skip
    assert len(state["initial_contexts"]) == k_orig and 0 < len(state["mk_contexts"]) <= k_mk


def test_per_query_budget_keeps_every_query_top_k(store: Store) -> None:
    fake = fake_llm(verdict(True, ["Google founded", "Hamlet tragedy", "Paris capital"]))
    state = full_state(
        build_graph(
            "missing_knowledge", llm=fake, retriever=store, mk_budget="per_query", first_k=0
        ),
        QUESTION,
    )
    assert len(state["mk_contexts"]) > 2


def chunk(cid: str, text: str) -> Chunk:
    return Chunk(id=cid, title="", text=text, kind="doc", kb="passages", source="dense", score=0.0, rank=1,
                 retrieved_by="mk", query="q", md5=md5_text(text))  # fmt: skip


def test_round_robin_merge() -> None:
    a, b, c, d = chunk("a", "A"), chunk("b", "B"), chunk("c", "C"), chunk("d", "D")
    assert [x["id"] for x in merge_round_robin([[a, b], [c, d]], [], 2)] == ["a", "c"]
    assert [x["id"] for x in merge_round_robin([[a, b], [c, d]], [md5_text("C")], 2)] == ["a", "b"]
    assert [x["id"] for x in merge_round_robin([[a, b], [c, d]], [], None)] == ["a", "c", "b", "d"]


# -- prompts -------------------------------------------------------------------------------
def test_final_prompt_layout(store: Store) -> None:
    fake = fake_llm(
        verdict(True, ["closing ceremony US flag"], ["SECRET-LIST-ITEM"], thought="THOUGHT-XYZ"),
        draft="DRAFT-ABC",
    )
    build_graph("missing_knowledge", llm=fake, retriever=store, top_k=2, first_k=0).invoke(
        {"question": Q_OPEN}
    )
    prompt = user_msg(fake, FINAL)
    marks = [
        "## Context",
        FINAL,
        "THOUGHT-XYZ",
        "Julie Chu carried",
        "## Question",
        Q_OPEN,
        "## Answer",
    ]
    positions = [prompt.index(m) for m in marks]
    assert positions == sorted(positions)
    assert "DRAFT-ABC" not in prompt and "SECRET-LIST-ITEM" not in prompt
    assert prompt.rstrip().endswith("## Answer")
    fake2 = fake_llm(verdict(True, ["closing ceremony US flag"], ["SECRET-LIST-ITEM"]))
    build_graph(
        "missing_knowledge", llm=fake2, retriever=store, top_k=2, first_k=0,
        include_missing_list=True,
    ).invoke({"question": Q_OPEN})  # fmt: skip
    assert "SECRET-LIST-ITEM" in user_msg(fake2, FINAL)


def test_chunk_formatting_groups_and_numbers() -> None:
    qa = Chunk(**{**chunk("p", "Q: who?\nA: me"), "kind": "qa"})
    text = format_chunks([chunk("a", "alpha"), qa, chunk("b", "beta")])
    assert text.split("\n") == [
        "### Documents",
        "Document[1]: alpha",
        "Document[2]: beta",
        "### History QA pairs",
        "Q: who?",
        "A: me",
    ]
    assert format_chunks([chunk("c", "gamma")]).startswith("### Documents\nDocument[1]: gamma")
    assert format_chunks([]) == "(none)"


def test_mk_section_numbering_restarts(store: Store) -> None:
    fake = fake_llm(verdict(True, ["closing ceremony US flag"]))
    build_graph("missing_knowledge", llm=fake, retriever=store, top_k=2, first_k=0).invoke(
        {"question": Q_OPEN}
    )
    prompt = user_msg(fake, FINAL)
    assert prompt.count("Document[1]:") == 2  # once in Context, again in the MK section


def test_judge_prompt_contents(store: Store) -> None:
    fake = fake_llm(verdict(False), draft="DRAFT-ABC")
    state = full_state(build_graph("missing_knowledge", llm=fake, retriever=store), QUESTION)
    judge = calls_of(fake, JUDGE)[0]
    user = user_msg(fake, JUDGE)
    assert user.rstrip().endswith("## Output")
    assert (
        user.index("## Query")
        < user.index(QUESTION)
        < user.index("## Context")
        < user.index(JUDGE)
        < user.index("DRAFT-ABC")
    )
    for c in state["initial_contexts"]:
        assert c["text"] in user
    for key in ("thought", "judge", "missing_knowledge", "query"):
        assert f'"{key}"' in judge


def test_chinese_prompts_and_options(store: Store) -> None:
    fake = fake_llm(verdict(False), draft="促排卵治疗", final="抗雄激素疗法")
    options = format_options({"A": "抗雄激素疗法", "B": "促排卵治疗"})
    rec = Recorder(store)
    q = "多囊卵巢综合征首选治疗方法是什么？"
    out = build_graph("missing_knowledge", llm=fake, retriever=rec, options_text=options).invoke(
        {"question": q}
    )
    judge = calls_of(fake, JUDGE)[0]
    assert (
        "示例一" in judge
        and "示例二" in judge
        and '"judge": true' in judge
        and '"judge": false' in judge
    )
    assert all("选项：\nA. 抗雄激素疗法\nB. 促排卵治疗" in p for p in fake.prompts())
    # options are never a retrieval query (no logprobs: the stem is searched again for more)
    assert rec.calls == [(q, 5), (q, 2)]
    assert out["answer"] == "抗雄激素疗法"


def test_options_appended_to_the_question_are_not_retrieved(store: Store) -> None:
    fake = fake_llm(verdict(False), final="Paris", p_enough=0.9)
    rec = Recorder(store)
    asked = "What is the capital of France?\nOptions:\nA. Paris\nB. Berlin\nAnswer with the correct option."
    out = build_graph("missing_knowledge", llm=with_logprobs(fake), retriever=rec).invoke(
        {"question": asked}
    )
    assert rec.calls == [("What is the capital of France?", 5)] and out["queries"] == [
        "What is the capital of France?"
    ]
    assert all("France?\nOptions:\nA. Paris\nB. Berlin" in p for p in fake.prompts())
    assert split_question("Q?\n选项：\nA. x") == ("Q?", "A. x")
    assert split_question("Plain question?", "A. y") == ("Plain question?", "A. y")


def test_draft_prompt_has_no_mk_section(store: Store) -> None:
    fake = fake_llm(verdict(False))
    build_graph("missing_knowledge", llm=fake, retriever=store).invoke({"question": QUESTION})
    draft = fake.prompts()[0]
    assert JUDGE not in draft and FINAL not in draft and "## Context" in draft


# -- knowledge bases -----------------------------------------------------------------------
def test_two_way_and_merged_knowledge_bases(store: Store, pairs: PairStore) -> None:
    qa = pairs.as_retriever(gamma=1.0, source_label="qa_pairs")
    two_way = KnowledgeBaseRetriever("merged", store, qa, merged_order="interleave")
    hits = two_way.chunks("who founded google", 4)
    assert [c["kind"] for c in hits].count("doc") == 2 and [c["kind"] for c in hits].count(
        "qa"
    ) == 2
    merged = KnowledgeBaseRetriever("merged", store, pairs).chunks(
        "who founded google", 3, mode="dense"
    )
    scores = [c["score"] for c in merged]
    assert {c["source"] for c in merged} == {"dense", "qa_pairs"}  # a PairStore is accepted as is
    assert scores == sorted(scores, reverse=True) and [c["rank"] for c in merged] == [1, 2, 3]
    # usable as a plain retriever, e.g. standard_rag on the merged KB
    out = build_graph(
        "standard_rag",
        llm=scripted(default="x"),
        retriever=two_way,
        top_k=4,
        retrieval_mode="dense",
    ).invoke({"question": "who founded google"})
    assert {e["source"] for e in out["evidence"]} == {"dense", "qa_pairs"}


def test_qa_store_by_path(store: Store, pairs: PairStore) -> None:
    fake = fake_llm(verdict(False))
    out = build_graph(
        "missing_knowledge",
        llm=fake,
        retriever=store,
        qa_store=str(pairs.path),
        kb_primary="qa_pairs",
    ).invoke({"question": "who founded google"})
    assert out["evidence"][0]["text"] == "Q: who founded google\nA: Larry Page and Sergey Brin"


def test_qa_kb_without_pair_store_is_a_clear_error(store: Store) -> None:
    graph = build_graph(
        "missing_knowledge", llm=fake_llm(verdict(False)), retriever=store, kb_primary="merged"
    )
    with pytest.raises(GapragError) as err:
        graph.invoke({"question": QUESTION})
    assert "qa-pairs" in err.value.hint


def test_miss_rate_from_missing_flag(store: Store) -> None:
    """``missing`` is the decision taken (its mean is the miss rate); ``judge_verdict`` keeps
    the judge's JSON verdict, which the paper routes on."""
    verdicts = iter(
        [verdict(True, ["Sochi"]), verdict(False), verdict(False), verdict(True, ["Hamlet"])]
    )
    fake = fake_llm(lambda _m: next(verdicts))
    graph = build_graph("missing_knowledge", llm=with_logprobs(fake), retriever=store)
    flags, verdicts_seen = [], []
    for q, p in zip(["a", "b", "c", "d"], [0.1, 0.8, 0.3, 0.6], strict=True):
        fake.logprobs = logprobs_for(p)
        out = graph.invoke({"question": q})
        flags.append(out["missing"])
        verdicts_seen.append(out["judge_verdict"])
    assert flags == [True, False, True, False] and sum(flags) / len(flags) == 0.5
    assert verdicts_seen == [True, False, False, True]


# -- gaprag kb qa-pairs ----------------------------------------------------------------------
def _qa_reply(messages: Any) -> str:
    text = str(messages[-1].content)
    if "Todd Lodwick" in text:
        return '{"pairs": [{"question": "who carried the us flag in the 2014 olympics", "answer": "Todd Lodwick"}, {"question": "Who carried the flag at the opening?", "answer": "Todd Lodwick"}]}'
    if "Google" in text:
        return '{"pairs": [{"question": "Who founded Google?", "answer": "Larry Page and Sergey Brin"}]}'
    return '{"pairs": []}'


def test_kb_qa_pairs_is_resumable_and_filters_eval_questions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset = tmp_path / "eval.jsonl"
    record = {"id": "q1", "question": QUESTION, "answers": ["Todd Lodwick"], "paragraphs": DOCS[:4]}
    dataset.write_text(json.dumps(record) + "\n")
    fake = scripted(default=_qa_reply)
    monkeypatch.setattr(kb_cli, "_llm", lambda _args: LLM(fake))
    out = tmp_path / "qa.sqlite"
    args = [
        "kb",
        "qa-pairs",
        str(dataset),
        "--out",
        str(out),
        "--embedder",
        "hashing-256",
        "--quiet",
    ]
    assert main([*args, "--limit", "2"]) == 0
    assert len(fake.calls) == 2
    assert main(args) == 0  # resumes: only the two chunks not done yet
    assert len(fake.calls) == 4
    msg = capsys.readouterr().out
    assert "2 chunks processed (2 already done)" in msg
    stored = PairStore.open(out, embedder=HashingEmbedder()).list(source="generated")
    questions = {p["question"] for p in stored}
    assert questions == {
        "Who carried the flag at the opening?",
        "Who founded Google?",
    }  # eval question left out
    assert {p["chunk_id"] for p in stored} == {"open", "google"}
    assert main(args) == 0 and len(fake.calls) == 4  # nothing left to do


def test_kb_qa_pairs_historical(tmp_path: Path) -> None:
    src = tmp_path / "hist.jsonl"
    src.write_text(
        json.dumps({"question": "who wrote hamlet", "answer": "Shakespeare"}) + "\n"
        + json.dumps({"question": "capital of france", "answers": ["Paris", "paris"]}) + "\n"
    )  # fmt: skip
    out = tmp_path / "h.sqlite"
    assert (
        main(
            [
                "kb",
                "qa-pairs",
                str(src),
                "--out",
                str(out),
                "--historical",
                "--embedder",
                "hashing-256",
                "--quiet",
            ]
        )
        == 0
    )
    stored = PairStore.open(out, embedder=HashingEmbedder()).list(source="historical")
    assert sorted(p["answer"] for p in stored) == ["Paris", "Shakespeare"]
    assert any(
        p["chunk"] == "Q: who wrote hamlet A: Shakespeare" for p in stored
    )  # whitespace-normalised


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--max-pairs", "0"], "--max-pairs must be at least 1"),
        (["--limit", "-1"], "--limit must be >= 0"),
        (["--exclude-questions", "/nope.jsonl"], "no such file: /nope.jsonl"),
    ],
)
def test_kb_qa_pairs_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], needle: str
) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps(DOCS[0]) + "\n")
    assert main(["kb", "qa-pairs", str(corpus), "--out", str(tmp_path / "o.sqlite"), *extra]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_kb_qa_pairs_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            ["kb", "qa-pairs", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "o.sqlite")]
        )
        == 2
    )
    assert "no such file or folder" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q only"}) + "\n")
    assert (
        main(
            [
                "kb",
                "qa-pairs",
                str(bad),
                "--out",
                str(tmp_path / "o.sqlite"),
                "--historical",
                "--embedder",
                "hashing-256",
            ]
        )
        == 2
    )
    assert "bad.jsonl:1: field 'answer'" in capsys.readouterr().err
    assert main(["kb", "qa-pairs", str(bad), "--out", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err


# -- the module-level layout: fresh state per question, async, nodes alone, records ---------
Q2 = "who founded google"


def two_question_model() -> ScriptedChatModel:
    """Knowledge is missing for QUESTION (two queries), not for Q2; answers differ."""

    def judge(messages: Any) -> str:
        if QUESTION in str(messages[-1].content):
            return verdict(True, ["closing ceremony US flag", "Sochi"])
        return verdict(False, thought="enough")

    def final(messages: Any) -> str:
        return "Julie Chu" if QUESTION in str(messages[-1].content) else "Larry Page"

    return scripted(rules=[(JUDGE, judge), (FINAL, final)], default="draft")


def test_a_second_question_on_a_thread_starts_clean(store: Store) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    fake = two_question_model()
    graph = build_graph(
        "missing_knowledge", llm=with_logprobs(fake), retriever=store,
        checkpointer=InMemorySaver(),
    )  # fmt: skip
    config = {"configurable": {"thread_id": "t1"}}
    fake.logprobs = logprobs_for(0.1)
    first = graph.invoke({"question": QUESTION}, config)
    fake.logprobs = logprobs_for(0.9)
    second = graph.invoke({"question": Q2}, config)
    assert first["answer"] == "Julie Chu" and second["answer"] == "Larry Page"
    assert first["iterations"] == 2
    assert first["stop_reason"] == "answered_after_missing_knowledge"
    assert second["queries"] == [Q2] and second["mk_queries"] == [] and second["missing"] is False
    assert second["usage"]["llm_calls"] == 4 and second["usage"]["retrieval_calls"] == 1
    assert second["iterations"] == 1 and second["stop_reason"] == "enough_knowledge"
    assert {e["round"] for e in second["evidence"]} == {1} and len(second["evidence"]) == 5
    assert [d["decision"] for d in second["decisions"]] == ["stop"]
    values = graph.get_state(config).values
    assert values["mk_contexts"] == [] and values["mk_candidates"] == []
    assert values["mk_round"] == 0


def test_ainvoke_gives_the_same_output_as_invoke(store: Store) -> None:
    import asyncio

    graph = build_graph("missing_knowledge", llm=two_question_model(), retriever=store)
    sync = graph.invoke({"question": QUESTION})
    asyn = asyncio.run(graph.ainvoke({"question": QUESTION}))
    for out in (sync, asyn):
        out["usage"].pop("wall_s")
    assert sync == asyn and sync["answer"] == "Julie Chu" and sync["missing"] is True


def test_judge_node_alone() -> None:
    import asyncio

    from langgraph.runtime import Runtime

    from gaprag.deps import Deps
    from gaprag.graphs.missing_knowledge.context import Context
    from gaprag.graphs.missing_knowledge.nodes import judge_missing, retrieve_missing

    fake = fake_llm(verdict(True, ["q1", "Q1 ", "q2"], ["a"], thought="lacks it"))
    state = State(question=QUESTION, initial_contexts=[chunk("i1", "Sochi hosted it.")])
    deps = Deps.of(llm=fake, retriever=Fixed({"q1": [ev("a1", "A")], "q2": [ev("b1", "B")]}))
    runtime = Runtime(context=Context(max_mk_queries=5))
    update = asyncio.run(judge_missing(state, runtime, deps))
    assert update["missing"] is True and update["mk_queries"] == ["q1", "q2"]
    assert update["thought"] == "lacks it" and update["judge_parse_ok"] is True
    assert "Document[1]: Sochi hosted it." in user_msg(fake, JUDGE)
    state = dataclasses.replace(state, **update)
    found = asyncio.run(retrieve_missing(state, runtime, deps))
    assert [[c["id"] for c in cs] for cs in found["mk_candidates"]] == [["a1"], ["b1"]]
    assert found["queries"] == ["q1", "q2"] and found["iterations"] == 2


@pytest.mark.parametrize(
    ("replies", "p_enough", "decision", "p", "path"),
    [
        ([verdict(True, ["q1"])], 0.2, "continue", 0.2, "logprobs"),
        ([verdict(False)], 0.8, "stop", 0.8, "logprobs"),
        ([verdict(True, ["q1"])], 0.8, "stop", 0.8, "logprobs"),  # p decides, not the verdict
        ([verdict(False)], 0.2, "continue", 0.2, "logprobs"),
        (["not json", verdict(True, ["q1"])], 0.3, "continue", 0.3, "logprobs"),
        (["not json", "still not"], 0.6, "stop", 0.6, "logprobs"),
        ([verdict(False)], None, "continue", None, "no-logprobs"),  # no logprobs: retrieve
    ],
)
def test_the_judge_decision_is_recorded(
    store: Store,
    replies: list[str],
    p_enough: float | None,
    decision: str,
    p: float | None,
    path: str,
) -> None:
    answers = iter(replies)
    fake = fake_llm(lambda _m: next(answers), p_enough=p_enough)
    llm = with_logprobs(fake) if p_enough is not None else fake
    out = build_graph("missing_knowledge", llm=llm, retriever=store).invoke({"question": QUESTION})
    [record] = out["decisions"]
    assert record == {
        "node": "judge_missing", "round": 1, "decision": decision,
        "p": record["p"] if p is None else pytest.approx(p), "path": path, "threshold": 0.5,
    }  # fmt: skip
    assert p is not None or record["p"] is None
    assert "answer" not in record  # regenerate, no calibration: not known at the decision
    assert out["missing"] is (decision == "continue")


def test_shown_ids_are_the_chunks_in_prompts_not_all_retrieved() -> None:
    docs = Fixed(
        {
            QUESTION: [ev("i1", "Opening text")],
            "q1": [ev("a1", "First new")],
            "q2": [ev("b1", "Second new")],
        }
    )
    pairs = Fixed({"*": [ev("p1", "Q: who carried it?\nA: Todd Lodwick")]})
    fake = fake_llm(verdict(True, ["q1", "q2"]))
    out = build_graph(
        "missing_knowledge", llm=fake, retriever=docs, kb_pairs=pairs, kb_primary="merged",
        merged_order="interleave", top_k=2, first_k=0,
    ).invoke({"question": QUESTION})  # fmt: skip
    # KB A (merged) gives i1 and p1, cut to k_orig=1: p1 is retrieved but never shown;
    # the budget keeps one of the two missing-knowledge chunks: b1 is never shown
    assert out["retrieved_ids"] == ["i1", "p1", "a1", "b1"]
    assert out["shown_ids"] == ["i1", "a1"]
    assert "Opening text" in user_msg(fake, FINAL) and "First new" in user_msg(fake, FINAL)
    assert "Second new" not in "\n".join(fake.prompts())


# -- the loop decision: P(nothing missing) from a forced choice against judge_threshold -------
@pytest.mark.parametrize(
    ("p_enough", "threshold", "stops"),
    [(0.9, 0.5, True), (0.3, 0.5, False), (0.7, 0.8, False), (0.7, 0.6, True), (0.5, 0.5, True),
     (0.99, 1.01, False)],
)  # fmt: skip
def test_threshold_decides_whatever_the_verdict_says(
    store: Store, p_enough: float, threshold: float, stops: bool
) -> None:
    for judge in (True, False):
        rec = Recorder(store)
        fake = fake_llm(verdict(judge, ["closing ceremony flag"]), p_enough=p_enough)
        out = build_graph(
            "missing_knowledge", llm=with_logprobs(fake), retriever=rec, judge_threshold=threshold
        ).invoke({"question": QUESTION})
        assert out["missing"] is (not stops) and out["judge_verdict"] is judge
        assert len(rec.calls) == (1 if stops else 2)
        assert out["stop_reason"] == (
            "enough_knowledge" if stops else "answered_after_missing_knowledge"
        )
        [record] = out["decisions"]
        assert record["threshold"] == threshold and record["p"] == pytest.approx(p_enough)


def test_no_logprobs_endpoint_is_not_asked_and_retrieves(store: Store) -> None:
    """A reply without a probability cannot be used: an endpoint known to give no logprobs is
    not asked the forced choice, and the decision falls toward retrieving."""
    rec = Recorder(store)
    fake = fake_llm(verdict(False, thought="all there"))  # the verdict says nothing is missing
    out = build_graph("missing_knowledge", llm=fake, retriever=rec).invoke({"question": QUESTION})
    assert calls_of(fake, ASK) == [] and len(fake.calls) == 3
    assert out["missing"] is True and rec.calls == [(QUESTION, 5), (QUESTION, 2)]
    assert out["decisions"][0]["p"] is None and out["decisions"][0]["path"] == "no-logprobs"


def test_no_logprobs_endpoint_with_trust_answer_is_asked_and_its_yes_stops(store: Store) -> None:
    """``no_logprobs="trust_answer"``: the forced choice is asked without logprobs and the
    model's "Yes" (nothing missing) stops the loop, as the paper does."""
    rec = Recorder(store)
    fake = ScriptedChatModel(
        rules=[(ASK, "Yes"), (JUDGE, verdict(False)), (FINAL, "Julie Chu")], default="draft"
    )
    graph = build_graph("missing_knowledge", llm=fake, retriever=rec, no_logprobs="trust_answer")
    out = graph.invoke({"question": QUESTION})
    assert len(calls_of(fake, ASK)) == 1 and out["missing"] is False
    assert rec.calls == [(QUESTION, 5)]  # no second retrieval
    (decision,) = out["decisions"]
    assert (decision["decision"], decision["p"], decision["path"]) == (
        "stop", None, "parsed-no-logprobs",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("logprobs", "reply", "path"),
    [
        (None, "Yes", "parsed-no-logprobs"),  # no logprobs in the reply: the text is no p
        ({"Maybe": -0.1, "The": -2.0}, "Yes", "parsed-no-logprobs"),  # no Yes or No among them
        ({"Maybe": -0.1}, "perhaps so", "default"),  # and a malformed reply
    ],
)
def test_missing_logprobs_or_malformed_choice_retrieve(
    store: Store, logprobs: dict[str, float] | None, reply: str, path: str
) -> None:
    rec = Recorder(store)
    fake = ScriptedChatModel(
        rules=[(ASK, reply), (JUDGE, verdict(False)), (FINAL, "Julie Chu")], default="draft",
        logprobs=logprobs,
    )  # fmt: skip
    out = build_graph("missing_knowledge", llm=with_logprobs(fake), retriever=rec).invoke(
        {"question": QUESTION}
    )
    assert len(calls_of(fake, ASK)) >= 1
    assert out["decisions"][0]["p"] is None and out["decisions"][0]["path"] == path
    assert out["missing"] is True and len(rec.calls) == 2
    assert out["stop_reason"] == "answered_after_missing_knowledge"


def test_calibration_run_never_stops_and_records_the_answer(store: Store) -> None:
    """In a calibration run the decision records the answer from the first retrieval only
    (one extra call: the final prompt without new chunks) and the loop goes on."""
    rec = Recorder(store)

    def final(messages: Any) -> str:
        return "Julie Chu" if "Document[1]" in str(messages[-1].content).split(FINAL)[1] else "Todd"

    fake = fake_llm(verdict(False, thought="all there"), final=final, p_enough=0.95)
    out = build_graph(
        "missing_knowledge", llm=with_logprobs(fake), retriever=rec, calibration=True
    ).invoke({"question": QUESTION})
    [record] = out["decisions"]
    assert record["decision"] == "continue" and record["p"] == pytest.approx(0.95)
    assert record["answer"] == "Todd"  # the answer had it stopped: no missing-knowledge chunks
    assert out["answer"] == "Julie Chu" and out["missing"] is True and len(rec.calls) == 2
    # draft, judge, choice, the calibration answer, final
    assert len(fake.calls) == 5 and len(calls_of(fake, FINAL)) == 2
    # reuse_draft: the stop answer is the draft, no extra call
    fake2 = fake_llm(verdict(False), p_enough=0.95)
    out2 = build_graph(
        "missing_knowledge", llm=with_logprobs(fake2), retriever=store, calibration=True,
        final_when_not_missing="reuse_draft",
    ).invoke({"question": QUESTION})  # fmt: skip
    assert out2["decisions"][0]["answer"] == "Todd Lodwick" and len(fake2.calls) == 4
    assert out2["missing"] is True


def test_calibration_records_the_answer_without_logprobs(store: Store) -> None:
    fake = fake_llm(verdict(True, ["q"]), final="Julie Chu")
    out = build_graph("missing_knowledge", llm=fake, retriever=store, calibration=True).invoke(
        {"question": QUESTION}
    )
    [record] = out["decisions"]
    assert record["p"] is None and record["answer"] == "Julie Chu" and out["missing"] is True


# -- missing-knowledge retrieval brings chunks not retrieved yet ------------------------------
@pytest.mark.parametrize("mode", ["bm25", "dense", "hybrid"])
def test_mk_retrieval_excludes_seen_chunks_and_fills_its_budget(
    store: Store, mode: RetrievalMode
) -> None:
    """The audit: missing-knowledge queries close to the question re-fetched the first chunks,
    which the md5 merge then dropped, so nothing was added. Now the store skips them."""
    rec = Recorder(store)
    # both queries would rank the first chunks at the top
    fake = fake_llm(verdict(True, [QUESTION, "who carried the US flag 2014 Olympics"]))
    state = full_state(
        build_graph("missing_knowledge", llm=fake, retriever=rec, top_k=4, first_k=0,
                    retrieval_mode=mode),
        QUESTION,
    )  # fmt: skip
    first = [c["id"] for c in state["initial_contexts"]]
    assert len(first) == 2
    assert rec.excluded[0] == set() and rec.excluded[1] == set(first)
    q1 = [c["id"] for c in state["mk_candidates"][0]]
    assert rec.excluded[2] == set(first) | set(q1)  # the second query skips the first's too
    got = [c["id"] for c in state["mk_contexts"]]
    assert not set(got) & set(first)
    everything = [i for cs in state["mk_candidates"] for i in (c["id"] for c in cs)]
    if mode == "bm25":  # only three passages share a term with the queries: the one left
        assert got == everything == ["sochi"]
    else:  # the budget is filled with new chunks
        assert len(got) == 2 and len(everything) == len(set(everything)) == 4
    assert set(state["retrieved_ids"]) == set(first) | set(everything)


def test_mk_retrieval_excludes_seen_pairs(store: Store, pairs: PairStore) -> None:
    """The same on a question-answer pair store (KB A = KB B = qa_pairs)."""
    fake = fake_llm(verdict(True, ["who founded google"]))
    state = full_state(
        build_graph("missing_knowledge", llm=fake, retriever=store, kb_pairs=pairs,
                    kb_primary="qa_pairs", kb_secondary="qa_pairs", top_k=2, first_k=0),
        "who founded google",
    )  # fmt: skip
    [first] = state["initial_contexts"]
    [new] = state["mk_contexts"]
    assert first["id"] != new["id"] and "Larry Page" in first["text"]


# -- the first retrieval's budget -------------------------------------------------------------
@pytest.mark.parametrize(
    ("settings", "k_orig", "k_mk"),
    [
        ({}, 5, 2),  # default: the baseline's 5, then the paper's missing-knowledge share
        ({"first_k": 0}, 2, 2),  # the paper's TopK=4 split
        ({"first_k": 0, "budget_mode": "additive"}, 4, 2),
        ({"first_k": 3, "top_k": 8}, 4, 4),  # the paper's share when it is larger
        ({"first_k": 6, "top_k": 2}, 6, 1),
    ],
)
def test_first_retrieval_shows_at_least_first_k(
    store: Store, settings: dict[str, Any], k_orig: int, k_mk: int
) -> None:
    rec = Recorder(store)
    fake = fake_llm(verdict(True, ["Google founded", "Hamlet tragedy", "Paris capital"]))
    state = full_state(
        build_graph("missing_knowledge", llm=fake, retriever=rec, **settings), QUESTION
    )
    assert rec.calls[0] == (QUESTION, k_orig) and len(state["initial_contexts"]) == min(k_orig, 6)
    assert all(k == k_mk for _, k in rec.calls[1:])
    assert len(state["mk_contexts"]) == min(k_mk, 6 - len(state["initial_contexts"]))
    draft = fake.calls[0]["messages"][-1][1]
    assert all(c["text"] in draft for c in state["initial_contexts"])  # all of them shown


# -- prompts as turns ---------------------------------------------------------------------------
def test_worked_example_is_a_user_assistant_turn_pair(store: Store) -> None:
    fake = fake_llm(verdict(True, ["closing ceremony"]), p_enough=0.2)
    build_graph("missing_knowledge", llm=with_logprobs(fake), retriever=store).invoke(
        {"question": QUESTION}
    )
    draft, final = fake.calls[0]["messages"], fake.calls[-1]["messages"]
    for messages in (draft, final):
        assert [role for role, _ in messages] == ["system", "human", "ai", "human"]
        assert "Larry Page" not in messages[0][1] and "Example" not in messages[0][1]
        assert "who founded google?" in messages[1][1]
        assert messages[2][1] == "Larry Page and Sergey Brin"
        assert QUESTION in messages[3][1] and "who founded google" not in messages[3][1]
    assert FINAL in final[1][1] and FINAL not in draft[1][1]


def test_chinese_worked_example_is_a_turn_pair(store: Store) -> None:
    fake = fake_llm(verdict(False), draft="促排卵治疗", final="抗雄激素疗法")
    build_graph("missing_knowledge", llm=fake, retriever=store).invoke(
        {"question": "多囊卵巢综合征首选治疗方法是什么？"}
    )
    draft = fake.calls[0]["messages"]
    assert [role for role, _ in draft] == ["system", "human", "ai", "human"]
    assert draft[2][1] == "甲状腺功能检查" and "示例" not in draft[0][1]


def test_decision_follow_up_shows_the_thought_not_the_verdict(store: Store) -> None:
    fake = fake_llm(
        verdict(True, ["SECRET-QUERY"], ["SECRET-PIECE"], thought='lacks "closing" bearer'),
        p_enough=0.2,
    )
    build_graph("missing_knowledge", llm=with_logprobs(fake), retriever=store).invoke(
        {"question": QUESTION}
    )
    [call] = [c for c in fake.calls if ASK in c["messages"][-1][1]]
    messages = call["messages"]
    assert [role for role, _ in messages] == ["system", "human", "ai", "human"]
    assert messages[1][1] == user_msg(fake, JUDGE)  # the judge prompt as it was (cache prefix)
    assert json.loads(messages[2][1]) == {"thought": 'lacks "closing" bearer'}
    assert "SECRET" not in messages[2][1] and "judge" not in messages[2][1]
    assert messages[3][1].endswith(ASK)
    assert call["kwargs"].get("logprobs") is True


def test_turns_count_as_instructions_in_the_token_split() -> None:
    import dataclasses

    from gaprag.graphs.missing_knowledge.nodes import PROMPTS, TURNS, render
    from gaprag.graphs.missing_knowledge.turns import with_follow_up

    bare = dataclasses.replace(PROMPTS["draft_en"], examples=())
    plain = bare.render(context="C", question="Q")
    rendered = render("draft_en", context="C", question="Q")
    [(user, reply)] = PROMPTS["draft_en"].examples
    example = len(user) + len(reply)
    assert rendered.parts == (plain.parts[0] + example, plain.parts[1], plain.parts[2] + example)
    follow = with_follow_up(plain, PROMPTS["enough_en"], TURNS["enough_en"], thought="T")
    ask = PROMPTS["enough_en"].user.strip()
    assert follow[-1] == ("user", ask) and follow[-2] == ("assistant", '{"thought": "T"}')
    assert follow.parts[0] == plain.parts[0] + len(ask) + len('{"thought": }')
    assert follow.parts[2] == plain.parts[2] + len(ask) + len('{"thought": "T"}')
