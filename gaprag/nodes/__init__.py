"""Reusable node building blocks shared by the method graphs."""

from gaprag.nodes.generate_answer import (
    clean_answer,
    format_passages,
    generate_answer,
    truncate_words,
)
from gaprag.nodes.retrieve import retrieve

__all__ = [
    "clean_answer",
    "format_passages",
    "generate_answer",
    "retrieve",
    "truncate_words",
]
