"""Eager checks of what users hand to gaprag: the question and the injected objects.

Each check raises :class:`gaprag.errors.InputError` with a one-line cause and a hint, so the
Python API refuses bad input as clearly as the CLI, before any LLM call::

    question = check_question(inputs.get("question"))   # stripped text, or InputError
    check_llm(llm)                                      # a LangChain chat model (or None)
    check_retriever(retriever)                          # a retriever or a gaprag store (or None)
"""

from __future__ import annotations

import unicodedata

from gaprag.config import max_question_chars
from gaprag.errors import InputError

_EXAMPLE = 'graph.invoke({"question": "Who wrote Hamlet?"})'


def check_question(question: object, *, max_chars: int | None = None) -> str:
    """The question, stripped of surrounding whitespace and control characters.

    Refuses ``None``, non-strings, empty or blank text and text longer than ``max_chars``
    (default ``GAPRAG_MAX_QUESTION_CHARS``, 4000): an oversized question never reaches the
    endpoint.
    """
    if question is None:
        raise InputError("no question given (question is None)", hint=_EXAMPLE)
    if isinstance(question, bytes):
        raise InputError(
            "the question is bytes, not text", hint="decode it first: question.decode('utf-8')"
        )
    if not isinstance(question, str):
        raise InputError(
            f"the question must be a string, got {type(question).__name__}", hint=_EXAMPLE
        )
    # control characters (NUL, escape sequences) carry no meaning for a model; keep \n and \t
    cleaned = "".join(
        ch if ch in "\n\t" or unicodedata.category(ch)[0] != "C" else " " for ch in question
    ).strip()
    if not cleaned:
        raise InputError("the question is empty", hint=_EXAMPLE)
    limit = max_question_chars() if max_chars is None else max_chars
    if len(cleaned) > limit:
        raise InputError(
            f"the question is {len(cleaned):,} characters long; the limit is {limit:,}",
            hint="ask a shorter question (put long material in the corpus), or raise the "
            "limit with GAPRAG_MAX_QUESTION_CHARS",
        )
    return cleaned


def check_llm(llm: object) -> None:
    """``llm`` must be ``None``, a :class:`gaprag.llm.LLM` or a LangChain ``BaseChatModel``."""
    if llm is None:
        return
    from langchain_core.language_models import BaseChatModel, BaseLanguageModel

    from gaprag.llm.client import LLM

    if isinstance(llm, LLM | BaseChatModel):
        return
    if isinstance(llm, str):
        raise InputError(
            f"llm={llm!r} is a string; gaprag needs a chat model object",
            hint=f"pass llm=ChatOpenAI(model={llm!r}, base_url=..., api_key=...), or leave llm "
            f"out and set GAPRAG_BASE_URL and GAPRAG_MODEL={llm}",
        )
    if isinstance(llm, BaseLanguageModel):
        raise InputError(
            f"llm is a completion model ({type(llm).__name__}), not a chat model",
            hint="use the chat variant, e.g. ChatOpenAI instead of OpenAI",
        )
    raise InputError(
        f"llm must be a LangChain chat model, got {type(llm).__name__}",
        hint="pass any langchain_core BaseChatModel, e.g. ChatOpenAI(base_url=..., api_key=...)",
    )


def check_retriever(retriever: object, *, method: str = "") -> None:
    """``retriever`` must be ``None``, a LangChain ``BaseRetriever`` or a gaprag store/retriever
    (for ``rag_ef`` also its feedback ``PairStore``, which it answers from)."""
    if retriever is None:
        return
    from gaprag.stores.pairs import PairStore

    if method == "rag_ef" and isinstance(retriever, PairStore):
        return
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.vectorstores import VectorStore

    from gaprag.stores.retriever import Retriever

    if isinstance(retriever, BaseRetriever):
        return
    # a VectorStore (and gaprag's PairStore) has a ``search`` method too, with other arguments:
    # check for it before the Retriever protocol, which only looks at the method's name
    if isinstance(retriever, VectorStore):
        raise InputError(
            f"retriever is a LangChain VectorStore ({type(retriever).__name__}), not a retriever",
            hint="pass retriever=vectorstore.as_retriever(search_kwargs={'k': 5})",
        )
    if callable(getattr(retriever, "as_retriever", None)):
        raise InputError(
            f"retriever is a {type(retriever).__name__}, not a retriever",
            hint="pass retriever=obj.as_retriever()",
        )
    if isinstance(retriever, Retriever):
        return
    if isinstance(retriever, str | bytes) or hasattr(retriever, "__fspath__"):
        raise InputError(
            f"retriever={str(retriever)!r} is a path, not a retriever",
            hint="open the store first: from gaprag.stores import Store; "
            "retriever=Store.open(path); or build_graph(..., store=path)",
        )
    raise InputError(
        f"retriever must be a LangChain BaseRetriever or a gaprag Store, got "
        f"{type(retriever).__name__}",
        hint="a LangChain vector store becomes one with .as_retriever(); a gaprag store "
        "with Store.open(path)",
    )
