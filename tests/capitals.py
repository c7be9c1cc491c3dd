"""A five-question evaluation set (capitals, Hamlet), its oracle model and runs over it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage

from gaprag.eval import evaluate
from gaprag.graphs import METHODS
from gaprag.stores import HashingEmbedder
from gaprag.testing import ScriptedChatModel
from tests.methods import contract

PARAS = {
    "fr": ("France", "Paris is the capital and largest city of France."),
    "de": ("Germany", "Berlin is the capital of Germany and its largest city."),
    "it": ("Italy", "Rome is the capital city of Italy."),
    "es": ("Spain", "Madrid is the capital of Spain."),
    "pt": ("Portugal", "Lisbon is the capital of Portugal."),
    "hamlet": ("Hamlet", "Hamlet is a tragedy written by William Shakespeare."),
}
QUESTIONS = [
    ("q1", "What is the capital of France?", ["Paris"], ["fr"]),
    ("q2", "What is the capital of Germany?", ["Berlin"], ["de"]),
    ("q3", "What is the capital of Italy?", ["Rome"], ["it"]),
    ("q4", "What is the capital of Spain?", ["Madrid"], ["es"]),
    ("q5", "Who wrote Hamlet?", ["William Shakespeare", "Shakespeare"], ["hamlet", "pt"]),
]
ANSWERS = {
    "France": "Paris",
    "Germany": "Berlin",
    "Italy": "Milan",
    "Spain": "Madrid",
    "Hamlet": "Shakespeare",
}


def record_of(qid: str, question: str, answers: list[str], supporting: list[str]) -> dict[str, Any]:
    return {
        "id": qid,
        "question": question,
        "answers": answers,
        "supporting": supporting,
        "type": "test",
        "paragraphs": [{"id": p, "title": PARAS[p][0], "text": PARAS[p][1]} for p in PARAS],
    }


def oracle_reply(messages: list[BaseMessage]) -> str:
    last = str(messages[-1].content)
    question = last.rsplit("Question:", 1)[-1]
    for key, answer in ANSWERS.items():
        if key in question:
            return answer
    return "unknown"


def oracle() -> ScriptedChatModel:
    return ScriptedChatModel(default=oracle_reply)


def run(dataset: Path, out: Path, **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("methods", ["standard_rag"])
    kwargs.setdefault("llm", oracle())
    return evaluate(dataset=dataset, out=out, embedder=HashingEmbedder(), progress=False, **kwargs)


def sample_reply(messages: list[BaseMessage]) -> str:
    """standard_rag answers as the oracle (Milan for Italy); the contract graph, whose prompt
    starts "Answer briefly.", gets Italy right and Germany wrong: one win, one loss."""
    text = str(messages[-1].content)
    question = text.rsplit("Question:", 1)[-1]
    if text.startswith("Answer briefly."):
        if "Italy" in question:
            return "Rome"
        if "Germany" in question:
            return "Munich </script><script>alert(1)</script>"
    return oracle_reply(messages)


def sample_run(tmp_path: Path) -> Path:
    """A run of standard_rag, the fake ``contract`` graph and a variant of it, 5 questions."""
    METHODS["contract"] = lambda: contract
    data = tmp_path / "capitals.jsonl"
    data.write_text("\n".join(json.dumps(record_of(*q)) for q in QUESTIONS) + "\n")
    out = tmp_path / "run"
    run(
        data, out, methods=["standard_rag", "contract"], variants=["shown3=contract:shown=3"],
        llm=ScriptedChatModel(default=sample_reply),
    )  # fmt: skip
    return out
