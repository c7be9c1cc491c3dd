"""Any method graph as a LangChain tool an agent can call.

>>> from gaprag import as_tool
>>> tool = as_tool("migres", llm=chat_model, retriever=store, max_iterations=3)
>>> tool.invoke({"question": "Who directed the film that ...?"})
'answer: ...\\nstop_reason: ...\\nevidence:\\n- [id] Title: first words ...'

The tool's text (what the agent's model reads) is the answer, why the method stopped, and a
compact evidence list. Called with a ``ToolCall`` it also returns the full result as the
``ToolMessage.artifact`` (answer, stop_reason, iterations, queries, evidence, usage).
"""

from __future__ import annotations

import inspect
import uuid
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field

from gaprag.graphs import build_graph, context_class, graph_module
from gaprag.validate import check_llm, check_question, check_retriever

#: Evidence passages shown to the calling model, and words kept from each.
EVIDENCE_ITEMS = 5
SNIPPET_WORDS = 30


class QuestionInput(BaseModel):
    """The tool's argument schema."""

    question: str = Field(description="A self-contained question to answer from the corpus.")


def method_description(method: str) -> str:
    """The first paragraph of the method module's docstring, as one line."""
    doc = inspect.getdoc(graph_module(method)) or ""
    first = doc.strip().split("\n\n", 1)[0]
    summary = " ".join(first.split())
    prefix = f"{method}:"
    if summary.lower().startswith(prefix):
        summary = summary[len(prefix) :].strip()
    if summary:
        summary = summary[0].upper() + summary[1:]
    intro = f"Answer a factual question from the document corpus (gaprag method {method})."
    return f"{intro} {summary}" if summary else intro


def _snippet(text: str, words: int = SNIPPET_WORDS) -> str:
    parts = text.split()
    return " ".join(parts[:words]) + (" ..." if len(parts) > words else "")


def compact_result(result: dict[str, Any]) -> dict[str, Any]:
    """The parts of a run an agent needs: answer, stop reason, cost and short evidence (with
    each passage's metadata, so the agent can cite its source and page)."""
    evidence = [
        {
            "id": ev.get("id", ""),
            "title": ev.get("title", ""),
            "snippet": _snippet(str(ev.get("text", ""))),
            "source": ev.get("source", ""),
            "round": ev.get("round", 0),
            **({"metadata": dict(ev["metadata"])} if ev.get("metadata") else {}),
        }
        for ev in result.get("evidence", [])
    ]
    return {
        "answer": result.get("answer", ""),
        "stop_reason": result.get("stop_reason", ""),
        "iterations": result.get("iterations", 0),
        "queries": list(result.get("queries", [])),
        "evidence": evidence,
        "usage": dict(result.get("usage", {})),
    }


def _cite(ev: dict[str, Any]) -> str:
    """`` (source, p. N)`` for a passage whose metadata names where it comes from."""
    meta = ev.get("metadata") or {}
    parts = [str(meta["source"])] if meta.get("source") else []
    if meta.get("page") not in (None, ""):
        parts.append(f"p. {meta['page']}")
    return f" ({', '.join(parts)})" if parts else ""


def format_result(compact: dict[str, Any], limit: int = EVIDENCE_ITEMS) -> str:
    """The tool's text: answer, stop reason, and up to ``limit`` evidence lines."""
    lines = [f"answer: {compact['answer']}", f"stop_reason: {compact['stop_reason']}"]
    evidence = compact["evidence"][:limit]
    if evidence:
        lines.append("evidence:")
        lines += [f"- [{ev['id']}] {ev['title']}{_cite(ev)}: {ev['snippet']}" for ev in evidence]
    else:
        lines.append("evidence: none")
    return "\n".join(lines)


def tool_result(result: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A run's output as a tool returns it: the text (:func:`format_result`) and the compact
    result. A run that paused (``__interrupt__``, e.g. rag_ef asking for expert feedback) is
    reported as ``stop_reason: paused_for_review``."""
    if "__interrupt__" in result:
        compact = {**compact_result(result), "stop_reason": "paused_for_review"}
        return (
            "answer: (none: the method paused for expert review, which a tool call "
            "cannot give)\nstop_reason: paused_for_review",
            compact,
        )
    compact = compact_result(result)
    return format_result(compact), compact


def as_tool(
    method: str,
    *,
    name: str | None = None,
    description: str | None = None,
    **build_kwargs: Any,
) -> BaseTool:
    """Wrap ``method``'s graph as a LangChain ``StructuredTool`` named ``gaprag_<method>``.

    ``build_kwargs`` go to :func:`gaprag.build_graph` (``llm``, ``retriever``,
    ``checkpointer`` and context options such as ``max_iterations=3``). With a checkpointer,
    every call runs in a fresh thread. The graph is compiled once, here, and the injected
    ``llm`` and ``retriever`` are checked here too (:mod:`gaprag.validate`); a question is
    checked before the graph runs. A run that pauses (rag_ef's review) is reported as
    ``stop_reason: paused_for_review``.
    """
    # the injected objects are checked now; pause settings (rag_ef's review) are refused by
    # the graph itself at the first call, with the same message as any other run
    check_llm(build_kwargs.get("llm"))
    check_retriever(build_kwargs.get("retriever"), method=method)
    graph = build_graph(method, **build_kwargs)
    persistent = build_kwargs.get("checkpointer") is not None
    # An explicit context with the build-time settings: inside an agent graph the parent's
    # runtime context would otherwise be handed to this graph's nodes (a different schema).
    run_context = (graph.context_schema or context_class(method))()

    def _config(config: RunnableConfig | None) -> RunnableConfig:
        out: RunnableConfig = {}
        if config and config.get("callbacks") is not None:
            out["callbacks"] = config["callbacks"]
        if persistent:
            out["configurable"] = {"thread_id": f"tool-{uuid.uuid4().hex}"}
        return out

    def run(question: str, config: RunnableConfig) -> tuple[str, dict[str, Any]]:
        question = check_question(question)
        return tool_result(
            graph.invoke({"question": question}, _config(config), context=run_context)
        )

    async def arun(question: str, config: RunnableConfig) -> tuple[str, dict[str, Any]]:
        question = check_question(question)
        inputs = {"question": question}
        return tool_result(await graph.ainvoke(inputs, _config(config), context=run_context))

    return StructuredTool.from_function(
        func=run,
        coroutine=arun,
        name=name or f"gaprag_{method}",
        description=description or method_description(method),
        args_schema=QuestionInput,
        response_format="content_and_artifact",
    )
