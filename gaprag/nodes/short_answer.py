"""The shared short-answer step: reduce a method's final answer to the shortest span.

Small models answer in sentences (IterKey's median answer on the 1.5B model was 10-15 words
against 2 for plain RAG), which exact match and F1 punish although the answer is right. Every
method that ends with an answer runs this step last, standard_rag included, so comparisons stay
fair. It spends an LLM call only where the answer is not already short:

- a yes/no question answered "Yes, ..." (or "True") becomes ``yes`` (a rule, no call);
- an "A or B?" question whose answer names exactly one option becomes that option (no call);
- an answer of at most ``SHORT_WORDS`` words that fits the question's shape is kept;
- anything else goes to the model with few-shot user/assistant turns (prompt ``short_answer``
  in ``gaprag/nodes/prompts.toml``). A reply that is empty or not shorter than the answer is
  discarded and the answer kept.

``short_answer=false`` or ``reader="paper"`` turns the step off (for exact reproductions of a
paper). Each run of the step leaves a trace record ``{call: "short_answer", path:
rule|llm|kept|off, original}``.

A method's graph ends with :func:`add_short_answer`, which declares its tail: the shared reader
(``reader=``), the answer choice (``choice=``) and the short-answer step, each switched at run
time by its setting (``reader``, ``answer_choice``, ``short_answer``); the gate that starts it
is declared by :func:`gaprag.nodes.wiring.add_nodes` (``gate=``, setting ``gate``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal

from langgraph.graph import END, StateGraph
from langgraph.runtime import Runtime

from gaprag.accounting import record_decision
from gaprag.deps import Deps
from gaprag.nodes.answer import clean_answer
from gaprag.prompts import Prompt, load_prompts

SHORT_WORDS = 5
_AUX = {
    "is", "are", "was", "were", "do", "does", "did", "can", "could", "has", "have", "had",
    "will", "would", "should", "shall", "may", "might", "must",
}  # fmt: skip
_YES_NO = re.compile(r"^\W*(yes|no|true|false)\b", re.I)
_AS_YES_NO = {"yes": "yes", "true": "yes", "no": "no", "false": "no"}
_OPTIONS = re.compile(r"[,:]\s*(?:the\s+)?([^,:]+?)\s+or\s+(?:the\s+)?([^,:]+?)\s*\??$", re.I)
_NOISE = re.compile(r"[^a-z0-9 ]")
_OR = re.compile(r"\bor\b", re.I)

SHARED_PROMPTS = load_prompts("gaprag.nodes")


def _norm(text: str) -> str:
    return " ".join(_NOISE.sub(" ", text.lower()).split())


def yes_no_question(question: str) -> bool:
    """A question answered by yes or no: it opens with an auxiliary verb and names no
    alternatives ("Is A or B older?" and "Is X older or younger than Y?" are answered with one
    of them). Appended multiple-choice options (a line ``Options:``) are not looked at."""
    q = question.strip().split("\nOptions:", 1)[0]
    words = q.split()
    return bool(words) and words[0].lower() in _AUX and not _OR.search(q)


def options(question: str) -> list[str]:
    """The options of an "..., A or B?" question, as the question writes them; else []."""
    m = _OPTIONS.search(question.strip())
    return [m.group(1).strip(), m.group(2).strip()] if m else []


ShortPath = Literal["rule", "kept", "llm", "llm_kept"]
# the paths on which the step made an LLM call (what an evaluation counts as its added calls)
CALL_PATHS: frozenset[str] = frozenset({"llm", "llm_kept"})


def rule_answer(question: str, answer: str) -> str | None:
    """The short answer a rule can give without a model call, or None."""
    text = answer.strip()
    if not text:
        return text
    if yes_no_question(question):
        m = _YES_NO.match(text)
        if m:
            return _AS_YES_NO[m.group(1).lower()]
        return None
    opts = options(question)
    if opts:
        said = _norm(text)
        named = [o for o in opts if _norm(o) and _norm(o) in said]
        if len(named) == 1:
            return named[0]
        return None
    if len(text.split()) <= SHORT_WORDS:
        return text
    return None


async def shorten(
    llm: Any, question: str, answer: str, *, prompt: Prompt | None = None, max_tokens: int = 24
) -> tuple[str, ShortPath]:
    """(short answer, how it was obtained) for ``answer`` to ``question``: ``rule`` (no call),
    ``kept`` (already short, no call), ``llm`` (one call, its reply used) or ``llm_kept`` (one
    call, its reply empty or no shorter, so the answer kept)."""
    ruled = rule_answer(question, answer)
    if ruled is not None:
        return ruled, "rule" if ruled != answer else "kept"
    prompt = prompt or SHARED_PROMPTS["short_answer"]
    raw = await llm.agenerate(
        prompt.render(question=question, answer=answer), max_tokens=max_tokens
    )
    reply = clean_answer(raw)
    if not reply or len(reply) >= len(answer):
        return answer, "llm_kept"
    return reply, "llm"


async def short_answer(state: Any, runtime: Runtime[Any], deps: Deps) -> dict[str, Any]:
    """The graph node: shorten the final answer (off: ``short_answer=false``, ``reader="paper"``).

    Reads: `question`, `answer`; writes: `answer`.
    """
    ctx = runtime.context
    original = str(getattr(state, "answer", "") or "")
    if not getattr(ctx, "short_answer", True) or getattr(ctx, "reader", "short") == "paper":
        record_decision(call="short_answer", path="off")
        return {}
    answer, path = await shorten(await deps.achat(ctx), state.question, original)
    record_decision(call="short_answer", path=path, original=original)
    return {"answer": answer} if answer != original else {}


def add_short_answer(
    builder: StateGraph[Any, Any, Any, Any],
    deps: Deps,
    *,
    after: str | None = None,
    reader: bool | Callable[[Any], Any] = False,
    choice: bool = False,
) -> None:
    """End the graph with the short-answer step: ``after`` -> short_answer -> END (without
    ``after``, the graph's routers lead to ``"short_answer"`` themselves).

    ``reader``: put the shared reader (:mod:`gaprag.nodes.reader`) between ``after`` and the
    short-answer step; it answers anew when the run's ``reader`` setting is ``ranked``. True
    reads the method's ``evidence`` (:func:`~gaprag.nodes.reader.gathered_evidence`); a
    function ``state -> Gathered`` says what else the method gathered.

    ``choice``: put the answer choice (:mod:`gaprag.nodes.select`, node ``select``) before
    the short-answer step (a pass-through with ``answer_choice="off"``); it chooses between
    the shared gate's answer and the method's, so the graph must start with the gate
    (``add_nodes(..., gate=True)``), whose own stop goes straight to the short-answer step."""
    from gaprag.nodes.reader import gathered_evidence, reader_node
    from gaprag.nodes.wiring import as_node

    context = builder.context_schema
    assert context is not None
    builder.add_node("short_answer", as_node(short_answer, deps, context))
    if reader:
        if after is None:
            raise ValueError("the reader needs the step it follows (after=)")
        gather = gathered_evidence if reader is True else reader
        builder.add_node("reader", as_node(reader_node(gather), deps, context))
        builder.add_edge(after, "reader")
        after = "reader"
    if choice:
        from gaprag.nodes.select import select

        if after is None or "gate" not in builder.nodes:
            raise ValueError("the answer choice needs the gate (add_nodes(gate=True)) and after=")

        builder.add_node("select", as_node(select, deps, context))
        builder.add_edge(after, "select")
        after = "select"
    if after is not None:
        builder.add_edge(after, "short_answer")
    builder.add_edge("short_answer", END)
