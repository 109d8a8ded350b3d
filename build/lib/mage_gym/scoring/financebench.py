"""FinanceBench answer scoring: our own rule, not the benchmark's.

FinanceBench (github patronus-ai/financebench) publishes free-text gold
answers and graded models by hand, so there is no official scorer to follow.
This rule approximates that grading and is the same in ``official`` and
``lenient`` mode; results under it are not comparable with the paper's
human-graded numbers.

1. A gold that is one number ("$1832.00", "2.8%", "0.68"), or that opens with
   one as its first sentence ("36%. The answer here assumes ..."), is matched
   numerically: the prediction scores 1 if any number it states is within 1%
   of the gold (relative to the gold). A percent on either side also accepts
   the value x100 or /100 ("2.8%" vs "0.028"); a scale word on either side
   also accepts the scaled value ("$1.8 bn" vs "$1,800 million"). Signs are
   ignored (reports write a loss as "-$473 million" or "a loss of $473
   million").
2. A gold that starts with "Yes"/"No" needs a prediction of the same polarity
   when the prediction states one; a contrary polarity scores 0.
3. Any other gold is text: the score is the larger ANLS (threshold 0.5,
   after lower-casing, whitespace and punctuation normalisation) of the whole
   answers and of their first sentences ("Corporate." for "Corporate. Its net
   revenue was -$473 million."; "yes"/"no" for polar answers), raised to 1 if
   every number in the gold other than years is matched as in rule 1.

Known gaps: a prediction that lists many numbers can hit the gold by chance;
a scale stated on one side only is not applied ("$1,832" in millions vs
"$1.832 billion" scores 0); paraphrases of text answers score low.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from mage_gym.scoring.text import NOT_ANSWERABLE, anls, collapse_whitespace, is_not_answerable

_SCALES = {"thousand": 1e3, "k": 1e3, "million": 1e6, "mn": 1e6, "m": 1e6, "mm": 1e6,
           "billion": 1e9, "bn": 1e9, "b": 1e9, "trillion": 1e12, "tn": 1e12}
_NUMBER = re.compile(
    r"(?<![\w.])(?P<neg>[-\u2212(])?\s*(?P<cur>[$\u20ac\u00a3])?\s*"
    r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
    r"(?:\s*(?P<pct>%|percent\b|per\s+cent\b))?"
    r"(?:\s*(?P<scale>" + "|".join(sorted(_SCALES, key=len, reverse=True)) + r")\b)?",
    re.IGNORECASE,
)
_POLARITY = re.compile(r"^(yes|no)\b")
_SENTENCE_END = re.compile(r"(?<=[.;!?])\s+(?=[a-z(\"'$])")
_TOLERANCE = 0.01


@dataclass(frozen=True)
class _Number:
    value: float  # magnitude as written
    scaled: float  # magnitude with the scale word applied (== value without one)
    percent: bool
    year_like: bool
    span: tuple[int, int]


def _numbers(text: str) -> list[_Number]:
    found: list[_Number] = []
    for m in _NUMBER.finditer(text):
        raw = m.group("num")
        value = float(raw.replace(",", ""))
        scale = (m.group("scale") or "").lower()
        scaled = value * _SCALES.get(scale, 1.0)
        year_like = (re.fullmatch(r"\d{4}", raw) is not None and 1900 <= value <= 2100
                     and not m.group("cur") and not m.group("pct") and not scale)
        found.append(_Number(value, scaled, bool(m.group("pct")), year_like, m.span()))
    return found


def _close(gold: float, pred: float) -> bool:
    return abs(gold - pred) <= _TOLERANCE * abs(gold) + 1e-12


def _number_match(gold: _Number, pred: _Number) -> bool:
    factors = (1.0, 100.0, 0.01) if (gold.percent or pred.percent) else (1.0,)
    for g in {gold.value, gold.scaled}:
        for p in {pred.value, pred.scaled}:
            if any(_close(g * f, p) for f in factors):
                return True
    return False


def _normalise(text: str) -> str:
    s = text.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')
    s = collapse_whitespace(s.lower())
    return s.strip(" .;:!?\"'")


def _head(text: str) -> str:
    """The first sentence; "yes"/"no" for a polar answer."""
    polar = _POLARITY.match(text)
    if polar:
        return polar.group(1)
    return _SENTENCE_END.split(text, maxsplit=1)[0].strip(" .;:!?\"'")


def _bare_number(text: str) -> _Number | None:
    """The number when ``text`` is one number and nothing else."""
    nums = _numbers(text)
    if len(nums) != 1:
        return None
    start, end = nums[0].span
    rest = (text[:start] + text[end:]).strip(" .,;:$\u20ac\u00a3%")
    return nums[0] if rest in ("", "usd", "us$") else None


def score_financebench(pred: str, gold: str) -> float:
    """Score one free-text prediction against a FinanceBench gold answer."""
    g, p = _normalise(str(gold)), _normalise(pred)
    if not p:
        return 0.0
    if g == NOT_ANSWERABLE.lower():
        return float(is_not_answerable(pred))
    g_polar, p_polar = _POLARITY.match(g), _POLARITY.match(p)
    if g_polar and p_polar and g_polar.group(1) != p_polar.group(1):
        return 0.0
    pred_numbers = _numbers(p)
    g_head = _head(g)
    key = _bare_number(g_head)
    if key is not None:
        return float(any(_number_match(key, n) for n in pred_numbers))
    result = max(anls(g, p), anls(g_head, _head(p)))
    gold_keys = [n for n in _numbers(g) if not n.year_like]
    if gold_keys and all(any(_number_match(k, n) for n in pred_numbers) for k in gold_keys):
        result = 1.0
    return result
