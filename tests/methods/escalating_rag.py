"""escalating_rag's test scenario: plain RAG and IRCoT scripted with their answers'
probabilities; every other call (the second loop's) answers "Marseille"."""

from __future__ import annotations

from gaprag.testing import ScriptedChatModel

Q = "What is the capital of France?"
PLAIN = "Use the passages below to answer the question."  # plain RAG's answer prompt
REASON = "Next sentence:"  # IRCoT's reasoning prompt
SURE = [[("Paris", -0.01)]]
UNSURE = [[("Paris", -1.6), ("Lyon", -1.7)], [("ian", -2.4), (" city", -2.5)]]  # p = e^-2


def cot(answer: str, logprob: float) -> list[list[tuple[str, float]]]:
    """IRCoT's sentence "So the answer is: <answer>." with ``logprob`` on the answer token."""
    lead = [("So", -0.01), (" the", -0.01), (" answer", -0.01), (" is", -0.01), (":", -0.01)]
    return [[t] for t in [*lead, (f" {answer}", logprob), (".", -0.01)]]


def model_for(
    plain: list[list[tuple[str, float]]], loop: str, loop_logprob: float
) -> ScriptedChatModel:
    """Plain RAG answers "Paris" (scored ``plain``); IRCoT's chain of thought answers
    ``loop``; every other call (the second loop's) answers "Marseille"."""
    sentence = f"So the answer is: {loop}."
    return ScriptedChatModel(
        rules=[(PLAIN, "Paris"), (REASON, sentence)],
        reply_logprobs={"Paris": plain, sentence: cot(loop, loop_logprob)},
        default="Marseille",
    )
