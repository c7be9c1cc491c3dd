"""RAG-EF's evaluation ladder (lab.ladder and benchmarks/rag_ef_n50.py): the oracle and
expert stores, reworded expert questions, the S/E/O ladder and its resumable script. Fake LLM
(ScriptedChatModel) and HashingEmbedder only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage

from gaprag.datasets import load_dataset
from gaprag.graphs.rag_ef.synth import chunk_text
from gaprag.llm.client import LLM
from gaprag.metrics import normalize_answer
from gaprag.stores import HashingEmbedder
from gaprag.stores.pairs import PairStore
from gaprag.testing import ScriptedChatModel, scripted
from lab.ladder import (
    REWRITE_TEMPERATURE,
    Paraphrase,
    build_expert,
    build_oracle,
    evaluate_ladder,
    expert_divergence,
    golden_chunk,
    keeps_names,
    names_and_numbers,
    paraphrase,
)
from tests.methods.rag_ef import (
    TOPICS,
    fake,
)

# -- feedback behaviour -----------------------------------------------------
ALADIN_Q = "Who was known by the stage name Aladin and worked as a management consultant?"


ALADIN_A = "Eanasul Fateh"


ALADIN_C = "Eanasul Fateh, known by his stage name Aladin, is a magician and management consultant."


# -- the S / E / O ladder ---------------------------------------------------------------------
def _dataset(tmp_path: Path) -> Path:
    rows = [
        {"id": "q1", "question": ALADIN_Q, "answers": [ALADIN_A], "supporting": ["p1"],
         "paragraphs": [{"id": "p1", "title": "Aladin", "text": ALADIN_C},
                        {"id": "p9", "title": "Filler", "text": "Unrelated filler text about weather."}]},
        {"id": "q2", "question": "Which river flows through the city of Cairo?", "answers": ["Nile"],
         "supporting": ["p2"], "paragraphs": [{"id": "p2", "title": "Nile", "text": TOPICS[2][2]}]},
        {"id": "q3", "question": "Who painted the famous Mona Lisa portrait?", "answers": ["Leonardo da Vinci"],
         "supporting": ["p3"], "paragraphs": [{"id": "p3", "title": "Mona Lisa", "text": TOPICS[3][2]}]},
    ]  # fmt: skip
    path = tmp_path / "toy.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


PARAPHRASES = {
    ALADIN_Q: "Which management consultant performed under the stage name Aladin?",
    "Which river flows through the city of Cairo?": "Cairo lies on which river flowing through it?",
    "Who painted the famous Mona Lisa portrait?": "The famous Mona Lisa portrait was painted by whom?",
}


def _expert_llm() -> ScriptedChatModel:
    def para(messages: list[BaseMessage]) -> str:
        return PARAPHRASES[str(messages[-1].content).rsplit("Question: ", 1)[1].strip()]

    def expert(messages: list[BaseMessage]) -> str:
        doc = str(messages[-1].content)
        return next(a for a in (ALADIN_A, "Nile", "Leonardo da Vinci") if a in doc)

    return ScriptedChatModel(rules=[("Rewrite the question", para), ("Using the document", expert)])


def test_oracle_and_expert_builders(pair_store: PairStore, tmp_path: Path) -> None:
    data = load_dataset(_dataset(tmp_path))
    assert golden_chunk(data.examples[0]) == data.examples[0].paragraphs[0]
    assert build_oracle(pair_store, data.examples) == 3
    oracle = pair_store.list(source="oracle")
    assert [(p["question"], p["answer"]) for p in oracle] == [
        (e.question, e.answers[0]) for e in data.examples
    ]
    assert [p["chunk_id"] for p in oracle] == ["p1", "p2", "p3"]
    assert build_expert(pair_store, data.examples, LLM(_expert_llm()), progress=False) == 3
    expert = pair_store.list(source="expert")
    assert [p["question"] for p in expert] == list(PARAPHRASES.values())
    assert all(
        normalize_answer(p["question"]) != normalize_answer(e.question)
        for p, e in zip(expert, data.examples, strict=True)
    )
    assert [p["chunk"] for p in expert] == [p["chunk"] for p in oracle]
    assert (
        build_expert(pair_store, data.examples, LLM(_expert_llm()), progress=False) == 0
    )  # resumable
    div = expert_divergence(pair_store)
    assert div["pairs"] == 3 and div["identical"] == 0
    # word-overlap F1 0.5, 0.533 and 0.714 (the Mona Lisa rewording keeps 5 of 7 words)
    assert div["mean_word_overlap_f1"] == 0.583
    assert div["near_copies"] == 0


def test_expert_divergence_flags_copied_questions(pair_store: PairStore) -> None:
    q = "Who painted the famous Mona Lisa portrait?"
    pair_store.add(q.upper(), "Leonardo", "chunk", source="expert", meta={"original_question": q})
    pair_store.add("Which artist made it?", "Leonardo", "chunk 2", source="expert",
              meta={"original_question": q})  # fmt: skip
    pair_store.add("no origin", "x", "chunk 3", source="expert")
    div = expert_divergence(pair_store)
    assert div["pairs"] == 2 and div["identical"] == 1 and div["near_copies"] == 1
    assert div["mean_word_overlap_f1"] == 0.5


OPERA_Q = "Which opera has more acts, Parsifal or Manon by Massenet?"


def test_names_and_numbers_a_rewording_must_keep() -> None:
    assert names_and_numbers("Which magazine was published first, Woman's Day or The Lady?") == [
        "womans", "day", "lady",
    ]  # fmt: skip
    assert names_and_numbers("who won the 1998 final?") == ["1998"]
    assert keeps_names("Which of Massenet's operas, Parsifal or Manon, has more acts?", OPERA_Q)
    assert not keeps_names("In what opera by Massenet has more acts?", OPERA_Q)  # no Parsifal


def _sampling(chat: ScriptedChatModel) -> list[tuple[Any, Any]]:
    return [(c["kwargs"].get("temperature"), c["kwargs"].get("seed")) for c in chat.calls]


def test_paraphrase_samples_rewrites_until_one_is_a_real_rewording() -> None:
    chat = scripted(
        OPERA_Q,  # greedy: the question itself
        OPERA_Q,  # the "different words" retry: the same again
        "In what opera by Massenet has more acts?",  # seed 1: drops Parsifal
        "Tell me whether Parsifal or Massenet's Manon has the larger number of acts.",  # seed 2
        "Between Parsifal and Massenet's Manon, which has the larger number of acts?",  # seed 3
        "never asked",
    )
    out = paraphrase(LLM(chat), OPERA_Q, rewrites=4)
    assert out == Paraphrase(
        "Between Parsifal and Massenet's Manon, which has the larger number of acts?", 3
    )
    t = REWRITE_TEMPERATURE
    assert _sampling(chat) == [(None, None), (None, None), (t, 1), (t, 2), (t, 3)]


def test_paraphrase_keeps_the_greedy_rewrite_when_it_rewords_or_nothing_better_comes() -> None:
    reworded = "Between Parsifal and Massenet's Manon, which has the larger number of acts?"
    chat = scripted(reworded)
    assert paraphrase(LLM(chat), OPERA_Q, rewrites=4) == Paraphrase(reworded)
    assert len(chat.calls) == 1  # a real rewording: nothing sampled

    near = "Which opera has more acts, Parsifal or Manon of Massenet?"  # overlap 0.9
    chat = scripted(near, default=OPERA_Q)  # every sampled rewrite a copy
    assert paraphrase(LLM(chat), OPERA_Q, rewrites=2) == Paraphrase(near)
    assert len(chat.calls) == 3
    chat = scripted(near)
    assert paraphrase(LLM(chat), OPERA_Q, rewrites=0) == Paraphrase(near)  # as E was first built
    assert len(chat.calls) == 1


def test_build_expert_with_rewrites_records_the_seed(pair_store: PairStore, tmp_path: Path) -> None:
    data = load_dataset(_dataset(tmp_path))
    mona = "Who painted the famous Mona Lisa portrait?"
    sampled = "Which artist created the Mona Lisa?"

    chat = _expert_llm()
    llm = LLM(chat)
    seeds = iter([None, None, 1])  # the Mona Lisa question: greedy, retry, then seed 1

    def rule(messages: list[BaseMessage]) -> str:
        question = str(messages[0].content).rsplit("Question: ", 1)[1].strip()
        if question != mona:
            return PARAPHRASES[question]
        return sampled if next(seeds) == 1 else mona

    chat.rules[0] = ("Rewrite the question", rule)
    assert build_expert(pair_store, data.examples, llm, rewrites=2, progress=False) == 3
    meta = {m["origin_id"]: m for m in pair_store.metadata(source="expert").values()}
    assert {k: m["rewrite_seed"] for k, m in meta.items()} == {"q1": None, "q2": None, "q3": 1}
    assert sampled in [p["question"] for p in pair_store.list(source="expert")]
    assert expert_divergence(pair_store)["near_copies"] == 0


def test_ladder_is_monotone_with_a_copy_mode_generator(
    pair_store: PairStore, tmp_path: Path
) -> None:
    data = load_dataset(_dataset(tmp_path))
    for ex in data.examples:  # S: pairs about the right chunks, asking other questions
        for para in ex.paragraphs:
            pair_store.add(f"What is described in the {para['title']} passage?", "a description",
                      chunk_text(para), source="synthetic", chunk_id=para["id"])  # fmt: skip
    build_expert(pair_store, data.examples, LLM(_expert_llm()), progress=False)
    build_oracle(pair_store, data.examples)
    res = evaluate_ladder(pair_store, data, llm=fake(), out=tmp_path / "ladder.jsonl")
    assert res["S"]["em"] <= res["S+E"]["em"] <= res["S+E+O"]["em"]
    assert res["S+E+O"]["em"] >= 95.0 and res["S"]["em"] < res["S+E+O"]["em"]
    assert "upper bound" in res["S+E+O"]["label"]
    assert len((tmp_path / "ladder.jsonl").read_text().splitlines()) == 9


# -- the n = 50 ladder script: building resumes from the committed journal ---------------------
def test_ladder_script_builds_s_and_e_and_resumes_from_its_journal(tmp_path: Path) -> None:
    from tests.scripts import load_script

    script = load_script("benchmarks/rag_ef_n50.py")
    data = _dataset(tmp_path)
    calls: list[str] = []

    def qa(messages: list[BaseMessage]) -> str:
        calls.append("qa")
        return "Q: What does the passage describe? A: its topic"

    expert = _expert_llm()
    model = ScriptedChatModel(rules=[("Write question-and-answer pairs", qa), *expert.rules])
    out = tmp_path / "out"
    out.mkdir()
    store = script.build(data, out, LLM(model), limit=3, batch=2, embedder=HashingEmbedder())
    assert len(calls) == 4  # one call per paragraph of the 3 questions (p1, p9, p2, p3)
    assert store.count(source="synthetic") == 4 and store.count(source="expert") == 3
    assert script.expert_divergence(store)["identical"] == 0
    store.close()
    # a new machine: only the journal came along; nothing is asked again
    (out / "pairs.sqlite").unlink()
    again = script.build(data, out, LLM(model), limit=3, batch=2, embedder=HashingEmbedder())
    assert len(calls) == 4
    assert again.count(source="synthetic") == 4 and again.count(source="expert") == 3
    assert {p["chunk_id"] for p in again.list(source="synthetic")} == {"p1", "p9", "p2", "p3"}
    assert script.expert_divergence(again)["pairs"] == 3  # the originals came back too
    again.close()
    # S with two calls in flight: the same pairs, in the same order
    out2 = tmp_path / "out2"
    out2.mkdir()
    two = script.build(data, out2, LLM(model), limit=3, batch=2, embedder=HashingEmbedder(),
                       concurrency=2)  # fmt: skip
    assert len(calls) == 8
    assert [p["chunk_id"] for p in two.list(source="synthetic")] == ["p1", "p9", "p2", "p3"]


def test_ladder_script_builds_a_reworded_e_beside_s(tmp_path: Path) -> None:
    from tests.scripts import load_script

    script = load_script("benchmarks/rag_ef_n50.py")
    data = _dataset(tmp_path)
    mona = "Who painted the famous Mona Lisa portrait?"
    sampled = "Which artist created the Mona Lisa?"
    asked: list[str] = []

    def rewrite(messages: list[BaseMessage]) -> str:
        question = str(messages[0].content).rsplit("Question: ", 1)[1].strip()
        if question != mona:
            return PARAPHRASES[question]
        asked.append(question)
        # E: greedy and retry copy it; E_r: greedy and retry copy it, the seed-1 rewrite rewords
        return sampled if len(asked) == 5 else mona

    expert = _expert_llm()
    model = ScriptedChatModel(
        rules=[
            ("Write question-and-answer pairs", "Q: What does the passage describe? A: its topic"),
            ("Rewrite the question", rewrite),
            expert.rules[1],
        ]
    )
    out = tmp_path / "out"
    out.mkdir()
    llm, embedder = LLM(model), HashingEmbedder()
    script.build(data, out, llm, limit=3, batch=2, embedder=embedder).close()
    n_calls = len(model.calls)
    reworded = script.build_reworded(data, out, llm, limit=3, rewrites=2, embedder=embedder)
    assert reworded.count(source="synthetic") == 4  # S came from the journal, not the model
    assert not any("Write question-and-answer" in p for p in model.prompts()[n_calls:])
    assert sampled in [p["question"] for p in reworded.list(source="expert")]
    assert script.expert_divergence(reworded)["near_copies"] == 0
    reworded.close()
    with_copy = script.build(data, out, llm, limit=3, batch=2, embedder=embedder)
    assert script.expert_divergence(with_copy)["identical"] == 1  # E as first built: untouched
    with_copy.close()
    # a new machine: both stores rebuilt from the journals; nothing is asked again
    n_calls = len(model.calls)
    (out / "pairs_reworded.sqlite").unlink()
    again = script.build_reworded(data, out, llm, limit=3, rewrites=2, embedder=embedder)
    assert len(model.calls) == n_calls
    assert again.count(source="synthetic") == 4 and again.count(source="expert") == 3
    assert sampled in [p["question"] for p in again.list(source="expert")]
    again.close()


def test_ladder_script_runs_every_rag_ef_variant_in_the_profile_named(tmp_path: Path) -> None:
    from tests.scripts import load_script

    script = load_script("benchmarks/rag_ef_n50.py")
    paper = script.ladder_variants(tmp_path, reworded=True, profile="paper")
    assert set(paper) == {"rag_ef_S", "rag_ef_SE", "rag_ef_standard", "rag_ef_SE_reworded"}
    assert all(m == "rag_ef" and o["profile"] == "paper" for m, o in paper.values())
    assert paper["rag_ef_SE_reworded"][1]["feedback_store"].endswith("pairs_reworded.sqlite")
    own = script.ladder_variants(tmp_path, reworded=False, profile=None)
    assert "rag_ef_SE_reworded" not in own
    assert not any("profile" in o for _, o in own.values())
    # the variant's options are what `gaprag eval` takes: the profile is the build's
    from gaprag.options import options_for

    opts = options_for("rag_ef", {"rag_ef": {"profile": "paper", "sources": "synthetic"}})
    assert opts["profile"] == "paper" and opts["sources"] == "synthetic"
