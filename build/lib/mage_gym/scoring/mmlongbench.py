"""MMLongBench-Doc answer scoring (also used for the synthetic corpus).

``official`` follows the benchmark's ``eval/eval_score.py`` (github
mayubo2333/MMLongBench-Doc) rule for rule, including its oddities, so numbers
are comparable with published results:

- Int: ``int(gold) == int(float(pred))``; "1,577" does not parse (score 0),
  "3.7" truncates to 3 (matches gold 3).
- Float: both sides cleaned then ``float()``; match within 1% relative or at
  the coarser rounding, also for gold x100 and /100 (percent vs fraction). The
  cleaner does not remove thousands separators or unit words (the official
  code tests for "mile"/"million" suffixes but discards the stripped result),
  so "1,358,000" and "5.2 million" score 0.
- Str / None: lower-case, drop "(...)" asides, one leading/trailing quote, a
  leading "$" and a trailing "%"; numbers, dates, URLs, e-mails, phone
  numbers, "page ..." strings must match exactly, anything else scores ANLS
  (threshold 0.5). "Not answerable" is an ordinary string here.
- List: same length required; both sides cleaned and sorted; if the first
  sorted gold item is a number or exact-match string the whole list must be
  equal, else the score is the minimum ANLS over the sorted pairs.

Where the official code would crash we choose (documented, tested): an
unparseable gold number scores 0; a prediction "[a, b]" that is not a Python
literal (the official code ``eval``s it and raises) is split into items; two
empty lists score 1.

``lenient`` keeps the rules and fixes the formatting traps: numbers are read
with thousands separators, currency, percent and unit words, and never
truncated; strings also drop trailing punctuation and thousands separators;
list items are paired by best match (numbers compared as numbers) and
unbracketed lists ("a, b and c") are split; "not answerable" paraphrases
count as "Not answerable"; an Int/Float gold that is not a number (annotation
slips such as Int "14:04 CET") is compared as a string.
"""
from __future__ import annotations

import re
from typing import Any

from mage_gym.scoring.text import (
    NOT_ANSWERABLE,
    anls,
    as_items,
    collapse_whitespace,
    drop_thousands_separators,
    float_match,
    is_float_text,
    is_not_answerable,
    item_text,
    needs_exact_match,
    read_number,
    split_unbracketed,
)

_ASIDE = re.compile(r"\s*\([^)]*\)")
_EDGE_QUOTE = re.compile(r"^['\"]|['\"]$")


def clean(value: Any) -> str:
    """The official ``get_clean_string``."""
    s = str(value).lower().strip()
    s = _ASIDE.sub("", s).strip()
    s = _EDGE_QUOTE.sub("", s).strip()
    s = s.lstrip("$").strip()
    return s.rstrip("%").strip()


def clean_lenient(value: Any) -> str:
    """``clean`` plus typographic quotes, thousands separators, whitespace and
    trailing sentence punctuation ("Paris." == "Paris")."""
    s = str(value).replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')
    s = collapse_whitespace(s)
    s = s.rstrip(" .;:!?,")
    s = clean(s)
    s = drop_thousands_separators(s)
    return collapse_whitespace(s.rstrip(" .;:!?,"))


# ---------------------------------------------------------------- official ----

def _int_official(pred: str, gold: Any) -> float:
    try:
        gold_value, pred_value = int(gold), int(float(pred))
    except (ValueError, TypeError, OverflowError):
        return 0.0
    return float(gold_value == pred_value)


def _float_official(pred: str, gold: Any) -> float:
    try:
        gold_value = float(clean(gold))
    except (ValueError, OverflowError):
        return 0.0  # the official code raises here; an unscoreable gold gives 0
    try:
        pred_value = float(clean(pred))
    except (ValueError, OverflowError):
        return 0.0
    return float(float_match(gold_value, pred_value))


def _str_official(pred: str, gold: Any) -> float:
    g, p = clean(gold), clean(pred)
    if needs_exact_match(g):
        return float(g == p)
    return anls(g, p)


def _pred_items_official(pred: str) -> list[Any]:
    items = as_items(pred)
    return items if items is not None else [pred]


def _list_official(pred: str, gold: Any) -> float:
    gold_items = as_items(gold)
    if gold_items is None:
        gold_items = [gold]
    pred_items = _pred_items_official(pred)
    if len(gold_items) != len(pred_items):
        return 0.0
    if not gold_items:
        return 1.0
    g = sorted(clean(item_text(x)) for x in gold_items)
    p = sorted(clean(item_text(x)) for x in pred_items)
    if is_float_text(g[0]) or needs_exact_match(g[0]):
        return float("-".join(g) == "-".join(p))
    return min(anls(a, b) for a, b in zip(g, p))


# ----------------------------------------------------------------- lenient ----

def _int_lenient(pred: str, gold: Any) -> float:
    g, p = read_number(gold), read_number(pred)
    if g is None:  # mislabelled format (e.g. Int gold "14:04 CET"): compare as text
        return _str_lenient(pred, gold)
    return float(p is not None and g == p)


def _float_lenient(pred: str, gold: Any) -> float:
    g, p = read_number(gold), read_number(pred)
    if g is None:
        return _str_lenient(pred, gold)
    return float(p is not None and float_match(g, p))


def _str_lenient(pred: str, gold: Any) -> float:
    g, p = clean_lenient(gold), clean_lenient(pred)
    if needs_exact_match(g):
        return float(g == p)
    return anls(g, p)


def item_score_lenient(pred_item: Any, gold_item: Any) -> float:
    """One list item: numbers equal as numbers, exact-match strings equal,
    anything else ANLS."""
    g, p = clean_lenient(item_text(gold_item)), clean_lenient(item_text(pred_item))
    if is_float_text(g):
        pv = read_number(p)
        return float(pv is not None and pv == float(g))
    if needs_exact_match(g):
        return float(g == p)
    return anls(g, p)


def best_pairing(pred_items: list[Any], gold_items: list[Any]) -> list[float]:
    """Greedy one-to-one pairing, best-scoring pairs first: one score per gold
    item (0 where no prediction is left). Order of either list is ignored."""
    table = [[item_score_lenient(p, g) for p in pred_items] for g in gold_items]
    pairs = sorted(((table[gi][pi], gi, pi) for gi in range(len(gold_items))
                    for pi in range(len(pred_items))), key=lambda t: -t[0])
    scores = [0.0] * len(gold_items)
    used_g: set[int] = set()
    used_p: set[int] = set()
    for value, gi, pi in pairs:
        if gi in used_g or pi in used_p:
            continue
        scores[gi] = value
        used_g.add(gi)
        used_p.add(pi)
    return scores


def pred_items_lenient(pred: str, expected: int) -> list[Any]:
    """Prediction list items, forgiving a sentence stop after "[...]" and
    missing brackets (split toward the gold's item count)."""
    pred = pred.strip()
    if pred.startswith("["):
        pred = pred.rstrip(" .;:!?")
    items = as_items(pred)
    if items is not None:
        return items
    return split_unbracketed(pred, expected) if pred.strip() else []


def _list_lenient(pred: str, gold: Any) -> float:
    gold_items = as_items(gold)
    if gold_items is None:
        gold_items = [gold]
    pred_items = pred_items_lenient(pred, len(gold_items))
    if len(gold_items) != len(pred_items):
        return 0.0
    if not gold_items:
        return 1.0
    return min(best_pairing(pred_items, gold_items))


# ------------------------------------------------------------------ entry ----

_OFFICIAL = {"int": _int_official, "float": _float_official, "str": _str_official,
             "none": _str_official, "list": _list_official}
_LENIENT = {"int": _int_lenient, "float": _float_lenient, "str": _str_lenient,
            "none": _str_lenient, "list": _list_lenient}


def score_mmlongbench(pred: str, gold: Any, fmt: str, mode: str) -> float:
    """Score one prediction; ``fmt`` is the canonical format (int/float/str/list/none)."""
    if mode == "official":
        return _OFFICIAL[fmt](pred, gold)
    gold_unanswerable = fmt == "none" or (isinstance(gold, str) and gold.strip() == NOT_ANSWERABLE)
    if gold_unanswerable:
        return float(is_not_answerable(pred))
    if is_not_answerable(pred):
        return 0.0
    return _LENIENT[fmt](pred, gold)
