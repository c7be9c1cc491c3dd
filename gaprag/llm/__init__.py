"""OpenAI-compatible chat access, structured output, usage accounting, the embedded server."""

from gaprag.accounting import metered, node, record_retrieval
from gaprag.llm.client import LLM, Choice, Structured
from gaprag.llm.factory import default_llm, resolve_llm

__all__ = [
    "LLM",
    "Choice",
    "Structured",
    "default_llm",
    "metered",
    "node",
    "record_retrieval",
    "resolve_llm",
]
