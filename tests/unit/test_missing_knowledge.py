"""missing_knowledge (MisK-RAG): wiring, routing, the one judge call, md5 merge and budget,
prompt layout, knowledge-base setups, and the `gaprag kb qa-pairs` job."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest

from gaprag import build_graph
from gaprag.cli import main
from gaprag.errors import GapragError
from gaprag.graphs.missing_knowledge import KnowledgeBaseRetriever, format_options
from gaprag.graphs.missing_knowledge import cli as kb_cli
from gaprag.graphs.missing_knowledge.judge import Judgement, mk_queries
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
JUDGE = "## First Round Answer"  # only the judge prompt has this heading
FINAL = "## Missing Knowledge Context"  # only the final prompt has this heading


class Recorder:
    """Wraps a retriever and records every (query, k)."""

    def __init__(self, inner: Retriever) -> None:
        self.inner = inner
        self.calls: list[tuple[str, int]] = []

    def search(
        self,
        query: str,
        k: int = 5,
        *,
        mode: RetrievalMode | None = None,
        exclude: Collection[str] = (),
    ) -> list[Evidence]:
        self.calls.append((query, k))
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


def fake_llm(
    judge_reply: Any, *, final: str = "Todd Lodwick and Julie Chu", draft: str = "Todd Lodwick"
) -> ScriptedChatModel:
    return scripted(rules=[(JUDGE, judge_reply), (FINAL, final)], default=draft)


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
def store(tmp_path: Path) -> Store:
    return Store.build(tmp_path / "wiki", DOCS, embedder=HashingEmbedder(), progress=False)


@pytest.fixture
def pairs(tmp_path: Path) -> PairStore:
    ps = PairStore.open(tmp_path / "qa.sqlite", embedder=HashingEmbedder())
    ps.add_many(PAIRS, source="generated")
    return ps


# -- graph structure -----------------------------------------------------------------------
def test_graph_nodes_and_edges() -> None:
    g = build_graph("missing_knowledge", llm=scripted()).get_graph()
    assert set(g.nodes) - {"__start__", "__end__"} == {
        "retrieve", "generate_draft", "judge_missing", "retrieve_missing", "update_evidence_pool", "generate_answer",
    }  # fmt: skip
    edges = {(e.source, e.target): e.conditional for e in g.edges}
    assert (
        edges[("judge_missing", "retrieve_missing")] and edges[("judge_missing", "generate_answer")]
    )
    assert edges[("update_evidence_pool", "generate_answer")] is False
    assert ("update_evidence_pool", "generate_draft") not in edges  # single pass, no loop back


# -- routing -------------------------------------------------------------------------------
def test_nothing_missing_skips_mk_retrieval(store: Store) -> None:
    rec = Recorder(store)
    fake = fake_llm(verdict(False, ["ignored query"], ["ignored"], thought="all there"))
    state = full_state(build_graph("missing_knowledge", llm=fake, retriever=rec), QUESTION)
    assert rec.calls == [(QUESTION, 2)]  # the user question once, on KB A
    assert state["mk_contexts"] == [] and state["mk_queries"] == [] and state["missing"] is False
    assert state["stop_reason"] == "nothing_missing" and state["iterations"] == 1
    assert len(fake.calls) == 3 and len(calls_of(fake, JUDGE)) == 1
    assert "all there" in user_msg(fake, FINAL)  # the thought still reaches the final call
    assert state["answer"] == "Todd Lodwick and Julie Chu"


def test_reuse_draft_saves_the_final_call(store: Store) -> None:
    fake = fake_llm(verdict(False))
    out = build_graph(
        "missing_knowledge", llm=fake, retriever=store, final_when_not_missing="reuse_draft"
    ).invoke({"question": QUESTION})
    assert len(fake.calls) == 2 and out["answer"] == out["draft_answer"] == "Todd Lodwick"
    assert out["usage"]["llm_calls"] == 2


def test_missing_runs_one_judge_and_each_query_once(store: Store) -> None:
    rec = Recorder(store)
    fake = fake_llm(verdict(True, ["q1", "q2"], ["opening bearer", "closing bearer"]))
    state = full_state(build_graph("missing_knowledge", llm=fake, retriever=rec), QUESTION)
    assert rec.calls == [(QUESTION, 2), ("q1", 2), ("q2", 2)]  # exact strings, no prefix
    assert len(calls_of(fake, JUDGE)) == 1 and len(fake.calls) == 3
    assert (
        state["mk_round"] == 1
        and state["iterations"] == 2
        and state["stop_reason"] == "single_pass"
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
    rec2 = Recorder(store)
    fake = fake_llm(verdict(True, [], []))
    state = full_state(build_graph("missing_knowledge", llm=fake, retriever=rec2), QUESTION)
    assert [q for q, _ in rec2.calls] == [QUESTION] and state["mk_round"] == 0
    assert len(calls_of(fake, FINAL)) == 1 and state["answer"]


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
    assert mk_queries(Judgement(judge=False, query=["x"]), 5) == []


def test_malformed_judge_twice_defaults_to_nothing_missing(store: Store) -> None:
    rec = Recorder(store)
    fake = fake_llm("not json")
    state = full_state(build_graph("missing_knowledge", llm=fake, retriever=rec), QUESTION)
    assert len(calls_of(fake, JUDGE)) == 2  # the call and one repair retry
    assert state["judge_parse_ok"] is False and state["missing"] is False
    assert len(rec.calls) == 1 and state["answer"] and state["stop_reason"] == "nothing_missing"
    assert any(
        t.get("node") == "judge_missing" and t.get("path") == "default" for t in state["trace"]
    )


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
        build_graph("missing_knowledge", llm=fake, retriever=store, top_k=top_k, budget_mode=mode),
        QUESTION,
    )
    assert len(state["initial_contexts"]) == k_orig and 0 < len(state["mk_contexts"]) <= k_mk


def test_per_query_budget_keeps_every_query_top_k(store: Store) -> None:
    fake = fake_llm(verdict(True, ["Google founded", "Hamlet tragedy", "Paris capital"]))
    state = full_state(
        build_graph("missing_knowledge", llm=fake, retriever=store, mk_budget="per_query"), QUESTION
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
    build_graph("missing_knowledge", llm=fake, retriever=store, top_k=2).invoke(
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
        "missing_knowledge", llm=fake2, retriever=store, top_k=2, include_missing_list=True
    ).invoke({"question": Q_OPEN})
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
    build_graph("missing_knowledge", llm=fake, retriever=store, top_k=2).invoke(
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
    assert rec.calls == [(q, 2)]  # options are never a retrieval query
    assert out["answer"] == "抗雄激素疗法"


def test_options_appended_to_the_question_are_not_retrieved(store: Store) -> None:
    fake = fake_llm(verdict(False), final="Paris")
    rec = Recorder(store)
    asked = "What is the capital of France?\nOptions:\nA. Paris\nB. Berlin\nAnswer with the correct option."
    out = build_graph("missing_knowledge", llm=fake, retriever=rec).invoke({"question": asked})
    assert rec.calls == [("What is the capital of France?", 2)] and out["queries"] == [
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
    verdicts = iter(
        [verdict(True, ["Sochi"]), verdict(False), verdict(False), verdict(True, ["Hamlet"])]
    )
    fake = fake_llm(lambda _m: next(verdicts))
    graph = build_graph("missing_knowledge", llm=fake, retriever=store)
    flags = [graph.invoke({"question": q})["missing"] for q in ["a", "b", "c", "d"]]
    assert flags == [True, False, False, True] and sum(flags) / len(flags) == 0.5


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

    graph = build_graph(
        "missing_knowledge", llm=two_question_model(), retriever=store, checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "t1"}}
    first = graph.invoke({"question": QUESTION}, config)
    second = graph.invoke({"question": Q2}, config)
    assert first["answer"] == "Julie Chu" and second["answer"] == "Larry Page"
    assert first["iterations"] == 2 and first["stop_reason"] == "single_pass"
    assert second["queries"] == [Q2] and second["mk_queries"] == [] and second["missing"] is False
    assert second["usage"]["llm_calls"] == 3 and second["usage"]["retrieval_calls"] == 1
    assert second["iterations"] == 1 and second["stop_reason"] == "nothing_missing"
    assert {e["round"] for e in second["evidence"]} == {1} and len(second["evidence"]) == 2
    assert [d["decision"] for d in second["decisions"]] == ["not_missing"]
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
    ("replies", "decision", "path"),
    [
        ([verdict(True, ["q1"])], "missing", "parsed"),
        ([verdict(False)], "not_missing", "parsed"),
        (["not json", verdict(True, ["q1"])], "missing", "repaired"),
        (["not json", "still not"], "not_missing", "default"),
    ],
)
def test_the_judge_decision_is_recorded(
    store: Store, replies: list[str], decision: str, path: str
) -> None:
    answers = iter(replies)
    fake = fake_llm(lambda _m: next(answers))
    out = build_graph("missing_knowledge", llm=fake, retriever=store).invoke({"question": QUESTION})
    assert out["decisions"] == [
        {
            "node": "judge_missing",
            "round": 1,
            "decision": decision,
            "p": None,
            "path": path,
            "threshold": None,
        }
    ]


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
        merged_order="interleave", top_k=2,
    ).invoke({"question": QUESTION})  # fmt: skip
    # KB A (merged) gives i1 and p1, cut to k_orig=1: p1 is retrieved but never shown;
    # the budget keeps one of the two missing-knowledge chunks: b1 is never shown
    assert out["retrieved_ids"] == ["i1", "p1", "a1", "b1"]
    assert out["shown_ids"] == ["i1", "a1"]
    assert "Opening text" in user_msg(fake, FINAL) and "First new" in user_msg(fake, FINAL)
    assert "Second new" not in "\n".join(fake.prompts())
