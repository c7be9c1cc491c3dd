"""iterkey: acceptance tests that need no GPU (the numbers name the checks listed in
docs/methods/iterkey.md's design notes; they were the method spec's acceptance list).

A scripted fake LLM answers by prompt type (P1 keywords, P2 answer, P3 validate, P4 regenerate,
and the doc-by-doc and CoT variants) and records every prompt; a tiny real store (BM25 and
Chroma with the hashing embedder) does the retrieval.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult
from langchain_core.runnables import RunnableConfig

from gaprag import build_graph
from gaprag.errors import InputError
from gaprag.graphs.iterkey.analysis import (
    fallback_index,
    final_round,
    majority_index,
    new_per_step,
    verified_all,
    verified_true,
)
from gaprag.graphs.iterkey.context import Context
from gaprag.graphs.iterkey.nodes import PROMPTS
from gaprag.graphs.iterkey.parsing import (
    cot_verdict,
    parse_keywords,
    retrieval_query,
)
from gaprag.llm.client import LLM
from gaprag.llm.factory import openai_llm
from gaprag.metrics import normalize_answer
from gaprag.stores import HashingEmbedder, Store
from gaprag.stores.retriever import GapragRetriever
from gaprag.testing import ScriptedChatModel
from tests.methods.iterkey import (
    CORPUS,
    KINDS,
    Q_NO_HITS,
    TEXT,
    Q,
    kind_of,
    kinds,
    prompts_of,
    role_fake,
)


@pytest.fixture(scope="module")
def module_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """A store of ``CORPUS``, built once and shared by the module (no test writes to it)."""
    root = tmp_path_factory.mktemp("iterkey-store") / "s"
    return Store.build(root, CORPUS, embedder=HashingEmbedder(), progress=False)


def served(fake: ScriptedChatModel) -> LLM:
    """A scripted model served as an endpoint that returns logprobs."""
    return LLM(fake, supports_logprobs=True)


def run(
    store: Store,
    fake: ScriptedChatModel | LLM,
    question: str = Q,
    *,
    endpoint_logprobs: bool = True,
    **options: Any,
) -> dict[str, Any]:
    """One question through the graph; a scripted model is served as an endpoint that returns
    logprobs unless ``endpoint_logprobs`` is False."""
    llm = fake if isinstance(fake, LLM) else LLM(fake, supports_logprobs=endpoint_logprobs)
    graph = build_graph("iterkey", llm=llm, retriever=store, **options)
    return dict(graph.invoke({"question": question}))


# -- loop control --------------------------------------------------------------------------
def test_stops_at_the_first_true_verdict(module_store: Store) -> None:
    fake = role_fake(verdicts=["True"])
    out = run(module_store, fake)
    assert kinds(fake) == ["keywords", "answer", "validate"]
    assert out["usage"]["llm_calls"] == 3 and out["usage"]["retrieval_calls"] == 1
    assert out["answer"] == "a1" and out["stop_reason"] == "validated"
    assert len(out["history"]) == 1 and out["iterations"] == 1 and out["verdicts"] == [True]


def test_regenerates_keywords_until_a_round_is_validated(module_store: Store) -> None:
    fake = role_fake(verdicts=["False", "False", "True"])
    out = run(module_store, fake)
    assert Counter(kinds(fake)) == {"keywords": 1, "answer": 3, "validate": 3, "regenerate": 2}
    assert out["usage"]["llm_calls"] == 9 and out["usage"]["retrieval_calls"] == 3
    assert out["answer"] == "a3" and out["iterations"] == 3 and out["stop_reason"] == "validated"
    assert out["verdicts"] == [False, False, True] and out["first_true_iteration"] == 3


@pytest.mark.parametrize(
    ("policy", "answers", "expected"),
    [
        ("last", ["a1", "a2", "a3", "a4", "a5"], "a5"),
        ("first", ["a1", "a2", "a3", "a4", "a5"], "a1"),
        ("majority", ["x", "y", "x", "y", "z"], "y"),
    ],
)
def test_after_the_last_round_the_fallback_policy_picks_the_answer(
    module_store: Store, policy: str, answers: list[str], expected: str
) -> None:
    fake = role_fake(answers=answers, verdicts=["False"])
    out = run(module_store, fake, fallback_policy=policy)
    assert Counter(kinds(fake)) == {"keywords": 1, "answer": 5, "validate": 5, "regenerate": 4}
    assert out["usage"]["llm_calls"] == 15 and out["usage"]["retrieval_calls"] == 5
    assert out["stop_reason"] == "max_iterations" and out["iterations"] == 5
    assert out["answer"] == expected
    chosen = next(t for t in out["trace"] if t["node"] == "finalize")
    assert (
        chosen["policy"] == policy and out["answer"] == answers[chosen["answer_from_iteration"] - 1]
    )


def test_confident_fallback_answers_with_the_most_probable_round(module_store: Store) -> None:
    # P(True) per round, none at the threshold: round 4 ties round 2 and is the later one
    fake = role_fake(verdicts=[0.3, 0.45, 0.2, 0.45, 0.1])
    out = run(module_store, fake, fallback_policy="confident", validation_threshold=0.9)
    assert out["stop_reason"] == "max_iterations" and out["answer"] == "a4"
    chosen = next(t for t in out["trace"] if t["node"] == "finalize")
    assert chosen == {
        "node": "finalize", "stop_reason": "max_iterations", "answer_from_iteration": 4,
        "policy": "confident",
    }  # fmt: skip
    # no probabilities (an endpoint without logprobs): the last round, as "last"
    fake = role_fake(verdicts=["False"])
    out = run(
        module_store, fake, fallback_policy="confident", endpoint_logprobs=False, max_iterations=3
    )
    assert out["answer"] == "a3"


def test_fallback_evidence_is_the_chosen_rounds(module_store: Store) -> None:
    fake = role_fake(keywords=['["Paris"]'], regen=['["Shakespeare"]'], verdicts=["False"])
    out = run(module_store, fake, Q_NO_HITS, fallback_policy="first", max_iterations=2)
    assert out["answer"] == "a1"
    assert {e["id"] for e in out["evidence"]} == {"fr", "eiffel"}  # D_1, not D_2


def test_max_iterations_bounds_the_rounds(module_store: Store) -> None:
    fake = role_fake(verdicts=["False"])
    out = run(module_store, fake, max_iterations=1)
    assert kinds(fake) == ["keywords", "answer", "validate"]
    assert out["answer"] == "a1" and out["stop_reason"] == "max_iterations"
    fake3 = role_fake(verdicts=["False"])
    out3 = run(module_store, fake3, max_iterations=3)
    assert out3["usage"]["retrieval_calls"] == 3 and out3["iterations"] == 3


@pytest.mark.parametrize(
    "verdicts",
    [["True"], ["False", "True"], ["False", "False", "False", "True"], ["False"]],
)
def test_no_regeneration_after_the_last_round(module_store: Store, verdicts: list[str]) -> None:
    fake = role_fake(verdicts=verdicts)
    out = run(module_store, fake)
    assert kinds(fake).count("regenerate") == out["iterations"] - 1
    assert kinds(fake)[-1] == "validate"


def test_analysis_mode_runs_all_rounds_and_keeps_the_first_true(module_store: Store) -> None:
    fake = role_fake(
        answers=["wrong", "Eagle", "nope", "The Eagle.", "Columbia"],
        verdicts=["False", "True", "False", "True", "False"],
    )
    out = run(module_store, fake, continue_after_true=True)
    assert out["iterations"] == 5 and out["verdicts"] == [False, True, False, True, False]
    assert out["first_true_iteration"] == 2 and out["answer"] == "Eagle"
    assert out["stop_reason"] == "max_iterations"  # the bound ended the loop, not a verdict

    def is_eagle(answer: str) -> bool:
        return normalize_answer(answer) == "eagle"

    def is_columbia(answer: str) -> bool:
        return normalize_answer(answer) == "columbia"

    history = out["history"]
    assert verified_true(history, is_eagle) and verified_all(history, is_eagle)
    assert not verified_true(history, is_columbia)  # Columbia was only ever judged False
    assert verified_all(history, is_columbia)


# -- prompt contents -----------------------------------------------------------------------
def test_keyword_prompt_has_the_question_and_no_documents(module_store: Store) -> None:
    fake = role_fake(verdicts=["True"])
    run(module_store, fake)
    (p1,) = prompts_of(fake, "keywords")
    assert p1.rstrip().endswith(f"Query: {Q}")  # variable part last
    assert not any(text in p1 for text in TEXT.values())


def test_regeneration_prompt_sees_only_the_question_and_previous_keywords(
    module_store: Store,
) -> None:
    fake = role_fake(
        keywords=['["zeta1", "Paris"]'],
        regen=['["zeta2", "Berlin"]', '["zeta3", "Hamlet"]'],
        answers=["ans1", "ans2", "ans3"],
        verdicts=["False", "False", "True"],
    )
    out = run(module_store, fake, Q_NO_HITS)
    p4 = prompts_of(fake, "regenerate")
    assert len(p4) == 2
    for i, prompt in enumerate(p4):  # the call that builds K_(i+2) from K_(i+1)
        previous = out["history"][i]
        assert Q_NO_HITS in prompt
        assert f"Previous Keywords: {json.dumps(previous['keywords'])}" in prompt
        assert previous["answer"] not in prompt
        assert not any(TEXT[d] in prompt for d in previous["doc_ids"])
        assert not any(d["title"] in prompt for d in previous["documents"])
    assert "zeta1" not in p4[1] and "zeta2" in p4[1]  # no list older than K_i


def test_answer_prompt_has_the_question_and_only_this_rounds_passages(module_store: Store) -> None:
    fake = role_fake(
        keywords=['["Paris", "France", "Berlin"]'],
        regen=['["Shakespeare", "Hamlet", "Stratford"]'],
        verdicts=["False", "True"],
    )
    out = run(module_store, fake, Q_NO_HITS)
    p2 = prompts_of(fake, "answer")
    assert len(p2) == 2
    rounds = [r["doc_ids"] for r in out["history"]]
    assert len(rounds[0]) == len(rounds[1]) == 3 and not set(rounds[0]) & set(rounds[1])
    for i, prompt in enumerate(p2):
        assert f"Query: {Q_NO_HITS}" in prompt
        assert out["history"][i]["retrieval_query"] not in prompt  # not the expanded query
        positions = [prompt.index(TEXT[d]) for d in rounds[i]]
        assert positions == sorted(positions)  # rank order
        for rank, doc_id in enumerate(rounds[i], 1):
            assert f"[{rank}] " in prompt and TEXT[doc_id] in prompt
        other = rounds[1 - i]
        assert not any(TEXT[d] in prompt for d in other)


def test_validation_prompt_has_question_answer_and_the_same_passages(module_store: Store) -> None:
    fake = role_fake(keywords=['["Paris", "France"]'], answers=["Paris"], verdicts=["True"])
    out = run(module_store, fake, Q_NO_HITS)
    (p2,) = prompts_of(fake, "answer")
    (p3,) = prompts_of(fake, "validate")
    assert f"Query: {Q_NO_HITS}" in p3 and "Answer: Paris" in p3
    block = p2[p2.index("[1] ") : p2.index(ANSWER_INSTRUCTION)].strip()
    assert block and block in p3
    assert all(TEXT[d] in p3 for d in out["history"][0]["doc_ids"])


ANSWER_INSTRUCTION = "Give a clear, concise answer and nothing else."
VALIDATE_INSTRUCTION = "Reply with exactly one word, True or False"


def test_answer_and_validation_prompts_follow_the_papers_order(module_store: Store) -> None:
    """Paper Table 1: P2 is question, documents, then the instruction; P3 is question, answer,
    documents, then the reply format. The instruction is the last thing the model reads (a
    1.5B model given a prompt that ends on the question restated it)."""
    fake = role_fake(keywords=['["Paris", "France"]'], answers=["Paris"], verdicts=["True"])
    out = run(module_store, fake, Q_NO_HITS)
    answer_call, validate_call = (
        next(c for c in fake.calls if kind_of(c) == kind) for kind in ("answer", "validate")
    )
    (_, system), (_, user) = answer_call["messages"]
    assert system == PROMPTS["answer"].system
    assert user.rstrip().endswith(ANSWER_INSTRUCTION)
    first_doc = TEXT[out["history"][0]["doc_ids"][0]]
    assert (
        user.index(f"Query: {Q_NO_HITS}") < user.index(first_doc) < user.index(ANSWER_INSTRUCTION)
    )
    assert out["history"][0]["retrieval_query"] not in user
    (_, _), (_, judged) = validate_call["messages"]
    assert judged.rstrip().endswith("no explanation and no other text.")
    assert (
        judged.index(f"Query: {Q_NO_HITS}")
        < judged.index("Answer: Paris")
        < judged.index(first_doc)
        < judged.index(VALIDATE_INSTRUCTION)
    )


def test_retrieval_query_is_the_question_plus_keywords(module_store: Store) -> None:
    fake = role_fake(
        keywords=['["Moon", "landing"]'], regen=['["Apollo 11"]'], verdicts=["False", "True"]
    )
    out = run(module_store, fake)
    assert out["queries"] == [f"{Q} Moon landing", f"{Q} Apollo 11"]
    assert [r["retrieval_query"] for r in out["history"]] == out["queries"]
    assert retrieval_query("q?", []) == "q?" and retrieval_query("q?", ["a b", "c"]) == "q? a b c"


def test_unparseable_keywords_mean_the_question_alone(module_store: Store) -> None:
    fake = role_fake(keywords=[""], verdicts=["True"])
    out = run(module_store, fake)
    assert out["queries"] == [Q] and out["keywords"] == []
    assert out["parse_failures"][0]["node"] == "generate_keywords"
    assert any(t.get("fallback") == "question_only" for t in out["trace"])


def test_regenerated_keywords_replace_the_previous_ones(module_store: Store) -> None:
    fake = role_fake(
        keywords=['["Moon", "landing"]'],
        regen=['["Apollo 11", "Eagle"]'],
        verdicts=["False", "True"],
    )
    out = run(module_store, fake)
    assert out["keywords"] == ["Apollo 11", "Eagle"]
    assert [r["keywords"] for r in out["history"]] == [["Moon", "landing"], ["Apollo 11", "Eagle"]]


# -- retrieval -----------------------------------------------------------------------------
def test_keyword_expansion_finds_the_gold_passage(module_store: Store) -> None:
    fake = role_fake(
        keywords=['["Moon", "landing"]'],
        regen=['["Apollo 11", "lunar module"]'],
        answers=["Saturn V", "Eagle"],
        verdicts=["False", "True"],
    )
    out = run(module_store, fake)
    first, second = out["history"]
    assert "apollo" not in first["doc_ids"] and second["doc_ids"][0] == "apollo"
    assert first["answer"] == "Saturn V" and out["answer"] == "Eagle"
    assert out["stop_reason"] == "validated" and out["evidence"][0]["id"] == "apollo"


def test_retrieval_is_top_k_sorted_and_deterministic(module_store: Store) -> None:
    outs = [
        run(module_store, role_fake(keywords=['["Moon", "Paris"]'], verdicts=["True"]))
        for _ in range(2)
    ]
    ev = outs[0]["evidence"]
    assert len(ev) == 3 and [e["score"] for e in ev] == sorted(
        (e["score"] for e in ev), reverse=True
    )
    assert [e["id"] for e in ev] == [e["id"] for e in outs[1]["evidence"]]
    assert all(e["source"] == "bm25" and e["round"] == 1 for e in ev)
    # up to recall_k ids are logged for recall statistics; prompts only ever get top_k
    record = outs[0]["history"][0]
    assert len(record["logged_doc_ids"]) == 5 and record["logged_doc_ids"][:3] == record["doc_ids"]
    out1 = run(module_store, role_fake(keywords=['["Moon"]'], verdicts=["True"]), top_k=1)
    assert len(out1["evidence"]) == 1


@pytest.mark.parametrize("mode", ["dense", "hybrid"])
def test_dense_and_hybrid_variants_use_the_same_query(module_store: Store, mode: str) -> None:
    script: dict[str, Any] = {"regen": ['["Apollo 11"]'], "verdicts": ["False", "True"]}
    bm25 = run(module_store, role_fake(**script))
    other = run(module_store, role_fake(**script), retrieval_mode=mode)
    assert other["queries"] == bm25["queries"]
    assert other["evidence"] and all(e["source"] == mode for e in other["evidence"])
    assert len(other["evidence"]) == 3


def test_hybrid_at_the_baselines_budget_shows_k_passages(module_store: Store) -> None:
    """``top_k`` alone sets what the prompts show: with top_k=5 and hybrid retrieval IterKey
    sees the same 5 passages as standard_rag (its default); recall_k only deepens the logged
    retrieval, and recall_k=0 retrieves exactly what is shown."""
    fake = role_fake(keywords=[""], verdicts=["True"])  # no keywords: the query is the question
    out = run(module_store, fake, retrieval_mode="hybrid", top_k=5)
    shown = [e["id"] for e in out["evidence"]]
    assert len(shown) == 5 and out["shown_ids"] == shown
    assert all(e["source"] == "hybrid" for e in out["evidence"])
    (p2,) = prompts_of(fake, "answer")
    (p3,) = prompts_of(fake, "validate")
    for prompt in (p2, p3):
        assert "[5] " in prompt and "[6] " not in prompt
        assert all(TEXT[d] in prompt for d in shown)
    baseline = build_graph(
        "standard_rag", llm=ScriptedChatModel(default="x"), retriever=module_store
    )
    base = baseline.invoke({"question": Q})
    assert [e["id"] for e in base["evidence"]] == shown  # same query, mode and budget
    exact = run(module_store, role_fake(verdicts=["True"]), top_k=4, recall_k=0)
    assert len(exact["evidence"]) == 4 and exact["retrieved_ids"] == exact["shown_ids"]
    deeper = run(
        module_store, role_fake(verdicts=["True"]), top_k=2, recall_k=6, retrieval_mode="hybrid"
    )
    assert len(deeper["shown_ids"]) == 2 and len(deeper["history"][0]["logged_doc_ids"]) == 6


# -- validation decoding -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("logprobs", "text", "expected"),
    [
        ({"True": -0.2, "False": -1.9}, "False", True),
        ({"False": -0.1, "True": -3.0}, "True", False),  # probabilities win over the text
        # a tie is P(True) = 0.5 >= the default threshold 0.5 (the shared p >= t rule)
        ({"True": -0.7, "False": -0.7}, "False", True),
        ({"False": -0.7, "True": -0.7}, "False", True),
        ({"true": -0.3, "False": -1.0}, "False", True),  # case variants count
        ({" True": -0.3, "False": -1.0}, "False", True),
    ],
)
def test_logprobs_decide_the_verdict(
    module_store: Store, logprobs: dict[str, float], text: str, expected: bool
) -> None:
    fake = role_fake(verdicts=[text], logprobs=logprobs)
    out = run(module_store, LLM(fake, supports_logprobs=True), max_iterations=1)
    record = out["history"][0]
    assert record["verdict"] is expected and record["verdict_scores"]["method"] == "logprobs"
    assert record["verdict_scores"]["prob_true"] is not None
    assert [t["path"] for t in out["trace"] if t.get("call") == "validate_answer"] == ["logprobs"]
    (validate_call,) = [c for c in fake.calls if kind_of(c) == "validate"]
    assert validate_call["kwargs"]["max_tokens"] <= 3 and validate_call["kwargs"]["logprobs"]


class TwoPositionModel(ScriptedChatModel):
    """Logprobs whose first position is a newline; the decision is at the second position."""

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        result = super()._generate(messages, stop, run_manager, **kwargs)
        if kwargs.get("logprobs"):
            newline = {
                "token": "\n",
                "logprob": -0.01,
                "top_logprobs": [{"token": "\n", "logprob": -0.01}],
            }
            decision = {
                "token": "True",
                "logprob": -0.1,
                "top_logprobs": [
                    {"token": "True", "logprob": -0.1},
                    {"token": "False", "logprob": -2.5},
                ],
            }
            msg = result.generations[0].message
            assert isinstance(msg, AIMessage)
            msg.response_metadata = {"logprobs": {"content": [newline, decision]}}
        return result


def test_a_leading_whitespace_token_is_skipped_in_the_logprobs(module_store: Store) -> None:
    fake = TwoPositionModel(
        rules=[(needle, "x") for name, needle in KINDS if name != "validate"],
        default="False",
        logprobs={},
    )
    out = run(module_store, LLM(fake, supports_logprobs=True), max_iterations=1)
    assert out["history"][0]["verdict_scores"]["method"] == "logprobs"
    assert out["history"][0]["verdict"] is True


@pytest.mark.parametrize(
    ("text", "choice", "path"),
    [
        ("False.", "False", "parsed-no-logprobs"),
        ("  TRUE", "True", "parsed-no-logprobs"),
        ("I cannot tell", "False", "default"),
    ],
)
@pytest.mark.parametrize("endpoint_logprobs", [True, False])
def test_text_verdicts_are_read_but_never_accept(
    module_store: Store, text: str, choice: str, path: str, endpoint_logprobs: bool
) -> None:
    """A reply decided without logprobs (parsed text, or malformed: the default) has no
    probability, so the answer is not accepted and the loop goes on (fail toward retrieving
    more); the option the text named is kept in ``verdict_scores``."""
    fake = role_fake(verdicts=[text])
    out = run(module_store, fake, max_iterations=2, endpoint_logprobs=endpoint_logprobs)
    assert out["iterations"] == 2 and out["stop_reason"] == "max_iterations"
    for record in out["history"]:
        assert record["verdict"] is False
        scores = record["verdict_scores"]
        assert (scores["method"], scores["choice"], scores["p"]) == (path, choice, None)
        assert record["raw_validation_output"] == text
    decisions = out["decisions"]
    assert [(d["decision"], d["p"], d["path"], d["threshold"]) for d in decisions] == [
        ("reject", None, path, 0.5)
    ] * 2
    assert [d["answer"] for d in decisions] == ["a1", "a2"]
    failures = [f for f in out["parse_failures"] if f["node"] == "validate_answer"]
    assert len(failures) == (2 if path == "default" else 0)
    assert all(c["kwargs"]["max_tokens"] <= 30 for c in fake.calls if kind_of(c) == "validate")


def test_logprobs_without_true_or_false_fall_back_to_the_text(module_store: Store) -> None:
    fake = role_fake(verdicts=["True"], logprobs={"Maybe": -0.1})
    out = run(module_store, fake, max_iterations=1)
    scores = out["history"][0]["verdict_scores"]
    assert (scores["method"], scores["choice"], scores["p"]) == ("parsed-no-logprobs", "True", None)
    assert out["history"][0]["verdict"] is False and out["stop_reason"] == "max_iterations"


# -- the validation threshold ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("p_true", "threshold", "stops"),
    [
        (0.9, 0.5, True),
        (0.3, 0.5, False),
        (0.5, 0.5, True),  # p >= threshold
        (0.8, 0.7, True),
        (0.8, 0.85, False),  # the model prefers True, but not confidently enough
        (0.2, 0.1, True),  # the model prefers False, yet P(True) clears a low threshold
    ],
)
def test_validation_threshold_decides_on_p_true(
    module_store: Store, p_true: float, threshold: float, stops: bool
) -> None:
    fake = role_fake(verdicts=[p_true, 0.99])
    out = run(module_store, fake, validation_threshold=threshold)
    first = out["decisions"][0]
    assert first["p"] == pytest.approx(p_true, abs=1e-6) and first["threshold"] == threshold
    assert first["path"] == "logprobs" and first["answer"] == "a1"
    assert first["decision"] == ("accept" if stops else "reject")
    assert out["history"][0]["verdict"] is stops
    assert out["history"][0]["verdict_scores"]["p"] == pytest.approx(p_true, abs=1e-6)
    assert out["iterations"] == (1 if stops else 2) and out["stop_reason"] == "validated"
    assert out["answer"] == ("a1" if stops else "a2")


def test_validation_threshold_is_a_setting_at_run_time(module_store: Store) -> None:
    graph = build_graph("iterkey", llm=served(role_fake(verdicts=[0.8])), retriever=module_store)
    out = graph.invoke({"question": Q}, context={"validation_threshold": 0.9, "max_iterations": 3})
    assert out["iterations"] == 3 and out["stop_reason"] == "max_iterations"
    assert {d["threshold"] for d in out["decisions"]} == {0.9}
    assert Context().validation_threshold == 0.5  # the paper: the more probable option
    with pytest.raises(InputError):
        build_graph("iterkey", llm=role_fake(), retriever=module_store, validation_threshold=-0.1)


def test_calibration_run_never_stops_early_and_records_every_rounds_answer(
    module_store: Store,
) -> None:
    p_true = [0.2, 0.95, 0.3, 0.99, 0.1]
    fake = role_fake(answers=["a1", "a2", "a3", "a4", "a5"], verdicts=p_true)
    out = run(module_store, fake, calibration=True)
    assert out["iterations"] == 5 and out["stop_reason"] == "max_iterations"
    assert Counter(kinds(fake)) == {"keywords": 1, "answer": 5, "validate": 5, "regenerate": 4}
    decisions = out["decisions"]
    assert [d["round"] for d in decisions] == [1, 2, 3, 4, 5]
    assert [d["answer"] for d in decisions] == ["a1", "a2", "a3", "a4", "a5"]
    assert [d["p"] for d in decisions] == pytest.approx(p_true, abs=1e-6)
    assert {d["threshold"] for d in decisions} == {0.5}
    assert out["verdicts"] == [False, True, False, True, False]
    # the run's answer is what the configured threshold would give: the first accepted round
    assert out["first_true_iteration"] == 2 and out["answer"] == "a2"

    # replaying a threshold over the records gives each threshold's answer without a model
    def replay(t: float) -> str:
        return str(next((d["answer"] for d in decisions if d["p"] >= t), decisions[-1]["answer"]))

    assert (replay(0.5), replay(0.97), replay(0.999)) == ("a2", "a4", "a5")


def test_calibration_run_without_logprobs_or_with_an_empty_answer(module_store: Store) -> None:
    out = run(
        module_store, role_fake(answers=["", "a2", "a3"], verdicts=["True"]), calibration=True,
        max_iterations=3, endpoint_logprobs=False,
    )  # fmt: skip
    assert out["iterations"] == 3 and out["stop_reason"] == "max_iterations"
    assert [(d["answer"], d["p"], d["path"]) for d in out["decisions"]] == [
        ("", None, "default"),
        ("a2", None, "parsed-no-logprobs"),
        ("a3", None, "parsed-no-logprobs"),
    ]


def test_cot_variant_is_decided_on_its_conclusion_but_never_stops_a_calibration_run(
    module_store: Store,
) -> None:
    conclusions = ["Chain of thought: yes.\nConclusion: True"]
    out = run(module_store, role_fake(cot_verdicts=conclusions), cot=True)
    assert out["iterations"] == 1 and out["stop_reason"] == "validated"
    (decision,) = out["decisions"]
    assert (decision["decision"], decision["p"], decision["path"]) == ("accept", None, "parsed")
    assert decision["threshold"] is None and decision["answer"] == "a1"
    calib = run(module_store, role_fake(cot_verdicts=conclusions), cot=True, calibration=True)
    assert calib["iterations"] == 5 and calib["stop_reason"] == "max_iterations"
    assert calib["verdicts"] == [True] * 5 and calib["answer"] == "a1"


# -- parsing -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('["a", "b", "c"]', ["a", "b", "c"]),
        ('Here are keywords: ["a","b"]', ["a", "b"]),
        ("['a', 'b']", ["a", "b"]),
        ('["a", "b", "c', ["a", "b"]),  # truncated by the 50-token cap: drop the open item
        ('["A", "a", " b "]', ["A", "b"]),
        ("a, b, c", ["a", "b", "c"]),
        ("", []),
        ('```json\n["Moon landing", "Apollo 11"]\n```', ["Moon landing", "Apollo 11"]),
        ("Keywords:\n1. Apollo 11\n2. lunar module (LM)", ["Apollo 11", "lunar module (LM)"]),
        (f'["{"x" * 101}", "ok"]', ["ok"]),
    ],
)
def test_keyword_parser(raw: str, expected: list[str]) -> None:
    assert parse_keywords(raw) == expected


def test_keyword_parser_takes_the_last_list_of_cot_replies() -> None:
    raw = 'The old ["Moon"] is too general.\nRefined Keywords: ["Apollo 11", "Eagle"]'
    assert parse_keywords(raw, last=True) == ["Apollo 11", "Eagle"]
    assert parse_keywords(raw) == ["Moon"]


def test_unparseable_regeneration_keeps_the_previous_keywords(module_store: Store) -> None:
    fake = role_fake(keywords=['["Moon", "landing"]'], regen=["   "], verdicts=["False", "True"])
    out = run(module_store, fake)
    assert [r["keywords"] for r in out["history"]] == [["Moon", "landing"], ["Moon", "landing"]]
    (failure,) = out["parse_failures"]
    assert failure["node"] == "regenerate_keywords" and failure["iteration"] == 2
    assert failure["fallback_used"] == "previous_keywords"


def test_answer_is_cleaned_and_the_raw_text_kept(module_store: Store) -> None:
    fake = role_fake(answers=["Answer: Eagle"], verdicts=["True"])
    out = run(module_store, fake)
    assert out["answer"] == "Eagle"
    assert out["history"][0]["raw_answer_output"] == "Answer: Eagle"
    assert "Answer: Eagle" in prompts_of(fake, "validate")[0]  # the cleaned answer is judged
    assert "Answer: Answer:" not in prompts_of(fake, "validate")[0]


def test_an_empty_answer_skips_the_validator(module_store: Store) -> None:
    fake = role_fake(answers=["", "Eagle"], verdicts=["True"])
    out = run(module_store, fake)
    assert kinds(fake) == ["keywords", "answer", "regenerate", "answer", "validate"]
    first = out["history"][0]
    assert first["verdict"] is False and first["verdict_scores"]["method"] == "default"
    assert out["answer"] == "Eagle" and out["iterations"] == 2
    assert any(t.get("reason") == "empty_answer" for t in out["trace"])


# -- limits and config ---------------------------------------------------------------------
def test_each_call_kind_has_its_token_cap_at_temperature_0(module_store: Store) -> None:
    fake = role_fake(verdicts=["False", "True"])
    run(module_store, fake, endpoint_logprobs=False)
    caps = {kind_of(c): c["kwargs"]["max_tokens"] for c in fake.calls}
    assert caps == {"keywords": 50, "answer": 50, "validate": 30, "regenerate": 50}
    with_logprobs = role_fake(verdicts=["False", "True"])
    run(module_store, with_logprobs)  # the forced choice reads the first tokens only
    assert {c["kwargs"]["max_tokens"] for c in with_logprobs.calls if kind_of(c) == "validate"} == {
        3
    }
    assert openai_llm("http://127.0.0.1:9/v1", "m").chat.temperature == 0.0  # type: ignore[attr-defined]


def test_keyword_and_validator_roles_use_their_own_llms(module_store: Store) -> None:
    main = role_fake()
    keyword_llm = role_fake(keywords=['["Moon"]'], regen=['["Apollo 11"]'])
    validator = role_fake(verdicts=["False", "True"])
    graph = build_graph(
        "iterkey", llm=main, retriever=module_store, keywords_llm=keyword_llm,
        validator_llm=served(validator),
    )  # fmt: skip
    out = graph.invoke({"question": Q})
    assert kinds(main) == ["answer", "answer"]
    assert kinds(keyword_llm) == ["keywords", "regenerate"]
    assert kinds(validator) == ["validate", "validate"]
    assert out["queries"] == [f"{Q} Moon", f"{Q} Apollo 11"] and out["stop_reason"] == "validated"


def test_only_the_validator_llm_swapped(module_store: Store) -> None:
    main = role_fake()
    validator = role_fake(verdicts=["True"])
    build_graph(
        "iterkey", llm=main, retriever=module_store, validator_llm=served(validator)
    ).invoke({"question": Q})
    assert kinds(main) == ["keywords", "answer"] and kinds(validator) == ["validate"]


def test_doc_by_doc_regeneration_asks_once_per_passage_and_merges(module_store: Store) -> None:
    per_doc = ['["Apollo 11", "Moon"]', '["moon", "Eagle"]', '["Aldrin"]']
    fake = role_fake(keywords=['["Moon"]'], regen=per_doc, verdicts=["False", "True"])
    out = run(module_store, fake, regeneration_mode="doc_by_doc")
    calls = prompts_of(fake, "regenerate_doc")
    first_docs = out["history"][0]["doc_ids"]
    assert len(calls) == len(first_docs) == 3 and "regenerate" not in kinds(fake)
    for prompt, doc_id in zip(calls, first_docs, strict=True):
        assert TEXT[doc_id] in prompt
        assert sum(TEXT[d] in prompt for d in TEXT) == 1  # exactly one passage per call
    assert out["history"][1]["keywords"] == ["Apollo 11", "Moon", "Eagle", "Aldrin"]


def test_cot_variant_validates_and_regenerates_with_reasoning(module_store: Store) -> None:
    fake = role_fake(
        cot_verdicts=[
            "Chain of thought: the passage names Saturn V, which is True of the rocket.\nConclusion: False",
            "Chain of thought: document [1] names Eagle.\nConclusion: True",
        ],
        regen=['Too general. Old: ["Moon"]. Refined Keywords: ["Apollo 11", "lunar module"]'],
    )
    out = run(module_store, fake, cot=True)
    assert kinds(fake) == [
        "keywords",
        "answer",
        "validate_cot",
        "regenerate_cot",
        "answer",
        "validate_cot",
    ]
    assert out["verdicts"] == [False, True]
    assert out["history"][1]["keywords"] == ["Apollo 11", "lunar module"]
    caps = {kind_of(c): c["kwargs"]["max_tokens"] for c in fake.calls}
    assert caps["validate_cot"] == 256 and caps["regenerate_cot"] == 256
    assert cot_verdict("Chain of thought: ... Conclusion: False") is False
    assert cot_verdict("Conclusion: **True**") is True
    assert cot_verdict("no conclusion here") is None


def test_no_recursion_limit_at_the_default_bound_or_with_run_time_overrides(
    module_store: Store,
) -> None:
    graph = build_graph("iterkey", llm=role_fake(verdicts=["False"]), retriever=module_store)
    assert graph.invoke({"question": Q})["iterations"] == 5
    graph = build_graph("iterkey", llm=role_fake(verdicts=["False"]), retriever=module_store)
    out = graph.invoke({"question": Q}, context={"max_iterations": 12})
    assert out["iterations"] == 12 and out["stop_reason"] == "max_iterations"
    graph = build_graph("iterkey", llm=role_fake(verdicts=["False"]), retriever=module_store)
    assert graph.invoke({"question": Q}, context={"max_iterations": 2})["iterations"] == 2
    # the graph carries a limit that fits the largest N a run may set (4 steps a round)
    assert graph.config is not None and graph.config["recursion_limit"] >= 4 * 25 + 10
    with pytest.raises(InputError, match="max_iterations must be at most 25"):
        build_graph("iterkey", llm=role_fake(), retriever=module_store, max_iterations=3000)


# -- trace ---------------------------------------------------------------------------------
def test_history_records_every_round(module_store: Store) -> None:
    fake = role_fake(
        keywords=['["Moon", "landing"]'],
        regen=['["moon", "Apollo 11"]', '["Apollo 11", "Saturn"]'],
        verdicts=["False", "False", "True"],
    )
    out = run(module_store, fake)
    history = out["history"]
    assert [r["iteration"] for r in history] == [1, 2, 3]
    assert [r["new_keywords"] for r in history] == [["Moon", "landing"], ["Apollo 11"], ["Saturn"]]
    seen: set[str] = set()
    for record in history:
        assert record["new_doc_ids"] == [d for d in record["doc_ids"] if d not in seen]
        seen |= set(record["doc_ids"])
        assert len(record["doc_scores"]) == len(record["doc_ids"])
        assert record["verdict_scores"]["method"] == "logprobs"
        assert record["raw_keyword_output"] and record["raw_answer_output"]
    assert new_per_step(history)["new_keywords"] == [2, 1, 1]
    # bookkeeping never reaches a prompt: the P2/P3 prompts of round 3 hold only D_3's passages
    for prompt in prompts_of(fake, "answer")[2:] + prompts_of(fake, "validate")[2:]:
        assert not any(TEXT[d] in prompt for d in seen - set(history[2]["doc_ids"]))


def test_the_same_replies_give_the_same_history(module_store: Store) -> None:
    def once() -> list[Any]:
        return list(run(module_store, role_fake(verdicts=["False", "False", "True"]))["history"])

    assert once() == once()


# -- helpers, wiring -----------------------------------------------------------------------
def test_majority_and_final_round_helpers() -> None:
    assert majority_index(["x", "y", "x", "y", "z"]) == 3
    assert majority_index(["The Eagle.", "eagle", "Columbia"]) == 1
    assert majority_index(["", ""]) == 1
    assert final_round([], None) is None
    answers = ["x", "y", "x"]
    assert fallback_index(answers, [0.2, 0.7, 0.4], "confident") == 1
    assert fallback_index(answers, [None, 0.1, None], "confident") == 1  # no p ranks lowest
    assert fallback_index(answers, [None, None, None], "confident") == 2  # none: the last
    assert fallback_index(answers, [0.9, 0.1, 0.1], "first") == 0
    assert fallback_index(answers, [0.9, 0.1, 0.1], "majority") == 2
    assert fallback_index(answers, [0.9, 0.1, 0.1], "last") == 2
    assert normalize_answer("The  Eagle.") == "eagle"


def test_graph_shape_and_context_descriptions() -> None:
    mermaid = build_graph("iterkey", llm=role_fake()).get_graph().draw_mermaid()
    for edge in (
        "__start__ --> gate",
        "gate -.-> generate_keywords",
        "gate -.-> short_answer",
        "finalize --> reader",
        "regenerate_keywords --> retrieve",
        "validate_answer -.-> finalize",
        "validate_answer -.-> regenerate_keywords",
    ):
        assert edge in mermaid
    import dataclasses

    fields = dataclasses.fields(Context)
    assert all(f.metadata.get("description") for f in fields)
    defaults = Context()
    assert (defaults.max_iterations, defaults.top_k, defaults.retrieval_mode) == (5, 3, "bm25")
    assert (
        defaults.keywords_max_tokens,
        defaults.answer_max_tokens,
        defaults.validate_max_tokens,
    ) == (50, 50, 30)


def test_progress_events(module_store: Store) -> None:
    graph = build_graph(
        "iterkey", llm=served(role_fake(verdicts=["False", "True"])), retriever=module_store
    )
    events: list[dict[str, Any]] = [
        payload
        for mode, payload in graph.stream({"question": Q}, stream_mode=["custom", "updates"])
        if mode == "custom" and isinstance(payload, dict)
    ]
    assert {"round": 1, "keywords": ["Moon", "landing"]} in events
    assert any(e.get("round") == 2 and e.get("query") == f"{Q} zeta2 Paris" for e in events)
    assert [e["verdict"] for e in events if "verdict" in e] == [False, True]


def test_any_langchain_retriever_works(module_store: Store) -> None:
    lc = GapragRetriever(store=module_store, k=3, mode="bm25")
    out = build_graph("iterkey", llm=served(role_fake(verdicts=["True"])), retriever=lc).invoke(
        {"question": Q}
    )
    assert out["stop_reason"] == "validated" and 0 < len(out["evidence"]) <= 3
    assert out["evidence"][0]["source"] == "retriever"


@pytest.mark.parametrize(
    "option",
    [
        {"fallback_policy": "vote"},
        {"regeneration_mode": "docs"},
        {"retrieval_mode": "sparse"},
        {"max_iterations": 0},
    ],
)
def test_invalid_settings_are_clear_errors(module_store: Store, option: dict[str, Any]) -> None:
    with pytest.raises(InputError) as err:
        build_graph("iterkey", llm=role_fake(), retriever=module_store, **option)
    assert next(iter(option)) in str(err.value)
    graph = build_graph("iterkey", llm=role_fake(), retriever=module_store)
    with pytest.raises(InputError):
        graph.invoke({"question": Q}, context=option)


# -- the module-level layout: threads, async, decisions, shown passages ---------------------
def test_a_second_question_on_a_thread_starts_clean(module_store: Store) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    fake = role_fake(answers=("Apollo 11", "Eagle"), verdicts=("True",))
    graph = build_graph(
        "iterkey", llm=served(fake), retriever=module_store, checkpointer=InMemorySaver()
    )
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    first = graph.invoke({"question": Q}, config)
    second = graph.invoke({"question": Q_NO_HITS}, config)
    assert (first["answer"], second["answer"]) == ("Apollo 11", "Eagle")
    assert second["stop_reason"] == "validated" and second["iterations"] == 1
    assert second["queries"] == [f"{Q_NO_HITS} Moon landing"]
    assert len(second["history"]) == 1 and second["verdicts"] == [True]
    assert second["usage"]["llm_calls"] == 3 and second["usage"]["retrieval_calls"] == 1
    assert all(e["round"] == 1 for e in second["evidence"])


def test_ainvoke_gives_the_same_output(module_store: Store) -> None:
    import asyncio

    sync = run(module_store, role_fake(verdicts=["False", "True"]))
    graph = build_graph(
        "iterkey", llm=served(role_fake(verdicts=["False", "True"])), retriever=module_store
    )
    asyn = dict(asyncio.run(graph.ainvoke({"question": Q})))
    for out in (sync, asyn):
        out["usage"].pop("wall_s")
    assert sync == asyn


def test_validation_decisions_are_recorded_with_their_probability(module_store: Store) -> None:
    fake = role_fake(verdicts=["True"])
    fake.logprobs = {"True": -0.2, "False": -1.8}
    out = run(module_store, LLM(fake, supports_logprobs=True))
    (decision,) = out["decisions"]
    assert decision["node"] == "validate_answer" and decision["round"] == 1
    assert decision["decision"] == "accept" and decision["path"] == "logprobs"
    assert decision["threshold"] == 0.5
    p_true, p_false = math.exp(-0.2), math.exp(-1.8)
    assert decision["p"] == pytest.approx(p_true / (p_true + p_false), rel=1e-5)
    assert decision["answer"] == "a1"
    rejected = run(module_store, role_fake(verdicts=["False"]), max_iterations=2)["decisions"]
    assert [(d["round"], d["decision"], d["p"], d["answer"]) for d in rejected] == [
        (1, "reject", pytest.approx(0.1), "a1"),
        (2, "reject", pytest.approx(0.1), "a2"),
    ]


def test_only_the_shown_passages_count_as_shown(module_store: Store) -> None:
    out = run(module_store, role_fake(verdicts=["True"]), top_k=2, recall_k=5)
    shown = [d["id"] for d in out["evidence"]]
    assert out["shown_ids"] == shown and len(shown) == 2
    assert out["retrieved_ids"][:2] == shown and len(out["retrieved_ids"]) > 2
