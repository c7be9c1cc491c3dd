"""RFM-RAG's test corpus (the Polish-Russian War case), its scripted model and judge."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from langchain_core.messages import BaseMessage

from gaprag import build_graph
from gaprag.graphs.rfm_rag.feedback_model.model import FeedbackResult
from gaprag.llm.client import LLM
from gaprag.stores import Store
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
    judge: str = "No",
    answer: str = "Żuławski's mother is Małgorzata Braunek. So the answer is Małgorzata Braunek.",
    logprobs: dict[str, float] | None = None,
) -> ScriptedChatModel:
    replies: dict[str, Any] = {
        "structure": structure,
        "extract": extract,
        "fills": fills,
        "judge": judge,
        "answer": answer,
    }
    return ScriptedChatModel(rules=[(KINDS[k], replies[k]) for k in KINDS], logprobs=logprobs)


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


class ProbJudge:
    """A trained-model stand-in: always the same probability that the pool is sufficient."""

    def __init__(self, p: float | None, verdict: bool = False) -> None:
        self.p = p
        self.verdict = verdict

    def judge(
        self, question: str, entities: list[str], sentences: list[str], s_f: float
    ) -> FeedbackResult:
        return FeedbackResult(self.verdict, self.p)


def yes_logprobs(p_yes: float) -> dict[str, float]:
    """The judge's first-token logprobs for a "Yes" of probability ``p_yes``."""
    return {"Yes": math.log(p_yes), "No": math.log(1 - p_yes)}


def make_graph(
    fake: ScriptedChatModel | LLM,
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
