"""The question as the prompts show it: its language, and the options of a multiple-choice
record (shown under the question in every prompt, never used as a retrieval query)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from gaprag.graphs.missing_knowledge.context import Language

_CJK = re.compile(r"[\u4e00-\u9fff]")
_OPTIONS = re.compile(r"\n\s*(?:Options|选项)\s*[:：]\s*\n(?P<options>.+)$", re.S | re.I)


def language(setting: Language, question: str) -> Literal["en", "zh"]:
    """The prompt set: the setting, or (``auto``) zh when the question has Chinese text."""
    if setting in ("en", "zh"):
        return setting
    return "zh" if _CJK.search(question) else "en"


def format_options(options: Mapping[str, Any] | Sequence[Any]) -> str:
    """``{"A": "x", "B": "y"}`` or ``["x", "y"]`` as ``A. x`` lines, for ``options_text``."""
    if isinstance(options, Mapping):
        items = [(str(k), str(v)) for k, v in options.items()]
    else:
        items = [(chr(ord("A") + i), str(v)) for i, v in enumerate(options)]
    return "\n".join(f"{k}. {v}" for k, v in items)


def split_question(question: str, options_text: str = "") -> tuple[str, str]:
    """(question stem, options). Options come from ``options_text`` or from an ``Options:``
    block appended to the question (the evaluation harness's multiple-choice format); only the
    stem is used as a retrieval query."""
    match = _OPTIONS.search(question)
    if match is None:
        return question.strip(), options_text.strip()
    return question[: match.start()].strip(), options_text.strip() or match["options"].strip()


def question_block(question: str, options_text: str, lang: str) -> str:
    """The question stem, with its options under an ``Options:`` (选项：) label if any."""
    stem, options = split_question(question, options_text)
    if not options:
        return stem
    label = "选项：" if lang == "zh" else "Options:"
    return f"{stem}\n{label}\n{options}"
