"""Deterministic answer and retrieval metrics (no LLM judge).

Conventions follow the field (SQuAD / HotpotQA / FlashRAG), with two documented extensions
for non-English and typographic text:

* :func:`normalize_answer` is SQuAD's ``normalize_answer`` (lower-case, drop punctuation,
  drop ``a|an|the``, collapse whitespace) applied after Unicode compatibility folding
  (NFKD, combining marks dropped: ``Beyoncé`` == ``Beyonce``, full-width ``Ａ`` == ``a``);
  punctuation is every Unicode punctuation character plus ASCII ``string.punctuation``
  (so curly quotes, dashes and ``，。？`` are removed like ``,.?``). As in SQuAD, it is
  deleted, not replaced by a space: ``U.S.`` -> ``us``, ``1,000`` -> ``1000``.
* Tokens for F1 are whitespace tokens, except that CJK characters are one token each
  (the character-level F1 used by Chinese reading-comprehension benchmarks); English text
  tokenises exactly as in SQuAD.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

_ASCII_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_CJK = re.compile(
    r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f]"
)
YES_NO = frozenset({"yes", "no", "noanswer"})


def _fold(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if unicodedata.category(ch) != "Mn")


def _is_punct(ch: str) -> bool:
    return ch in _ASCII_PUNCT or unicodedata.category(ch).startswith("P")


def normalize_answer(text: str) -> str:
    """SQuAD normalisation (after Unicode folding): lower, no punctuation/articles, one space."""
    text = _fold(text).lower()
    text = "".join(ch for ch in text if not _is_punct(ch))
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def tokens(normalized: str) -> list[str]:
    """Whitespace tokens of a normalised string; CJK characters are one token each."""
    out: list[str] = []
    for word in normalized.split():
        if not _CJK.search(word):
            out.append(word)
            continue
        buf = ""
        for ch in word:
            if _CJK.match(ch):
                if buf:
                    out.append(buf)
                    buf = ""
                out.append(ch)
            else:
                buf += ch
        if buf:
            out.append(buf)
    return out


def _golds(answers: str | Iterable[str]) -> list[str]:
    return [answers] if isinstance(answers, str) else [a for a in answers if isinstance(a, str)]


def exact_match(prediction: str, answers: str | Iterable[str]) -> float:
    """1.0 if the normalised prediction equals any normalised gold alias."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in _golds(answers)))


def _f1_one(pred: str, gold: str) -> float:
    # HotpotQA's official rule: a yes/no/noanswer on either side scores only an exact match.
    if (pred in YES_NO or gold in YES_NO) and pred != gold:
        return 0.0
    p, g = tokens(pred), tokens(gold)
    if not p or not g:
        return float(p == g)
    common = Counter(p) & Counter(g)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str, answers: str | Iterable[str]) -> float:
    """Token-overlap F1, max over the gold aliases, with HotpotQA's yes/no rule."""
    pred = normalize_answer(prediction)
    return max((_f1_one(pred, normalize_answer(g)) for g in _golds(answers)), default=0.0)


def _contains(haystack: str, needle: str) -> bool:
    if not needle:
        return False
    if _CJK.search(needle):
        return needle in haystack
    return f" {needle} " in f" {haystack} "  # whole tokens: gold "1" is not in "1990"


def accuracy(prediction: str, answers: str | Iterable[str]) -> float:
    """FlashRAG's ``acc`` (cover-EM): a normalised gold is contained in the normalised prediction.

    Containment is on token boundaries for non-CJK text (``"1"`` is not found in
    ``"1990"``), on characters for CJK text.
    """
    pred = normalize_answer(prediction)
    return float(any(_contains(pred, normalize_answer(g)) for g in _golds(answers)))


def support_recall(supporting: Sequence[str], seen: Iterable[str]) -> float | None:
    """Share of the supporting paragraph ids among ``seen``; ``None`` without supporting ids."""
    gold = set(supporting)
    if not gold:
        return None
    return len(gold & set(seen)) / len(gold)


# -- multiple choice -----------------------------------------------------------------------
_LETTER = re.compile(
    r"^\s*(?:\**\s*)?(?:(?:the\s+)?(?:correct\s+)?(?:answer|option|choice)\s*(?:is)?\s*[:\-]?\s*)?"
    r"[\(\[]?([A-Za-z])[\)\]]?\**(?=$|[\s\.\):,;*])",
    re.IGNORECASE,
)


def choose_option(prediction: str, options: Mapping[str, str]) -> str | None:
    """Map a free-text prediction to an option letter, or ``None`` if it names none.

    In order: a leading option letter (``"B"``, ``"(b)"``, ``"B. Congo red"``,
    ``"Answer: B"``); the option whose text equals the prediction; the longest option text
    contained in the prediction (on token boundaries, unique); the one option whose text
    contains the prediction.
    """
    if not options:
        return None
    letters = {k.strip().upper(): k for k in options}
    raw = prediction.strip()
    match = _LETTER.match(raw)
    if match:
        letter = match.group(1).upper()
        rest = raw[match.end() :].strip()
        # a lone lower-case "a" is the article, not option A, unless it is the whole reply
        lone_article = match.group(1) == "a" and bool(rest)
        if letter in letters and not lone_article:
            return letters[letter]
    pred = normalize_answer(raw)
    if not pred:
        return None
    norm = {key: normalize_answer(text) for key, text in options.items()}
    exact = [key for key, text in norm.items() if text and text == pred]
    if len(exact) == 1:
        return exact[0]
    contained = [key for key, text in norm.items() if _contains(pred, text)]
    if contained:
        longest = max(len(norm[k]) for k in contained)
        best = [k for k in contained if len(norm[k]) == longest]
        if len(best) == 1:
            return best[0]
    within = [key for key, text in norm.items() if _contains(text, pred)]
    if len(within) == 1:
        return within[0]
    return None


def gold_option(
    options: Mapping[str, str], answers: Sequence[str], letter: str | None
) -> str | None:
    """The correct option's key: ``letter`` if it is one, else the option equal to a gold answer."""
    if letter and letter in options:
        return letter
    golds = {normalize_answer(a) for a in answers}
    for key, text in options.items():
        if normalize_answer(text) in golds:
            return key
    return None
