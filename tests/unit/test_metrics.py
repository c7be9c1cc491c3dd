"""Answer and retrieval metrics on known cases, including the tricky ones."""

from __future__ import annotations

import pytest

from gaprag.metrics import (
    accuracy,
    choose_option,
    exact_match,
    f1_score,
    gold_option,
    normalize_answer,
    support_recall,
    tokens,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("The Eiffel Tower", "eiffel tower"),
        ("An apple a day", "apple day"),
        ("  Paris,   France. ", "paris france"),
        ("U.S.", "us"),  # SQuAD deletes punctuation, it does not split on it
        ("theatre", "theatre"),  # articles only as whole words
        ("Beyoncé", "beyonce"),  # accents folded
        ("ＵＳＡ", "usa"),  # full-width letters folded
        ("“Hamlet” — a play", "hamlet play"),  # Unicode quotes and dashes are punctuation
        ("1,000", "1000"),
        ("抗雄激素疗法。", "抗雄激素疗法"),
        ("", ""),
    ],
)
def test_normalize_answer(raw: str, expected: str) -> None:
    assert normalize_answer(raw) == expected


def test_exact_match_is_max_over_aliases() -> None:
    assert exact_match("the United States", ["USA", "United States"]) == 1.0
    assert exact_match("U.S.", ["US"]) == 1.0
    assert exact_match("United States of America", ["USA", "United States"]) == 0.0
    assert exact_match("Paris", "paris!") == 1.0  # a single string is one alias


def test_f1_token_overlap_and_max_over_aliases() -> None:
    assert f1_score("Barack Obama", ["Obama"]) == pytest.approx(2 / 3)
    assert f1_score("Barack Obama", ["Michelle", "Barack Obama"]) == 1.0
    # precision 1/3, recall 1/2 -> F1 0.4
    assert f1_score("the red big house", ["red roof"]) == pytest.approx(0.4)
    assert f1_score("Berlin", ["Paris"]) == 0.0


def test_hotpotqa_yes_no_rule() -> None:
    assert f1_score("yes", ["no"]) == 0.0
    assert f1_score("Yes.", ["yes"]) == 1.0
    # a yes/no gold scores only an exact yes/no: token overlap would give 0.5 here
    assert f1_score("yes it is", ["yes"]) == 0.0
    assert f1_score("no", ["no way"]) == 0.0
    assert f1_score("noanswer", ["Paris"]) == 0.0
    assert accuracy("yes it is", ["yes"]) == 1.0  # acc has no such rule


def test_empty_prediction_scores_zero() -> None:
    for metric in (exact_match, f1_score, accuracy):
        assert metric("", ["Paris"]) == 0.0
        assert metric("   ", ["Paris"]) == 0.0
    assert f1_score("the", ["a"]) == 1.0  # both normalise to nothing: SQuAD v2 rule


def test_numbers() -> None:
    assert exact_match("1,000", ["1000"]) == 1.0
    assert f1_score("1990", ["1991"]) == 0.0
    assert accuracy("in 1990", ["1990"]) == 1.0
    assert accuracy("1990", ["1"]) == 0.0  # containment is on token boundaries
    assert exact_match("five", ["5"]) == 0.0  # no number-word conversion


def test_acc_is_containment_of_a_normalised_gold() -> None:
    assert accuracy("The answer is William Shakespeare.", ["Shakespeare", "Marlowe"]) == 1.0
    assert accuracy("Shakespeare", ["William Shakespeare"]) == 0.0
    assert accuracy("He was born in Stratford-upon-Avon", ["Stratford upon Avon"]) == 0.0
    assert accuracy("He was born in Stratford-upon-Avon", ["Stratford-upon-Avon"]) == 1.0


def test_cjk_is_scored_per_character() -> None:
    assert tokens("抗雄激素 therapy") == ["抗", "雄", "激", "素", "therapy"]
    assert f1_score("抗雄激素疗法", ["抗雄激素"]) == pytest.approx(0.8)
    assert accuracy("首选抗雄激素疗法", ["抗雄激素疗法"]) == 1.0
    assert exact_match("抗雌激素疗法", ["抗雄激素疗法"]) == 0.0


def test_support_recall() -> None:
    assert support_recall(["a", "b"], ["x", "a", "y"]) == 0.5
    assert support_recall(["a", "b"], iter(["b", "a", "a"])) == 1.0
    assert support_recall(["a"], []) == 0.0
    assert support_recall([], ["a"]) is None  # nothing to recall: not a zero


OPTIONS = {"A": "Colloidal iron", "B": "Congo red", "C": "PAS", "D": "Masson trichrome"}


@pytest.mark.parametrize(
    ("prediction", "expected"),
    [
        ("D", "D"),
        ("d", "D"),
        ("(B)", "B"),
        ("B. Congo red", "B"),
        ("Answer: C", "C"),
        ("The answer is D", "D"),
        ("**A**", "A"),
        ("Masson trichrome", "D"),
        ("masson's trichrome stain", None),  # apostrophe makes "massons": no option matches
        ("It is stained with Masson trichrome.", "D"),
        ("Congo", "B"),  # contained in exactly one option
        ("Congo red or PAS", "B"),  # the longest contained option wins
        ("Colloidal", "A"),
        ("a stain", None),  # the article "a" is not option A
        ("", None),
        ("E", None),  # not an option
    ],
)
def test_choose_option(prediction: str, expected: str | None) -> None:
    assert choose_option(prediction, OPTIONS) == expected


def test_choose_option_yes_no_maybe_and_gold() -> None:
    opts = {"A": "yes", "B": "no", "C": "maybe"}
    assert choose_option("No.", opts) == "B"
    assert choose_option("maybe", opts) == "C"
    assert choose_option("I cannot tell", opts) is None
    assert gold_option(opts, ["no"], None) == "B"
    assert gold_option(opts, ["no"], "C") == "C"  # an explicit letter wins
    assert gold_option(opts, ["perhaps"], "Z") is None
