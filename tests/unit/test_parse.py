"""The tolerant parser on a corpus of malformed replies seen from small local models."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from gaprag.llm.parse import extract_json, parse_choice, parse_model, strip_thinking


class Judge(BaseModel):
    sufficient: bool
    missing: str = ""


GOOD = {"sufficient": False, "missing": "birth year of X"}

MALFORMED = [
    '{"sufficient": false, "missing": "birth year of X"}',
    '```json\n{"sufficient": false, "missing": "birth year of X"}\n```',
    'Sure! Here is the JSON:\n{"sufficient": false, "missing": "birth year of X"}\nHope this helps.',
    '<think>The passages lack the year.</think>\n{"sufficient": false, "missing": "birth year of X"}',
    "{'sufficient': False, 'missing': 'birth year of X'}",
    "{'sufficient': false, 'missing': 'birth year of X'}",
    '{"sufficient": false, "missing": "birth year of X",}',
    '{"Sufficient": "false", "Missing": "birth year of X"}',
    '```\n{"sufficient": "no", "missing": "birth year of X"}\n```',
    '{"sufficient": false, "missing": "birth year of X"',  # cut off at max tokens
    'Answer: {"sufficient": 0, "missing": "birth year of X"} and {"other": 1}',
]


@pytest.mark.parametrize("reply", MALFORMED)
def test_recovers_the_object(reply: str) -> None:
    parsed = parse_model(reply, Judge)
    assert parsed is not None, reply
    assert parsed.model_dump() == GOOD


@pytest.mark.parametrize(
    "reply",
    [
        "",
        "I cannot answer that.",
        "[1, 2, 3]",
        '{"missing": "x"}',
        '<think>{"sufficient": true',
        '{"sufficient": "perhaps"}',
    ],
)
def test_returns_none_when_nothing_valid(reply: str) -> None:
    assert parse_model(reply, Judge) is None


def test_nested_braces_in_strings() -> None:
    assert extract_json('x {"a": "curly } brace", "b": {"c": 1}} y') == {
        "a": "curly } brace",
        "b": {"c": 1},
    }


def test_unterminated_think_block_is_dropped() -> None:
    assert strip_thinking("<think>still thinking about it") == ""
    assert strip_thinking("<THINK>a</THINK>True") == "True"


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("True", "True"),
        ("false.", "False"),
        ('{"answer": "False"}', "False"),
        ("The answer is True because...", "True"),
        ("<think>maybe False</think> True", "True"),
        ("It is not False, it is True", "False"),  # first mention wins, documented behaviour
        ("unsure", None),
    ],
)
def test_parse_choice(reply: str, expected: str | None) -> None:
    assert parse_choice(reply, ["True", "False"]) == expected
