"""LongDocURL answer scoring.

``official`` follows the benchmark's scorer ``utils/utils_score_v3.py``
(github dengc2023/LongDocURL, imported by its ``utils/calculate_metrics.py``).
The repository ships that file only compiled; the rules below were read from
copies of it vendored in third-party evaluation code (two copies agree on
them). Its rules:

- Cleaning: lower-case, remove every comma (so "96,395" reads as 96395),
  strip unit words, then as MMLongBench-Doc: "(...)" asides, edge quotes,
  leading "$" and "£", trailing "%". The unit stripping uses
  ``str.rstrip(unit)``, which removes trailing *characters* from the unit's
  letter set: "10 minutes" -> "10" as intended, but also "platinum" ->
  "platinu" and "5 km" -> "5 k". Both sides are cleaned the same way, so this
  mostly cancels; it is reproduced.
- Integer: ``int()`` of the cleaned text ("3.0" does not parse: score 0).
- Float: MMLongBench-Doc's float rule (1% relative, coarser rounding, x100
  and /100).
- String / None: exact match for the MMLongBench exact-match categories, else
  ANLS (threshold 0.5).
- List: dict items become their values joined by "-". If the first gold item
  is a number or exact-match string, the joined lists must be equal *in
  order*; otherwise each gold item takes its best ANLS over all predicted
  items (an item may be reused), the mean is multiplied by
  ``min(1, len(gold)/len(pred)) ** 0.5`` (a penalty for over-long answers),
  and lists of different length still earn partial credit.
- The prediction "Fail to extract" scores 0 (the benchmark's extraction
  failure marker).

``lenient`` strips unit words only as whole words after a number, accepts
integer-valued floats and numbers inside short phrases, scores number lists
with the same greedy rule using exact numeric item matches (so order does not
matter), splits unbracketed lists, maps "not answerable" paraphrases, and compares a
non-numeric Integer/Float gold as a string.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from mage_gym.scoring.mmlongbench import clean_lenient, item_score_lenient, pred_items_lenient
from mage_gym.scoring.text import (
    NOT_ANSWERABLE,
    anls,
    as_items,
    float_match,
    is_float_text,
    is_not_answerable,
    item_text,
    literal_list,
    needs_exact_match,
    read_number,
)

FAIL_TO_EXTRACT = "Fail to extract"

# Order matters: the official code checks these suffixes one after another.
_UNIT_SUFFIXES = ("kg", "mm", "m", "meters", "acres", "minutes", "mile", "miles",
                  "million", "thousand", "billion")
_ASIDE = re.compile(r"\s*\([^)]*\)")
_EDGE_QUOTE = re.compile(r"^['\"]|['\"]$")
_LENIENT_UNIT = re.compile(r"(?<=\d)\s*(?:" + "|".join(sorted(_UNIT_SUFFIXES, key=len, reverse=True)) + r")$")


def clean(value: Any) -> str:
    """The official LongDocURL ``get_clean_string`` (character-set unit strip)."""
    s = str(value).lower().strip().replace(",", "")
    for suffix in _UNIT_SUFFIXES:
        if s.endswith(suffix):
            s = s.rstrip(suffix).strip()
    s = _ASIDE.sub("", s).strip()
    s = _EDGE_QUOTE.sub("", s).strip()
    s = s.lstrip("$").strip()
    s = s.lstrip("\u00a3").strip()
    return s.rstrip("%").strip()


def _clean_fixed(value: Any) -> str:
    """Lenient cleaning: units removed only as a whole word after a number."""
    s = clean_lenient(value).replace(",", "")
    s = _LENIENT_UNIT.sub("", s).strip()
    return s.lstrip("\u00a3").strip()


# ---------------------------------------------------------------- official ----

def _parse_int(text: str) -> int | None:
    try:
        return int(text)
    except (ValueError, OverflowError):
        return None


def _parse_float(text: str) -> float | None:
    try:
        return float(text)
    except (ValueError, OverflowError):
        return None


def _integer_official(pred: str, gold: Any) -> float:
    g_text, p_text = clean(gold), clean(pred)
    g, p = _parse_int(g_text), _parse_int(p_text)
    # The official code keeps an unparseable gold as its string and an
    # unparseable prediction as "": they compare equal only if both are "".
    gold_value: object = g if g is not None else g_text
    pred_value: object = p if p is not None else ""
    return float(gold_value == pred_value)


def _float_official(pred: str, gold: Any) -> float:
    g, p = _parse_float(clean(gold)), _parse_float(clean(pred))
    if g is None or p is None:
        return 0.0
    return float(float_match(g, p))


def _string_official(pred: str, gold: Any) -> float:
    g, p = clean(gold), clean(pred)
    if needs_exact_match(g):
        return float(g == p)
    return anls(g, p)


def _items(value: Any) -> list[Any]:
    items = as_items(value)
    return items if items is not None else [value]


def _official_items(value: Any) -> list[Any]:
    """Official reading: a "[...]" string that is not a literal stays one item."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str) and value.strip().startswith("["):
        parsed = literal_list(value.strip())
        return parsed if parsed is not None else [value]
    return [value]


def _greedy(gold: list[str], pred: list[Any], item_score: Callable[[Any, Any], float]) -> float:
    """Each gold item's best score over all predicted items (reuse allowed),
    averaged, times the over-length penalty ``min(1, |gold|/|pred|) ** 0.5``."""
    best = [max(item_score(p, g) for p in pred) for g in gold]
    return sum(best) / len(gold) * min(1.0, len(gold) / len(pred)) ** 0.5


def _list_official(pred: str, gold: Any) -> float:
    gold_items, pred_items = _official_items(gold), _official_items(pred)
    if not pred_items or not gold_items:  # the official code would index [0] and raise
        return 0.0
    g = [clean(item_text(x)) for x in gold_items]
    p = [clean(item_text(x)) for x in pred_items]
    if is_float_text(g[0]) or needs_exact_match(g[0]):
        return float("-".join(g) == "-".join(p))
    return _greedy(g, p, lambda pv, gv: anls(str(gv), str(pv)))


# ----------------------------------------------------------------- lenient ----

def _integer_lenient(pred: str, gold: Any) -> float:
    g, p = read_number(_clean_fixed(gold)), read_number(_clean_fixed(pred))
    if g is None:  # mislabelled format: compare as text
        return _string_lenient(pred, gold)
    return float(p is not None and g == p)


def _float_lenient(pred: str, gold: Any) -> float:
    g, p = read_number(_clean_fixed(gold)), read_number(_clean_fixed(pred))
    if g is None:
        return _string_lenient(pred, gold)
    return float(p is not None and float_match(g, p))


def _string_lenient(pred: str, gold: Any) -> float:
    g, p = _clean_fixed(gold), _clean_fixed(pred)
    if needs_exact_match(g):
        return float(g == p)
    return anls(g, p)


def _list_lenient(pred: str, gold: Any) -> float:
    gold_items = _items(gold)
    pred_items = pred_items_lenient(pred, len(gold_items))
    if not pred_items or not gold_items:
        return float(not pred_items and not gold_items)
    return _greedy([item_text(x) for x in gold_items], pred_items, item_score_lenient)


# ------------------------------------------------------------------ entry ----

_OFFICIAL = {"int": _integer_official, "float": _float_official, "str": _string_official,
             "none": _string_official, "list": _list_official}
_LENIENT = {"int": _integer_lenient, "float": _float_lenient, "str": _string_lenient,
            "none": _string_lenient, "list": _list_lenient}


def score_longdocurl(pred: str, gold: Any, fmt: str, mode: str) -> float:
    """Score one prediction; ``fmt`` is the canonical format (int/float/str/list/none)."""
    if pred.strip() == FAIL_TO_EXTRACT:
        return 0.0
    if mode == "official":
        return _OFFICIAL[fmt](pred, gold)
    gold_unanswerable = fmt == "none" or (isinstance(gold, str) and gold.strip() == NOT_ANSWERABLE)
    if gold_unanswerable:
        return float(is_not_answerable(pred))
    if is_not_answerable(pred):
        return 0.0
    return _LENIENT[fmt](pred, gold)
