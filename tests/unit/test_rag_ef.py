"""rag_ef: prompt assembly, ablations, the expert feedback loop (interrupt/resume), synthesis,
the S/E/O ladder and the CLI. Fake LLM (ScriptedChatModel) and HashingEmbedder only."""

from __future__ import annotations

import asyncio
import json
import math
import re
from pathlib import Path
from typing import Any, NotRequired, cast

import pytest
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command
from typing_extensions import TypedDict

from gaprag import as_tool, build_graph
from gaprag.cli import main as cli_main
from gaprag.deps import Deps
from gaprag.errors import InputError
from gaprag.graphs.rag_ef import nodes as rag_ef_nodes
from gaprag.graphs.rag_ef.context import Context
from gaprag.graphs.rag_ef.feedback import MAX_ANSWER_CHARS, MAX_CHUNK_CHARS, parse_feedback
from gaprag.graphs.rag_ef.state import Feedback, State
from gaprag.graphs.rag_ef.synth import chunk_text, parse_qa, synthesize
from gaprag.llm.client import LLM
from gaprag.metrics import normalize_answer
from gaprag.operator import OperatorPolicy, with_policy
from gaprag.stores import HashingEmbedder, Store
from gaprag.stores.documents import Document
from gaprag.stores.pairs import PairStore
from gaprag.testing import ScriptedChatModel
from tests.methods.rag_ef import (
    ANSWER_MARK,
    JUDGE_MARK,
    TOPICS,
    answer_prompts,
    copy_mode,
    fake,
    fill,
)


class ParentState(TypedDict):
    question: str
    answer: NotRequired[str]


# -- prompt assembly --------------------------------------------------------
def test_prompt_layout_and_exactly_one_llm_call(pair_store: PairStore) -> None:
    fill(pair_store)
    llm = fake()
    out = build_graph("rag_ef", pair_store=pair_store, llm=llm).invoke(
        {"question": "Who wrote Hamlet?"}
    )
    assert out["answer"] == "William Shakespeare" and out["stop_reason"] == "answered"
    assert len(llm.calls) == 1 and llm.calls[0]["messages"][0][0] == "human"  # no system message
    assert out["usage"]["llm_calls"] == 1 and out["usage"]["retrieval_calls"] == 1
    prompt = llm.prompts()[0]
    lines = prompt.splitlines()
    qa = [i for i, ln in enumerate(lines) if re.match(r"Question: .* Answer: ", ln)]
    ctx = [i for i, ln in enumerate(lines) if ln.startswith("Context")]
    instr = next(i for i, ln in enumerate(lines) if ANSWER_MARK in ln)
    assert len(qa) == 5 and qa == list(range(5))  # K lines first, in rank order
    assert [lines[i].split(":")[0] for i in ctx] == [f"Context{n}" for n in range(1, 6)]
    assert max(qa) < min(ctx) and max(ctx) < instr < len(lines) - 1
    assert lines[-1] == "Question: Who wrote Hamlet?"
    assert lines[0].startswith("Question: Who wrote the tragedy Hamlet? Answer: William")
    assert [p["rank"] for p in out["retrieved_pairs"]] == [1, 2, 3, 4, 5]
    kinds = [ev["id"][:2] for ev in out["evidence"]]
    assert kinds == ["p_"] * 5 + ["c_"] * 5 and out["evidence"][0]["source"] == "feedback"


def test_duplicate_chunks_are_shown_once_in_first_appearance_order(pair_store: PairStore) -> None:
    shared = "Hamlet is a tragedy written by William Shakespeare around 1600."
    pair_store.add("Who wrote Hamlet?", "Shakespeare", shared)
    pair_store.add("When was Hamlet written?", "around 1600", shared)
    pair_store.add("What kind of play is Hamlet?", "a tragedy", "  " + shared.replace(" ", "\n", 2))
    pair_store.add(
        "Who is the prince in Hamlet?", "Hamlet", "Prince Hamlet of Denmark is the hero."
    )
    pair_store.add("Where is Hamlet set?", "Denmark", "Hamlet is set in Elsinore, Denmark.")
    llm = fake()
    out = build_graph("rag_ef", pair_store=pair_store, llm=llm).invoke(
        {"question": "Hamlet tragedy written"}
    )
    prompt = llm.prompts()[0]
    assert len(re.findall(r"^Question: .* Answer: ", prompt, re.M)) == 5
    numbers = re.findall(r"^Context(\d+): ", prompt, re.M)
    assert numbers == ["1", "2", "3"] and len(out["contexts"]) == 3
    first_seen = []
    for p in out["retrieved_pairs"]:
        text = " ".join(p["chunk"].split())
        if text not in first_seen:
            first_seen.append(text)
    assert [c["text"] for c in out["contexts"]] == first_seen


def test_ablation_render_modes(pair_store: PairStore) -> None:
    fill(pair_store)
    for i in range(6):
        pair_store.add(f"filler question {i}?", f"filler answer {i}", f"filler chunk {i}")
    q = {"question": "Who wrote the tragedy Hamlet?"}
    llm = fake()
    build_graph("rag_ef", pair_store=pair_store, llm=llm, qa_render_mode="none").invoke(q)
    assert "Answer:" not in llm.prompts()[0] and "Context1:" in llm.prompts()[0]
    llm = fake()
    build_graph("rag_ef", pair_store=pair_store, llm=llm, qa_render_mode="q_only").invoke(q)
    prompt = llm.prompts()[0]
    assert len(re.findall(r"^Question: ", prompt, re.M)) == 6 and "Answer:" not in prompt
    runs = []
    for _ in range(2):
        llm = fake()
        out = build_graph(
            "rag_ef", pair_store=pair_store, llm=llm, qa_render_mode="wrong_answer"
        ).invoke(q)
        runs.append(re.findall(r"^Question: .* Answer: (.*)$", llm.prompts()[0], re.M))
    originals = [p["answer"] for p in out["retrieved_pairs"]]
    assert len(runs[0]) == 5 and runs[0] == runs[1]  # reproducible for a fixed seed
    assert all(
        normalize_answer(w) != normalize_answer(o) for w, o in zip(runs[0], originals, strict=True)
    )
    llm = fake()
    build_graph(
        "rag_ef", pair_store=pair_store, llm=llm, qa_render_mode="wrong_answer", wrong_answer_seed=7
    ).invoke(q)
    assert re.findall(r"^Question: .* Answer: (.*)$", llm.prompts()[0], re.M) != runs[0]


def test_empty_store_still_answers_with_an_empty_prompt(pair_store: PairStore) -> None:
    llm = fake()
    out = build_graph("rag_ef", pair_store=pair_store, llm=llm, empty_store_fallback=False).invoke(
        {"question": "Who?"}
    )
    prompt = llm.prompts()[0]
    assert prompt.splitlines()[-1] == "Question: Who?"
    assert "Answer:" not in prompt and "Context1" not in prompt
    assert out["answer"] == "I do not know" and out["evidence"] == []


def test_empty_store_falls_back_to_the_document_retriever(
    pair_store: PairStore, tmp_path: Path, tiny_docs: list[Document]
) -> None:
    docs = Store.build(tmp_path / "docs", tiny_docs, embedder=HashingEmbedder(), progress=False)
    llm = fake()
    out = build_graph("rag_ef", pair_store=pair_store, llm=llm, retriever=docs, top_k=2).invoke(
        {"question": "Who wrote Hamlet?"}
    )
    assert "Context1: Hamlet: Hamlet is a tragedy" in llm.prompts()[0]
    assert out["evidence"][0]["id"] == "hamlet" and len(out["evidence"]) == 2
    assert any(t.get("event") == "empty_store_fallback" for t in out["trace"])


def test_standard_mode_ranks_unique_chunks_without_qa_lines(pair_store: PairStore) -> None:
    fill(pair_store)
    pair_store.add("Another Hamlet question?", "x", TOPICS[0][2])
    llm = fake()
    out = build_graph("rag_ef", pair_store=pair_store, llm=llm, retrieval_mode="standard").invoke(
        {"question": "Hamlet tragedy Shakespeare"}
    )
    prompt = llm.prompts()[0]
    assert "Answer:" not in prompt and "question-answer pairs" not in prompt
    texts = [c["text"] for c in out["contexts"]]
    assert texts[0] == TOPICS[0][2] and len(texts) == len(set(texts)) == 5


def test_gate_drops_low_pairs_and_their_chunks(pair_store: PairStore) -> None:
    fill(pair_store)
    llm = fake()
    graph = build_graph("rag_ef", pair_store=pair_store, llm=llm, min_pair_score=0.3)
    out = graph.invoke({"question": "Who wrote the tragedy Hamlet?"})
    kept = {p["id"] for p in out["retrieved_pairs"]}
    assert kept and len(out["gated_out"]) == 5 - len(kept)
    assert not kept & set(out["gated_out"])
    for pid in out["gated_out"]:
        gone = pair_store.get(pid)
        assert gone is not None and f"Question: {gone['question']} Answer" not in llm.prompts()[0]
    assert all(p["score"] >= 0.3 for p in out["retrieved_pairs"])
    assert len(re.findall(r"^Context\d+: ", llm.prompts()[0], re.M)) == len(kept)
    nodes = [next(iter(u)) for u in graph.stream({"question": "Who wrote the tragedy Hamlet?"})]
    assert nodes[:2] == ["retrieve", "rerank_filter"]
    plain = build_graph("rag_ef", pair_store=pair_store, llm=fake())
    nodes = [next(iter(u)) for u in plain.stream({"question": "Who wrote the tragedy Hamlet?"})]
    assert nodes == ["retrieve", "assemble_evidence", "generate_answer", "short_answer"]


# -- feedback behaviour -----------------------------------------------------
ALADIN_Q = "Who was known by the stage name Aladin and worked as a management consultant?"
ALADIN_A = "Eanasul Fateh"
ALADIN_C = "Eanasul Fateh, known by his stage name Aladin, is a magician and management consultant."


def test_insert_takes_effect_at_once_and_touches_nothing_else(pair_store: PairStore) -> None:
    fill(pair_store)
    graph = build_graph("rag_ef", pair_store=pair_store, llm=fake())
    before = graph.invoke({"question": ALADIN_Q})
    assert before["answer"] != ALADIN_A
    snapshot = {p["id"]: p for p in pair_store.list()}
    chunks = pair_store.chunk_count()
    pid = pair_store.add(ALADIN_Q, ALADIN_A, ALADIN_C)
    after = graph.invoke({"question": ALADIN_Q})
    assert after["retrieved_pairs"][0]["id"] == pid and after["answer"] == ALADIN_A
    rest = {p["id"]: p for p in pair_store.list() if p["id"] != pid}
    assert rest == snapshot and pair_store.chunk_count() == chunks + 1


def test_paraphrase_transfers_feedback(pair_store: PairStore) -> None:
    fill(pair_store)
    pair_store.add(ALADIN_Q, ALADIN_A, ALADIN_C, source="expert")
    out = build_graph("rag_ef", pair_store=pair_store, llm=fake()).invoke(
        {"question": "Which consultant performed under the stage name Aladin?"}
    )
    assert out["retrieved_pairs"][0]["question"] == ALADIN_Q
    assert out["answer"] == ALADIN_A


def test_llm_judge_interrupt_resume_upserts_and_reanswers_once(pair_store: PairStore) -> None:
    fill(pair_store)
    llm = fake(judge="incorrect")
    graph = build_graph(
        "rag_ef", pair_store=pair_store, llm=llm, checkpointer=InMemorySaver(), judge="llm"
    )
    cfg: Any = {"configurable": {"thread_id": "t1"}}
    paused = graph.invoke({"question": ALADIN_Q}, cfg)
    assert paused["stop_reason"] == "awaiting_feedback" and paused["verdict"] == "incorrect"
    request = paused["__interrupt__"][0].value
    assert request["question"] == ALADIN_Q and request["answer"] == paused["answer"]
    assert request["contexts"] and len(request["qa_pairs"]) == 5
    assert len(pair_store) == 6
    done = graph.invoke(Command(resume={"answer": ALADIN_A, "chunk": ALADIN_C}), cfg)
    assert (
        len(pair_store) == 7
        and pair_store.list(source="expert")[0]["id"] == done["inserted_pair_id"]
    )
    assert done["answer"] == ALADIN_A and done["first_answer"] == paused["answer"]
    assert done["stop_reason"] == "reanswered" and done["iterations"] == 2
    assert done["queries"] == [ALADIN_Q, ALADIN_Q]
    assert "__interrupt__" not in done
    assert sum(JUDGE_MARK in p for p in llm.prompts()) == 1  # judged once; loop bounded
    assert len(answer_prompts(llm)) == 2


def test_gold_judge_correct_answer_ends_with_store_unchanged(pair_store: PairStore) -> None:
    fill(pair_store)
    llm = fake()
    graph = build_graph(
        "rag_ef", pair_store=pair_store, llm=llm, checkpointer=InMemorySaver(), judge="gold"
    )
    cfg: Any = {"configurable": {"thread_id": "g1"}}
    out = graph.invoke(
        {
            "question": "Who wrote the tragedy Hamlet?",
            "gold_answers": ["Shakespeare", "William Shakespeare"],
        },
        cfg,
    )
    assert out["verdict"] == "correct" and "__interrupt__" not in out and len(pair_store) == 6
    assert not any(JUDGE_MARK in p for p in llm.prompts())  # gold judging uses no LLM
    cfg = {"configurable": {"thread_id": "g2"}}
    out = graph.invoke({"question": ALADIN_Q, "gold_answers": [ALADIN_A]}, cfg)
    assert out["verdict"] == "incorrect" and "__interrupt__" in out


def test_review_flag_pauses_and_skip_leaves_store_alone(pair_store: PairStore) -> None:
    fill(pair_store)
    llm = fake()
    graph = build_graph("rag_ef", pair_store=pair_store, llm=llm, checkpointer=InMemorySaver())
    cfg: Any = {"configurable": {"thread_id": "r1"}}
    assert "__interrupt__" not in graph.invoke({"question": "Who wrote Hamlet?"}, cfg)
    cfg = {"configurable": {"thread_id": "r2"}}
    paused = graph.invoke({"question": "Who wrote Hamlet?"}, cfg, context={"review": True})
    assert paused["__interrupt__"] and paused["verdict"] == "unknown"
    done = graph.invoke(Command(resume={"skip": True}), cfg, context={"review": True})
    assert done["stop_reason"] == "feedback_skipped" and len(pair_store) == 6
    cfg = {"configurable": {"thread_id": "r3"}}
    graph.invoke({"question": "Who wrote Hamlet?"}, cfg, context={"review": True})
    bad = graph.invoke(Command(resume={"answer": "x"}), cfg, context={"review": True})
    assert bad["stop_reason"] == "feedback_invalid" and len(pair_store) == 6
    assert any("chunk" in str(t.get("error", "")) for t in bad["trace"])


GOOD = {"answer": "Shakespeare", "chunk": "Hamlet is a tragedy by Shakespeare."}
BAD_RESUMES = [
    ({"answer": 42, "chunk": "c"}, "answer must be text"),
    ({"answer": "A", "chunk": ["c"]}, "chunk must be text"),
    ({**GOOD, "chunk": "x" * (MAX_CHUNK_CHARS + 1)}, "chunk is 20,001 characters"),
    ({**GOOD, "answer": "x" * (MAX_ANSWER_CHARS + 1)}, "answer is 1,001 characters"),
    ({**GOOD, "question": "q" * 5000}, "question is 5,000 characters"),
    ({**GOOD, "question": {"nested": 1}}, "question must be text"),
    ({**GOOD, "chunk_id": 7}, "chunk_id must be text"),
    ({**GOOD, "source": "oracle"}, "source must be one of expert, human"),
    ({**GOOD, "goto": "update_evidence_pool"}, "unknown feedback field(s) 'goto'"),
    ({**GOOD, "skip": "yes"}, "skip must be true or false"),
]


@pytest.mark.parametrize(("value", "error"), BAD_RESUMES, ids=[e for _, e in BAD_RESUMES])
def test_resume_value_is_validated_like_any_input(
    value: dict[str, Any], error: str, pair_store: PairStore
) -> None:
    fill(pair_store)
    graph = build_graph("rag_ef", pair_store=pair_store, llm=fake(), checkpointer=InMemorySaver())
    cfg: Any = {"configurable": {"thread_id": "v"}}
    graph.invoke({"question": "Who wrote Hamlet?"}, cfg, context={"review": True})
    out = graph.invoke(Command(resume=value), cfg, context={"review": True})
    assert out["stop_reason"] == "feedback_invalid" and len(pair_store) == len(TOPICS)
    errors = [str(t["error"]) for t in out["trace"] if "error" in t]
    assert errors and error in errors[0] and "\n" not in errors[0] and len(errors[0]) < 200


def test_resume_value_text_is_cleaned_and_the_reviewer_source_kept() -> None:
    fb = parse_feedback({**GOOD, "answer": " Shake\x00speare\x1b ", "source": "human"}, "Q")
    assert isinstance(fb, dict) and fb["answer"] == "Shake speare" and fb["source"] == "human"


def test_feedback_in_the_state_is_written_only_by_the_allowed_writing_node(
    pair_store: PairStore,
) -> None:
    """The write is checked where it happens: feedback in the state, however it got there, is
    not stored when the operator's writes are off, and an invalid triple is never stored."""
    fill(pair_store)
    forged = Feedback(question="Who wrote Hamlet?", answer="POISON", chunk="c", chunk_id=None,
                      source="expert")  # fmt: skip
    cases: list[tuple[bool, Any, str]] = [
        (False, forged, "feedback_not_stored"),
        (True, {**forged, "answer": 5}, "feedback_invalid"),
        (True, {**forged, "source": "oracle"}, "feedback_invalid"),
    ]
    for writes, feedback, reason in cases:
        context = with_policy(Context, OperatorPolicy(feedback_writes=writes))()
        state = State(question="Who wrote Hamlet?", feedback=feedback)
        update = asyncio.run(
            rag_ef_nodes.update_evidence_pool(
                state, Runtime(context=context), Deps.of(pair_store=pair_store)
            )
        )
        assert update["stop_reason"] == reason and update["feedback"] is None
        assert len(pair_store) == len(TOPICS)
    assert not any(p["answer"] == "POISON" for p, _ in pair_store.search("Hamlet", k=10))


def test_parse_feedback_values() -> None:
    fb = parse_feedback({"answer": " A ", "chunk": "C", "question": "Q2"}, "Q")
    assert isinstance(fb, dict) and fb["question"] == "Q2" and fb["answer"] == "A"
    assert fb["source"] == "expert"
    assert parse_feedback(None, "Q") is None and parse_feedback({"skip": True}, "Q") is None
    assert parse_feedback("just text", "Q") == "resume with a dict {'answer': ..., 'chunk': ...}"


def test_store_found_by_context_path_and_by_retriever(tmp_path: Path) -> None:
    path = tmp_path / "fb.sqlite"
    st = PairStore.open(path, embedder=HashingEmbedder())
    st.add(ALADIN_Q, ALADIN_A, ALADIN_C)
    out = build_graph("rag_ef", llm=fake(), feedback_store=str(path)).invoke({"question": ALADIN_Q})
    assert out["answer"] == ALADIN_A
    out = build_graph("rag_ef", llm=fake(), retriever=st).invoke({"question": ALADIN_Q})
    assert out["answer"] == ALADIN_A


def test_sources_context_restricts_the_pool(pair_store: PairStore) -> None:
    pair_store.add(ALADIN_Q, ALADIN_A, ALADIN_C, source="oracle")
    fill(pair_store)
    graph = build_graph("rag_ef", pair_store=pair_store, llm=fake())
    assert graph.invoke({"question": ALADIN_Q})["answer"] == ALADIN_A
    out = graph.invoke({"question": ALADIN_Q}, context={"sources": "synthetic,expert"})
    assert out["answer"] != ALADIN_A
    assert {p["source"] for p in out["retrieved_pairs"]} == {"synthetic"}
    # "+" separates too, so a --variant (whose values cannot hold a comma) can name two sources
    plus = graph.invoke({"question": ALADIN_Q}, context={"sources": "synthetic+oracle"})
    assert plus["answer"] == ALADIN_A
    assert Context(sources="synthetic + expert").source_filter() == {"synthetic", "expert"}


# -- synthetic set S -----------------------------------------------------------
def test_parse_qa() -> None:
    assert parse_qa("1. Q: What is X? A: Y\n2) Q: Who? A: Z.\nNoise line") == [
        ("What is X?", "Y"),
        ("Who?", "Z."),
    ]
    assert parse_qa("Q: a? A: b Q: c? A: d") == [("a?", "b"), ("c?", "d")]
    assert parse_qa('**Q:** Where?\n**A:** "Here"\nQ: empty? A: \nQ: Where? A: Here') == [
        ("Where?", "Here")
    ]
    assert parse_qa("- Q: long? A: " + "x" * 301) == []


def test_synthesize_is_resumable(pair_store: PairStore) -> None:
    docs = [
        Document(id="d1", title="Hamlet", text="Hamlet is a tragedy by Shakespeare."),
        Document(id="d2", title="", text="Nothing useful here."),
        Document(id="d3", title="Nile", text="The Nile flows through Cairo."),
    ]
    replies = {
        "Hamlet": "Q: Who wrote Hamlet? A: Shakespeare\nQ: What is Hamlet? A: a tragedy",
        "Nothing": "I cannot write questions.",
        "Nile": "1. Q: Which river flows through Cairo? A: The Nile",
    }

    def reply(messages: list[BaseMessage]) -> str:
        text = str(messages[-1].content)
        return next(v for k, v in replies.items() if k in text.split("Passage:")[1])

    llm = ScriptedChatModel(rules=[("Passage:", reply)])
    first = synthesize(pair_store, docs, LLM(llm), limit=2, progress=False)
    assert (first.processed, first.empty, first.pairs) == (2, 1, 2)
    second = synthesize(pair_store, docs, LLM(llm), progress=False)
    assert (second.skipped, second.processed, second.pairs) == (2, 1, 1)
    assert len(llm.calls) == 3  # no chunk generated twice, empty ones included
    pairs = pair_store.list(source="synthetic")
    assert {p["chunk_id"] for p in pairs} == {"d1", "d3"}
    assert pairs[0]["chunk"] == chunk_text(docs[0]) == "Hamlet: Hamlet is a tragedy by Shakespeare."


class SlowLLM:
    """An endpoint serving several requests at once: each reply takes ``delay`` seconds; it
    records how many calls were in flight together, and fails on chunks containing ``fail``."""

    def __init__(self, delay: float = 0.05, fail: str = "") -> None:
        self.delay, self.fail = delay, fail
        self.flying = self.most = self.calls = 0

    async def agenerate(self, messages: Any, *, max_tokens: int = 0, stop: Any = None) -> str:
        last = messages[-1]  # (role, text)
        text = str(last[1] if isinstance(last, tuple) else getattr(last, "content", last))
        chunk = text.split("Passage:")[1].strip()
        self.calls += 1
        self.flying += 1
        self.most = max(self.most, self.flying)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.flying -= 1
        if self.fail and self.fail in chunk:
            raise RuntimeError("endpoint failed")
        return f"Q: What is chunk {chunk.split()[-1]}? A: {chunk.split()[-1]}"


def _numbered(n: int) -> list[Document]:
    return [Document(id=f"d{i}", title="", text=f"Numbered chunk n{i}") for i in range(n)]


def test_synthesize_with_calls_in_flight_keeps_corpus_order(pair_store: PairStore) -> None:
    llm = SlowLLM()
    report = synthesize(pair_store, _numbered(7), cast(LLM, llm), progress=False, concurrency=3)
    assert (report.processed, report.pairs, llm.calls) == (7, 7, 7)
    assert llm.most == 3  # three at once, never more
    assert [p["chunk_id"] for p in pair_store.list(source="synthetic")] == [
        f"d{i}" for i in range(7)
    ]
    with pytest.raises(InputError, match="concurrency must be >= 1"):
        synthesize(pair_store, _numbered(1), cast(LLM, llm), progress=False, concurrency=0)
    assert cli_main(["feedback", "synthesize", "hotpotqa", "--concurrency", "0", "--quiet"]) == 2


def test_a_failed_call_keeps_the_chunks_before_it(pair_store: PairStore) -> None:
    docs = _numbered(6)
    with pytest.raises(RuntimeError, match="endpoint failed"):
        synthesize(pair_store, docs, cast(LLM, SlowLLM(fail="n4")), progress=False, concurrency=2)
    assert [p["chunk_id"] for p in pair_store.list(source="synthetic")] == ["d0", "d1", "d2", "d3"]
    again = SlowLLM()
    report = synthesize(pair_store, docs, cast(LLM, again), progress=False, concurrency=2)
    assert (report.skipped, report.processed, again.calls) == (4, 2, 2)


def test_synthesize_in_a_running_loop_asks_for_the_coroutine(pair_store: PairStore) -> None:
    from gaprag.graphs.rag_ef.synth import asynthesize

    async def inside() -> int:
        with pytest.raises(InputError, match="asynthesize"):
            synthesize(
                pair_store, _numbered(2), cast(LLM, SlowLLM()), progress=False, concurrency=2
            )
        report = await asynthesize(
            pair_store, _numbered(2), cast(LLM, SlowLLM()), progress=False, concurrency=2
        )
        return report.processed

    assert asyncio.run(inside()) == 2


PARAPHRASES = {
    ALADIN_Q: "Which management consultant performed under the stage name Aladin?",
    "Which river flows through the city of Cairo?": "Cairo lies on which river flowing through it?",
    "Who painted the famous Mona Lisa portrait?": "The famous Mona Lisa portrait was painted by whom?",
}


def test_one_expert_triple_fixes_a_paraphrase_and_leaves_unrelated_answers(
    pair_store: PairStore,
) -> None:
    fill(pair_store)
    pair_store.add("What is described in the Aladin passage?", "a description", ALADIN_C)
    graph = build_graph("rag_ef", pair_store=pair_store, llm=fake())
    unrelated = ["Which river flows through Cairo?", "What is the capital city of France?",
                 "Who painted the Mona Lisa portrait?"]  # fmt: skip
    before = {q: graph.invoke({"question": q})["answer"] for q in unrelated}
    failed = graph.invoke({"question": ALADIN_Q})["answer"]
    assert failed != ALADIN_A
    pair_store.add(ALADIN_Q, ALADIN_A, ALADIN_C, source="expert")
    fixed = graph.invoke({"question": PARAPHRASES[ALADIN_Q]})["answer"]
    assert fixed == ALADIN_A
    assert {q: graph.invoke({"question": q})["answer"] for q in unrelated} == before
    assert before == {
        unrelated[0]: "Nile",
        unrelated[1]: "Paris",
        unrelated[2]: "Leonardo da Vinci",
    }


# -- CLI ----------------------------------------------------------------------------------------
def test_cli_add_list_import_remove(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cli.sqlite"
    PairStore.open(path, embedder=HashingEmbedder()).close()  # fix the embedder for the file
    assert (
        cli_main(
            [
                "feedback",
                "add",
                "-q",
                "Who?",
                "-a",
                "Me",
                "--chunk",
                "I did it.",
                "--store",
                str(path),
            ]
        )
        == 0
    )
    pid = capsys.readouterr().out.strip()
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text(
        json.dumps({"question": "Q2?", "answer": "A2", "chunk": "C2", "source": "oracle"}) + "\n"
    )
    assert cli_main(["feedback", "import", str(jsonl), "--store", str(path), "--quiet"]) == 0
    assert cli_main(["feedback", "list", "--json", "--store", str(path)]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    assert (
        next((r["id"], r["source"]) for r in rows) == (pid, "expert")
        and rows[1]["source"] == "oracle"
    )
    assert cli_main(["feedback", "remove", pid, "--store", str(path)]) == 0
    assert len(PairStore.open(path)) == 1
    capsys.readouterr()
    assert cli_main(["feedback", "remove", pid, "--store", str(path)]) == 2
    assert capsys.readouterr().err.startswith(f"gaprag: error: no pair with id {pid}")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": ""}\n')
    assert cli_main(["feedback", "import", str(bad), "--store", str(path)]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:1: field 'answer' is missing or empty" in err and "Traceback" not in err
    assert cli_main(["feedback", "add", "-q", "Q", "-a", "A", "--store", str(path)]) == 2
    assert "chunk is missing" in capsys.readouterr().err


# -- the module-level node layout: threads, async, nodes alone, records -------------------
def _drop_wall(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_wall(v) for k, v in value.items() if k != "wall_s"}
    if isinstance(value, list):
        return [_drop_wall(v) for v in value]
    return value


def test_two_questions_on_one_thread_each_start_clean(pair_store: PairStore) -> None:
    fill(pair_store)
    graph = build_graph("rag_ef", pair_store=pair_store, llm=fake(), checkpointer=InMemorySaver())
    cfg: Any = {"configurable": {"thread_id": "same"}}
    first = graph.invoke({"question": "Who wrote the tragedy Hamlet?"}, cfg)
    second = graph.invoke({"question": "Which river flows through Cairo?"}, cfg)
    assert (first["answer"], second["answer"]) == ("William Shakespeare", "Nile")
    assert second["queries"] == ["Which river flows through Cairo?"]
    assert second["iterations"] == 1 and second["stop_reason"] == "answered"
    assert second["usage"]["llm_calls"] == 1 and second["usage"]["retrieval_calls"] == 1
    assert second["evidence"][0]["title"] == "Which river flows through Cairo?"
    assert len(second["evidence"]) == 10 and second["retrieved_pairs"][0]["answer"] == "Nile"


def test_review_pauses_again_on_the_second_question_of_a_thread(pair_store: PairStore) -> None:
    fill(pair_store)
    llm = fake()
    graph = build_graph(
        "rag_ef", pair_store=pair_store, llm=llm, checkpointer=InMemorySaver(), review=True
    )
    cfg: Any = {"configurable": {"thread_id": "expert"}}
    paused = graph.invoke({"question": ALADIN_Q}, cfg)
    assert paused["__interrupt__"] and paused["stop_reason"] == "awaiting_feedback"
    done = graph.invoke(Command(resume={"answer": ALADIN_A, "chunk": ALADIN_C}), cfg)
    assert done["stop_reason"] == "reanswered" and done["inserted_pair_id"]
    assert done["iterations"] == 2 and done["queries"] == [ALADIN_Q, ALADIN_Q]
    again = graph.invoke({"question": "Which river flows through Cairo?"}, cfg)
    assert again["__interrupt__"][0].value["question"] == "Which river flows through Cairo?"
    assert again["answer"] == "Nile" != done["answer"]
    assert again["stop_reason"] == "awaiting_feedback" and again["iterations"] == 1
    assert again["queries"] == ["Which river flows through Cairo?"]
    assert again["usage"]["llm_calls"] == 1 and again["usage"]["retrieval_calls"] == 1
    assert again.get("inserted_pair_id") is None and again["first_answer"] == "Nile"
    assert [d["decision"] for d in again["decisions"]] == ["continue"]
    assert all(ev["round"] == 1 for ev in again["evidence"])
    skipped = graph.invoke(Command(resume={"skip": True}), cfg)
    assert skipped["stop_reason"] == "feedback_skipped" and skipped["answer"] == "Nile"


@pytest.mark.parametrize(
    ("build", "run"),
    [({"review": True}, {}), ({}, {"review": True}), ({"judge": "gold"}, {})],
)
def test_a_pause_without_a_checkpointer_is_refused_at_the_first_run(
    pair_store: PairStore, build: dict[str, Any], run: dict[str, Any]
) -> None:
    fill(pair_store)
    llm = fake()
    graph = build_graph("rag_ef", pair_store=pair_store, llm=llm, **build)
    with pytest.raises(InputError, match="needs a checkpointer") as err:
        graph.invoke({"question": "Who wrote Hamlet?"}, context=run)
    assert "checkpointer=InMemorySaver()" in (err.value.hint or "")
    assert llm.calls == [] and len(pair_store) == 6
    # the same graph without a pause answers
    assert build_graph("rag_ef", pair_store=pair_store, llm=llm).invoke({"question": "Who?"})
    tool = as_tool("rag_ef", pair_store=pair_store, llm=fake(), review=True)
    with pytest.raises(InputError, match="review=True pauses"):
        tool.invoke({"question": "Who wrote Hamlet?"})


def test_ainvoke_gives_the_same_output_as_invoke(pair_store: PairStore) -> None:
    fill(pair_store)
    graph = build_graph("rag_ef", pair_store=pair_store, llm=fake(), min_pair_score=0.2)
    sync = graph.invoke({"question": "Who painted the Mona Lisa portrait?"})
    asyn = asyncio.run(graph.ainvoke({"question": "Who painted the Mona Lisa portrait?"}))
    assert sync["answer"] == "Leonardo da Vinci"
    assert _drop_wall(dict(asyn)) == _drop_wall(dict(sync))


def test_nodes_run_alone(pair_store: PairStore) -> None:
    fill(pair_store)
    llm = fake()
    deps = Deps.of(llm=llm, pair_store=pair_store)
    runtime = Runtime(context=Context())
    state = State(question="Who wrote the tragedy Hamlet?")
    update = asyncio.run(rag_ef_nodes.retrieve(state, runtime, deps))
    assert update["iterations"] == 1 and update["queries"] == [state.question]
    assert update["retrieved_pairs"][0]["answer"] == "William Shakespeare"
    state = State(question=state.question, iterations=1, retrieved_pairs=update["retrieved_pairs"])
    update = asyncio.run(rag_ef_nodes.assemble_evidence(state, runtime, deps))
    assert len(update["qa_block"]) == 5 and len(update["contexts"]) == 5
    state = State(question=state.question, iterations=1, retrieved_pairs=state.retrieved_pairs,
                  qa_block=update["qa_block"], contexts=update["contexts"])  # fmt: skip
    update = asyncio.run(rag_ef_nodes.generate_answer(state, runtime, deps))
    assert update == {
        "answer": "William Shakespeare",
        "first_answer": "William Shakespeare",
        "stop_reason": "answered",
    }
    assert len(llm.calls) == 1 and llm.prompts()[0].splitlines()[0].startswith("Question: Who")


def test_the_feedback_decision_is_recorded(pair_store: PairStore) -> None:
    fill(pair_store)
    chat = ScriptedChatModel(
        rules=[(JUDGE_MARK, "incorrect"), (ANSWER_MARK, copy_mode)],
        logprobs={"incorrect": -0.2, "correct": -1.8},
    )
    graph = build_graph("rag_ef", pair_store=pair_store, llm=LLM(chat, supports_logprobs=True),
                        checkpointer=InMemorySaver(), judge="llm")  # fmt: skip
    out = graph.invoke({"question": ALADIN_Q}, {"configurable": {"thread_id": "d1"}})
    p = math.exp(-0.2) / (math.exp(-0.2) + math.exp(-1.8))
    assert out["decisions"] == [
        {"node": "feedback_classifier", "round": 1, "decision": "continue",
         "p": pytest.approx(p, abs=1e-5), "path": "logprobs", "threshold": None}
    ]  # fmt: skip
    graph = build_graph("rag_ef", pair_store=pair_store, llm=fake(), checkpointer=InMemorySaver())
    cfg: Any = {"configurable": {"thread_id": "d2"}}
    out = graph.invoke(
        {"question": "Who wrote the tragedy Hamlet?", "gold_answers": ["William Shakespeare"]},
        cfg,
        context={"judge": "gold"},
    )
    assert [(d["decision"], d["path"], d["p"]) for d in out["decisions"]] == [
        ("stop", "rule", None)
    ]
    out = graph.invoke({"question": "Who wrote Hamlet?"}, cfg, context={"review": True})
    assert [(d["decision"], d["path"], d["p"]) for d in out["decisions"]] == [
        ("continue", "rule", None)
    ]


def test_shown_ids_are_what_the_prompt_shows(pair_store: PairStore) -> None:
    ids = fill(pair_store)
    chunk_of = {p["id"]: p["chunk_id"] for p in pair_store.list()}
    llm = fake()
    out = build_graph("rag_ef", pair_store=pair_store, llm=llm, min_pair_score=0.3).invoke(
        {"question": "Who wrote the tragedy Hamlet?"}
    )
    kept = [p["id"] for p in out["retrieved_pairs"]]
    assert kept and out["gated_out"]
    retrieved = [*kept, *out["gated_out"]]
    assert set(out["retrieved_ids"]) == set(retrieved) | {chunk_of[i] for i in retrieved}
    assert set(out["shown_ids"]) == set(kept) | {chunk_of[i] for i in kept}
    for pid in out["gated_out"]:
        assert pid not in out["shown_ids"] and chunk_of[pid] not in out["shown_ids"]
    assert set(ids) >= set(retrieved)
    out = build_graph(
        "rag_ef", pair_store=pair_store, llm=fake(), qa_render_mode="none", max_contexts=1
    ).invoke({"question": "Who wrote the tragedy Hamlet?"})
    first = out["retrieved_pairs"][0]
    assert out["shown_ids"] == [first["chunk_id"]]  # no Q&A lines, one context
    assert len(out["retrieved_ids"]) == 10


def test_a_reviewed_subgraph_uses_its_parents_checkpointer(pair_store: PairStore) -> None:
    fill(pair_store)
    child = build_graph("rag_ef", pair_store=pair_store, llm=fake(), review=True)
    parent = StateGraph(ParentState)
    parent.add_node("rag_ef", child)
    parent.add_edge(START, "rag_ef")
    graph = parent.compile(checkpointer=InMemorySaver())
    cfg: Any = {"configurable": {"thread_id": "parent"}}
    paused = graph.invoke({"question": "Who wrote Hamlet?"}, cfg)
    assert paused["__interrupt__"][0].value["answer"] == "William Shakespeare"
    done = graph.invoke(Command(resume={"skip": True}), cfg)
    assert done["answer"] == "William Shakespeare" and "__interrupt__" not in done
