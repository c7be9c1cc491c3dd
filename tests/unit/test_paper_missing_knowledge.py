"""Missing-Knowledge RAG in its paper configuration, judged at the model boundary: the public
``build_graph("missing_knowledge", profile="paper")`` with a scripted model over a small store.

Each test is named after the paper step it proves: retrieve TopK/2 chunks for the question
(KB A); a draft answer over them; ONE judge call, under the paper's three criteria and four
steps, writes its thought, its verdict (knowledge missing or not), the missing knowledge and a
query for each; the verdict routes: missing -> each query retrieves its top chunks from KB B,
chunks already retrieved are dropped by md5 (not replaced), TopK - TopK/2 in all -> the final
answer over the context and the missing-knowledge context (the thought, then the new chunks);
not missing -> the final answer with the judge's thought and no new chunks."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gaprag import build_graph
from gaprag.stores.store import Store
from gaprag.testing import ScriptedChatModel

Q = "Who designed the tower in the capital of France?"
LONG = " ".join(f"word{i}" for i in range(400))  # longer than the shipped 150-word cut


@pytest.fixture
def store_docs() -> list[dict[str, str]]:
    docs = [
        ("fr", "France", "Paris is the capital of France."),
        ("eiffel", "Eiffel Tower", "The tower in Paris was built by Eiffel."),
        ("de", "Germany", "Berlin is the capital of Germany."),
        ("eng", "Gustave Eiffel", "Gustave Eiffel was a French engineer."),
        ("rome", "Rome", "Rome is the capital of Italy."),
        ("lon", "London", "London is the capital of England."),
    ]
    return [{"id": i, "title": t, "text": f"{text} {LONG}"} for i, t, text in docs]


def judge(missing: bool, queries: list[str]) -> str:
    return json.dumps(
        {
            "thought": "The context does not say who designed the tower.",
            "judge": missing,
            "missing_knowledge": ["designer of the Eiffel Tower"] if missing else [],
            "query": queries,
        }
    )


FINAL = "Gustave Eiffel, the French engineer whose company built the tower in 1889"


def record_searches(store: Store) -> list[tuple[str, int, Any, set[str]]]:
    """Every search the store serves: (query, k, mode, excluded ids)."""
    searches: list[tuple[str, int, Any, set[str]]] = []
    search = store.search

    def recorded(query: str, k: int = 5, **kw: Any) -> Any:
        searches.append((query, k, kw.get("mode"), set(kw.get("exclude") or ())))
        return search(query, k, **kw)

    store.search = recorded  # type: ignore[method-assign]
    return searches


def run(store: Store, verdict: str, **options: Any) -> tuple[dict[str, Any], ScriptedChatModel]:
    return run_with(store, verdict, **options)


def scripted(verdict: str, draft: str = "Paris") -> ScriptedChatModel:
    """The judge replies ``verdict``, the final call ``FINAL``, the draft ``draft``."""
    return ScriptedChatModel(
        rules=[
            ("## First Round Answer", verdict),
            ("## Missing Knowledge Context", FINAL),
        ],
        default=draft,
    )


def run_with(
    store: Any, verdict: str, *, draft: str = "Paris", question: str = Q, **options: Any
) -> tuple[dict[str, Any], ScriptedChatModel]:
    """The paper-mode run of ``question`` over ``store``."""
    model = scripted(verdict, draft)
    graph = build_graph("missing_knowledge", llm=model, retriever=store, profile="paper", **options)
    return dict(graph.invoke({"question": question})), model


def kinds(model: ScriptedChatModel) -> list[str]:
    out = []
    for prompt in model.prompts():
        if "## First Round Answer" in prompt:
            out.append("judge")
        elif "## Missing Knowledge Context" in prompt:
            out.append("final")
        else:
            out.append("draft")
    return out


def real_part(prompt: str) -> str:
    """The prompt after its one-shot example: from the last ``## Context`` heading on."""
    return "## Context\n" + prompt.rsplit("## Context\n", 1)[1]


def titles(block: str) -> list[str]:
    return [ln.split(": ", 2)[1] for ln in block.splitlines() if ln.startswith("Document[")]


def test_step_1_the_first_retrieval_takes_the_topk_over_two_best_chunks_for_the_question(
    store: Store,
) -> None:
    ranked = [h["title"] for h in store.search(Q, k=3, mode="dense")]
    searches = record_searches(store)
    out, model = run(store, judge(False, []))
    assert out["queries"][0] == Q
    assert searches == [(Q, 2, "dense", set())]  # one dense search: TopK/2 chunks
    draft = real_part(model.prompts()[kinds(model).index("draft")])
    assert titles(draft) == ranked[:2]  # TopK = 4 split evenly between KB A and KB B


def test_step_2_the_draft_answers_over_whole_chunks_alone(store: Store) -> None:
    _, model = run(store, judge(False, []))
    draft = real_part(model.prompts()[kinds(model).index("draft")])
    assert draft.count("word399") == 2  # both chunks whole: no 150-word cut
    assert "## Missing Knowledge Context" not in draft
    assert draft.index("## Context") < draft.index(f"## Question\n{Q}") < draft.index("## Answer")


def test_step_3_one_judge_call_sees_question_context_and_draft_under_the_papers_criteria(
    store: Store,
) -> None:
    _, model = run(store, judge(False, []))
    assert kinds(model).count("judge") == 1
    prompt = model.prompts()[kinds(model).index("judge")]
    criteria = [
        "(a) the answer is incomplete and leaves out key points or details the question asks for;",
        "(b) the answer holds wrong information or contradicts the context or known facts;",
        "(c) the answer is vague or off topic.",
    ]
    steps = ["1. From the question", "2. If so, list the missing", "3. Give your reasoning",
             "4. Queries are short"]  # fmt: skip
    for line in [*criteria, *steps]:
        assert line in prompt
    assert "does not support it" not in prompt and "encyclopedia title" not in prompt
    for field in ('"thought"', '"judge"', '"missing_knowledge"', '"query"'):
        assert field in prompt
    slots = [f"## Query\n{Q}", "## Context", "## First Round Answer\nParis", "## Output"]
    assert [prompt.index(s) for s in slots] == sorted(prompt.index(s) for s in slots)
    assert prompt.count("word399") == 2  # the draft's chunks, whole


def test_step_4_a_not_missing_verdict_answers_with_the_thought_and_no_new_chunks(
    store: Store,
) -> None:
    out, model = run(store, judge(False, []))
    assert kinds(model) == ["draft", "judge", "final"]  # no Yes/No call after the judge
    final = real_part(model.prompts()[-1])
    mk = final.split("## Missing Knowledge Context", 1)[1].split("## Question", 1)[0]
    assert "The context does not say who designed the tower." in mk and "Document[" not in mk
    assert {e["round"] for e in out["evidence"]} == {1} and out["queries"] == [Q]
    assert out["stop_reason"] == "enough_knowledge" and out["iterations"] == 1
    decision = out["decisions"][-1]
    assert decision["decision"] == "stop" and decision["path"] == "verdict"
    assert decision["p"] is None and decision["threshold"] is None
    assert decision["node"] == "judge_missing" and decision["round"] == 1
    judge_call = model.calls[kinds(model).index("judge")]
    assert judge_call["kwargs"]["max_tokens"] == 512  # the judge's reply cap


def test_step_4_a_not_missing_verdict_sends_none_of_the_judges_queries(store: Store) -> None:
    searches = record_searches(store)
    out, _ = run(store, judge(False, ["Eiffel Tower designer"]))
    assert len(searches) == 1 and out["queries"] == [Q]
    assert out["stop_reason"] == "enough_knowledge"


def test_step_4_a_missing_verdict_retrieves_each_querys_top_chunks_and_drops_repeats(
    store: Store,
) -> None:
    searches = record_searches(store)
    out, model = run(store, judge(True, ["Eiffel Tower designer", "Gustave Eiffel engineer"]))
    assert kinds(model) == ["draft", "judge", "final"]
    assert out["queries"][1:] == ["Eiffel Tower designer", "Gustave Eiffel engineer"]
    assert searches[1:] == [  # each query: its top TopK - TopK/2 over the whole KB
        ("Eiffel Tower designer", 2, "dense", set()),
        ("Gustave Eiffel engineer", 2, "dense", set()),
    ]
    first = [e["id"] for e in out["evidence"] if e["round"] == 1]
    tops = [[h["id"] for h in store.search(q, k=2, mode="dense")] for q in out["queries"][1:]]
    new = {i for top in tops for i in top} - set(first)
    assert len(new) == 1  # the queries' top 2 hold one chunk not retrieved before
    added = [e["id"] for e in out["evidence"] if e["round"] == 2]
    assert added == sorted(new)  # repeats dropped, not replaced by lower-ranked chunks
    assert out["decisions"][-1]["decision"] == "continue"
    assert out["iterations"] == 2  # the first retrieval, then the one missing-knowledge round
    assert out["judge_verdict"] is True and out["judge_parse_ok"] is True
    assert out["missing_knowledge"] == ["designer of the Eiffel Tower"]


def test_step_4_the_queries_chunks_merge_rank_by_rank_within_topk_minus_topk_over_two(
    store: Store,
) -> None:
    queries = ["Rome Italy", "Gustave Eiffel French engineer"]
    tops = [[h["id"] for h in store.search(q, k=2, mode="dense")] for q in queries]
    assert tops == [["rome", "lon"], ["eng", "eiffel"]]  # three new chunks among them
    out, _ = run(store, judge(True, queries))
    added = [e["id"] for e in out["evidence"] if e["round"] == 2]
    assert added == ["rome", "eng"]  # each query's best first, two in all


def test_step_4_a_chunk_two_queries_find_is_merged_once(store: Store) -> None:
    queries = ["Rome Italy", "Italy Rome"]
    tops = [[h["id"] for h in store.search(q, k=2, mode="dense")] for q in queries]
    assert tops == [["rome", "lon"], ["rome", "lon"]]
    out, _ = run(store, judge(True, queries))
    added = [e["id"] for e in out["evidence"] if e["round"] == 2]
    assert added == ["rome", "lon"]  # the repeat skipped, the budget filled by the next rank


def test_step_4_a_query_that_finds_only_retrieved_chunks_adds_none(store: Store) -> None:
    out, model = run(store, judge(True, ["tower in Paris"]))
    first = {e["id"] for e in out["evidence"] if e["round"] == 1}
    assert {h["id"] for h in store.search("tower in Paris", k=2, mode="dense")} == first
    assert [e for e in out["evidence"] if e["round"] == 2] == []
    final = real_part(model.prompts()[-1])
    assert titles(final.split("## Missing Knowledge Context", 1)[1]) == []


def test_step_5_the_final_answer_holds_both_contexts_and_is_returned_as_written(
    store: Store,
) -> None:
    out, model = run(store, judge(True, ["Eiffel Tower designer"]))
    final = real_part(model.prompts()[-1])
    context, _, rest = final.partition("## Missing Knowledge Context")
    mk, _, question = rest.partition("## Question")
    assert titles(context) == [e["title"] for e in out["evidence"] if e["round"] == 1]
    assert mk.index("The context does not say who designed the tower.") < mk.index("Document[1]")
    assert titles(mk) == [e["title"] for e in out["evidence"] if e["round"] == 2] != []
    assert "designer of the Eiffel Tower" not in final  # the missing list is not shown
    assert final.count("word399") == len(out["evidence"])  # every chunk whole
    assert question.startswith(f"\n{Q}")
    # the paper's answer, not rewritten by a short-answer step
    assert out["answer"] == FINAL and len(model.calls) == 3
    assert out["stop_reason"] == "answered_after_missing_knowledge"


def test_a_missing_verdict_without_queries_answers_without_retrieving(store: Store) -> None:
    out, model = run(store, json.dumps({"thought": "", "judge": True, "query": []}))
    assert kinds(model) == ["draft", "judge", "final"]
    assert {e["round"] for e in out["evidence"]} == {1} and out["queries"] == [Q]
    assert out["stop_reason"] == "enough_knowledge" and out["iterations"] == 1


def test_step_4_a_repeat_is_skipped_and_the_next_querys_chunk_of_that_rank_still_merged(
    store: Store,
) -> None:
    queries = ["tower in Paris", "Rome Italy"]  # the first query finds only retrieved chunks
    out, _ = run(store, judge(True, queries))
    first = [e["id"] for e in out["evidence"] if e["round"] == 1]
    assert {h["id"] for h in store.search(queries[0], k=2, mode="dense")} == set(first)
    added = [e["id"] for e in out["evidence"] if e["round"] == 2]
    assert added == ["rome", "lon"]  # q1#1 repeated, q2#1 merged; q1#2 repeated, q2#2 merged


def test_step_3_a_query_the_judge_repeats_is_searched_once(store: Store) -> None:
    searches = record_searches(store)
    out, _ = run(store, judge(True, ["Eiffel Tower designer", "eiffel  tower DESIGNER"]))
    assert searches[1:] == [("Eiffel Tower designer", 2, "dense", set())]
    assert out["mk_queries"] == ["Eiffel Tower designer"]


def test_step_4_the_run_records_each_chunks_provenance_and_each_steps_progress(
    store: Store,
) -> None:
    queries = ["Eiffel Tower designer", "Gustave Eiffel engineer"]
    model = scripted(judge(True, queries))
    graph = build_graph("missing_knowledge", llm=model, retriever=store, profile="paper")
    updates: dict[str, dict[str, Any]] = {}
    events: list[dict[str, Any]] = []
    for mode, chunk in graph.stream({"question": Q}, stream_mode=["updates", "custom"]):
        if mode == "custom":
            events.append(chunk)
        else:
            updates.update(chunk)

    def expected(query: str, by: str) -> list[dict[str, Any]]:
        hits = store.search(query, k=2, mode="dense")
        return [
            {"id": h["id"], "kind": "doc", "kb": "passages", "source": "dense",
             "score": h["score"], "rank": i, "retrieved_by": by, "query": query}
            for i, h in enumerate(hits, 1)
        ]  # fmt: skip

    def provenance(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: c[k] for k in expected(Q, "orig")[0]} for c in chunks]

    first = updates["retrieve"]["initial_contexts"]
    assert provenance(first) == expected(Q, "orig")
    assert [len(c["md5"]) for c in first] == [32, 32]
    candidates = updates["retrieve_missing"]["mk_candidates"]
    assert [provenance(c) for c in candidates] == [expected(q, "mk") for q in queries]
    added = updates["update_evidence_pool"]["mk_contexts"]
    evidence = updates["update_evidence_pool"]["evidence"]
    assert [(e["source"], e["score"], e["round"]) for e in evidence] == [
        *[("dense", c["score"], 1) for c in first],
        *[("dense", c["score"], 2) for c in added],
    ]
    assert events == [
        {"round": 1, "query": Q, "kb": "passages", "added": 2},
        {"judge": True, "p_enough": None, "stop": False, "queries": queries, "parse_ok": True},
        {"round": 2, "query": queries[0], "kb": "passages", "found": 2},
        {"round": 2, "query": queries[1], "kb": "passages", "found": 2},
        {"round": 2, "added": len(added)},
    ]
    judged = updates["judge_missing"]
    assert judged["trace"] == [{"node": "judge_missing", "call": "judge_missing", "path": "parsed"}]
    assert "answer" not in judged["decisions"][-1]  # known only in calibration or reuse_draft


def test_step_3_an_unparsable_judge_reply_reads_as_nothing_missing(store: Store) -> None:
    model = ScriptedChatModel(rules=[("## First Round Answer", "no JSON here")], default="Paris")
    graph = build_graph("missing_knowledge", llm=model, retriever=store, profile="paper")
    events = [e for e in graph.stream({"question": Q}, stream_mode="custom") if "judge" in e]
    assert events == [
        {"judge": False, "p_enough": None, "stop": True, "queries": [], "parse_ok": False}
    ]
    out = dict(graph.invoke({"question": Q}))
    assert out["judge_parse_ok"] is False and out["judge_verdict"] is False
    assert out["stop_reason"] == "enough_knowledge" and out["mk_queries"] == []
    trace = out["trace"][0]
    assert trace["call"] == "judge_missing" and trace["path"] == "default"


def test_step_3_an_empty_draft_reaches_the_judge_as_empty(store: Store) -> None:
    _, model = run_with(store, judge(False, []), draft="")
    prompt = model.prompts()[kinds(model).index("judge")]
    assert "## First Round Answer\n(empty)\n" in prompt


def test_step_5_with_nothing_missing_the_missing_knowledge_context_is_the_thought_alone(
    store: Store,
) -> None:
    _, model = run(store, judge(False, []))
    final = real_part(model.prompts()[-1])
    mk = final.split("## Missing Knowledge Context\n", 1)[1].split("## Question", 1)[0]
    assert mk == "The context does not say who designed the tower.\n\n\n"


Q_ZH = "埃菲尔铁塔是谁设计的？"
OPTIONS_ZH = "A. 古斯塔夫·埃菲尔\nB. 贝聿铭"
SYSTEMS = {  # the openings of the draft, judge and final prompts' instructions
    "en": ["You answer questions from retrieved context. Reply", "You are a knowledge expert who "
           "writes JSON. You get a question, the context retrieved for it and a prediction.",
           "You answer questions from retrieved context. The context comes in two parts"],
    "zh": ["你根据检索到的资料回答问题。只输出答案本身", "你是精通中文和JSON的医学知识专家",
           "你根据检索到的资料回答问题。资料分两部分"],
}  # fmt: skip


def test_a_chinese_question_gets_the_chinese_prompts_and_its_options_in_each(
    store: Store,
) -> None:
    searches = record_searches(store)
    question = f"{Q_ZH}\n选项：\n{OPTIONS_ZH}"
    _, model = run_with(store, judge(False, []), question=question)
    assert kinds(model) == ["draft", "judge", "final"]
    assert [s[0] for s in searches] == [Q_ZH]  # the stem alone is searched
    for prompt, opening in zip(model.prompts(), SYSTEMS["zh"], strict=True):
        assert prompt.startswith(opening)
        assert f"\n{Q_ZH}\n选项：\n{OPTIONS_ZH}\n\n## " in prompt  # the options, labelled


def test_options_given_as_a_setting_are_shown_in_every_prompt_and_never_searched(
    store: Store,
) -> None:
    searches = record_searches(store)
    options = "A. Gustave Eiffel\nB. I. M. Pei"
    _, model = run_with(store, judge(False, []), options_text=options)
    assert [s[0] for s in searches] == [Q]
    for prompt in model.prompts():
        assert f"\n{Q}\nOptions:\n{options}\n\n## " in prompt


@pytest.mark.parametrize(("setting", "question"), [("zh", Q), ("en", Q_ZH)])
def test_the_language_setting_chooses_the_prompts_whatever_the_questions_script(
    store: Store, setting: str, question: str
) -> None:
    _, model = run_with(store, judge(False, []), question=question, language=setting)
    assert kinds(model) == ["draft", "judge", "final"]
    for prompt, opening in zip(model.prompts(), SYSTEMS[setting], strict=True):
        assert prompt.startswith(opening)


class EmptyKnowledgeBase:
    """A knowledge base that holds nothing for any query."""

    def search(self, query: str, k: int = 5, **_: Any) -> list[Any]:
        return []


@pytest.mark.parametrize(("question", "none"), [(Q, "(none)"), (Q_ZH, "（无）")])
def test_an_empty_knowledge_base_shows_none_in_the_questions_language(
    question: str, none: str
) -> None:
    out, model = run_with(EmptyKnowledgeBase(), judge(False, []), question=question)
    assert out["evidence"] == [] and kinds(model) == ["draft", "judge", "final"]
    for prompt in model.prompts():
        assert f"## Context\n{none}\n" in real_part(prompt)


def test_the_run_takes_a_question_and_returns_the_methods_outputs(store: Store) -> None:
    graph = build_graph("missing_knowledge", llm=ScriptedChatModel(), retriever=store,
                        profile="paper")  # fmt: skip
    assert graph.name == "missing_knowledge"
    assert set(graph.get_input_jsonschema()["properties"]) == {"question", "dataset_id"}
    out, _ = run(store, judge(False, []))
    assert set(out) == set(graph.get_output_jsonschema()["properties"])
    assert "initial_contexts" not in out and "mk_round" not in out


def test_the_run_keeps_its_state_in_the_checkpointer_it_is_given(store: Store) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    graph = build_graph(
        "missing_knowledge",
        llm=scripted(judge(False, [])),
        retriever=store,
        profile="paper",
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "one"}}
    graph.invoke({"question": Q}, config)
    assert graph.get_state(config).values["answer"] == FINAL


class PairKnowledgeBase:
    """Question-answer pairs, best first: what a pair store returns for any query."""

    def __init__(self, pairs: list[dict[str, Any]]) -> None:
        self.pairs = pairs

    def search(self, query: str, k: int = 5, **_: Any) -> list[dict[str, Any]]:
        return self.pairs[:k]


def pair(pid: str, question: str, answer: str, score: float) -> dict[str, Any]:
    return {"id": pid, "title": "", "text": f"Q: {question}\nA: {answer}", "score": score}


PAIRS = [
    pair("who", "who designed the eiffel tower?", "Gustave Eiffel", 0.9),
    # a retriever's plain text: its title is the question
    {"id": "cap", "title": "capital of France", "text": "Paris " + LONG, "score": 0.8},
    pair("where", "where is the eiffel tower?", "Paris", -0.5),
]


def test_misk_qa_pairs_plus_wiki_answers_the_question_from_pairs_then_searches_passages(
    store: Store,
) -> None:
    model = scripted(judge(True, ["Rome Italy"]))
    graph = build_graph(
        "missing_knowledge", llm=model, retriever=store, kb_pairs=PairKnowledgeBase(PAIRS),
        kb_primary="qa_pairs", kb_secondary="passages", profile="paper",
    )  # fmt: skip
    out = dict(graph.invoke({"question": Q}))
    assert [(e["id"], e["round"]) for e in out["evidence"]] == [
        ("who", 1), ("cap", 1), ("rome", 2), ("lon", 2)
    ]  # fmt: skip
    draft = real_part(model.prompts()[0])
    shown = "### History QA pairs\nQ: who designed the eiffel tower?\nA: Gustave Eiffel\n"
    assert draft.startswith(f"## Context\n{shown}Q: capital of France\nA: Paris {LONG}\n")
    mk = real_part(model.prompts()[-1]).split("## Missing Knowledge Context", 1)[1]
    assert "### Documents\nDocument[1]: Rome: " in mk and "### History QA pairs" not in mk


def test_misk_merged_kb_ranks_passages_and_pairs_by_score_in_one_list(store: Store) -> None:
    model = scripted(judge(False, []))
    graph = build_graph(
        "missing_knowledge", llm=model, retriever=store,
        kb_pairs=PairKnowledgeBase([PAIRS[0], PAIRS[2]]),
        kb_primary="merged", kb_secondary="merged", profile="paper",
    )  # fmt: skip
    out = dict(graph.invoke({"question": Q}))
    passages = [h["id"] for h in store.search(Q, k=2, mode="dense")]
    assert store.search(Q, k=1, mode="dense")[0]["score"] > PAIRS[2]["score"]
    assert [e["id"] for e in out["evidence"]] == ["who", passages[0]]  # by score, not alternating
    draft = real_part(model.prompts()[0])
    assert draft.index("### Documents\nDocument[1]: ") < draft.index("### History QA pairs\nQ: who")


def test_a_pair_knowledge_base_without_a_pair_store_is_refused() -> None:
    from gaprag.errors import GapragError

    for kb in ("qa_pairs", "merged"):
        with pytest.raises(GapragError, match="needs a question-answer pair store"):
            run_with(EmptyKnowledgeBase(), judge(False, []), kb_primary=kb)


def test_a_calibration_run_never_stops_and_records_the_answer_it_would_have_given(
    store: Store,
) -> None:
    searches = record_searches(store)
    verdict = json.dumps({"thought": "", "judge": True, "query": []})
    out, _ = run(store, verdict, calibration=True)
    assert [s[0] for s in searches] == [Q, Q]  # no query named: the question searched again
    decision = out["decisions"][-1]
    assert decision["decision"] == "continue" and decision["answer"] == FINAL
