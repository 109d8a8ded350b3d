"""String and number helpers shared by the benchmark scorers.

Why a separate module: ANLS, list parsing, number reading and the
"not answerable" phrase check are used by every benchmark's rules and by
answer extraction (``mage_gym.readers.extract``); keeping them here means the
reader and the scorer can never disagree on what counts as "not answerable".

Nothing here evaluates text as code: lists are read with
:func:`ast.literal_eval` (literals only) and, failing that, a small splitter.
"""
from __future__ import annotations

import ast
import json
import math
import re
from typing import Any

#: The one spelling of the unanswerable answer (MMLongBench-Doc's gold text).
NOT_ANSWERABLE = "Not answerable"

# Guard for ast.literal_eval: deeply nested or huge inputs can exhaust the
# parser; such "lists" are read by the splitter instead.
_MAX_LITERAL_CHARS = 20_000


# ---------------------------------------------------------------- ANLS ----

def levenshtein(a: str, b: str) -> int:
    """Edit distance (insert, delete, substitute: cost 1 each)."""
    if len(a) > len(b):
        a, b = b, a
    if not a:
        return len(b)
    previous = list(range(len(a) + 1))
    for j, cb in enumerate(b, start=1):
        current = [j]
        for i, ca in enumerate(a, start=1):
            if ca == cb:
                current.append(previous[i - 1])
            else:
                current.append(1 + min(previous[i - 1], previous[i], current[i - 1]))
        previous = current
    return previous[-1]


def anls(gold: str, pred: str, threshold: float = 0.5) -> float:
    """Normalised Levenshtein similarity, zeroed at or below ``threshold``.

    The form MMLongBench-Doc and LongDocURL use: ``1 - dist / max_len``, where
    ``max_len`` is measured on the upper-cased strings (their code does so; it
    only differs for characters such as "ß"), and a value ``<= threshold``
    becomes 0, so exactly 0.5 scores 0. Two empty strings score 1.
    """
    length = max(len(gold.upper()), len(pred.upper()))
    if length == 0:
        return 1.0
    # dist >= |len difference|: skip the quadratic distance when even the
    # best case cannot clear the threshold (long rambling predictions).
    if 1.0 - abs(len(gold) - len(pred)) / length <= threshold:
        return 0.0
    value = 1.0 - levenshtein(gold, pred) / length
    return value if value > threshold else 0.0


# --------------------------------------------------------- exact strings ----

_PHONE_OR_INT = re.compile(r"\b\d+(-\d+|\s\d+)?\b")
_YEAR_MONTH_DAY = re.compile(r"\b\d{4}[-\s]\d{2}[-\s]\d{2}\b")
_YEAR_MONTH = re.compile(r"\b\d{4}[-\s]\d{2}\b")
_EMAIL = re.compile(r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}")


def needs_exact_match(cleaned_gold: str) -> bool:
    """Whether a (cleaned) gold string is compared exactly rather than by ANLS.

    The categories of MMLongBench-Doc's ``is_exact_match`` (LongDocURL uses the
    same): URLs with ``https://``, ``.py``/``ipynb`` file names, strings that
    start with "page", integers and phone-like digit groups ("12", "3-4",
    "01983 873655"), times with "a.m."/"p.m.", dates YYYY-MM(-DD), e-mail
    addresses. Near misses on these are wrong answers, not typos.
    """
    s = cleaned_gold
    return bool(
        "https://" in s
        or s.endswith(".py")
        or s.endswith("ipynb")
        or s.startswith("page")
        or _PHONE_OR_INT.fullmatch(s)
        or "a.m." in s
        or "p.m." in s
        or _YEAR_MONTH_DAY.fullmatch(s)
        or _YEAR_MONTH.fullmatch(s)
        or _EMAIL.fullmatch(s)
    )


def is_float_text(text: str) -> bool:
    """``float(text)`` succeeds (Python's own grammar, as the official code tests)."""
    try:
        float(text)
    except (ValueError, TypeError):
        return False
    return True


# ----------------------------------------------------------- tolerances ----

def _decimals(value: float) -> int:
    """Digits after the point in ``str(value)``; 3 when there is no point.

    Mirrors the official ``get_precision`` (it reads Python's float repr, so
    ``1e-05`` counts as 3 and ``12.0`` as 1).
    """
    text = str(value)
    return len(text.split(".")[-1]) if "." in text else 3


def float_match(gold: float, pred: float) -> bool:
    """The benchmarks' float rule (MMLongBench-Doc ``is_float_equal``).

    The gold value, and the gold divided and multiplied by 100 (a percent
    given as a fraction or the reverse), each match when the prediction is
    within 1% relative (``math.isclose(rel_tol=0.01)``, relative to the larger
    magnitude) or when both agree after rounding to the coarser of their two
    precisions (at least 2 decimals): a gold 0.05 accepts 0.054.
    """
    for candidate in (gold / 100, gold, gold * 100):
        try:
            if math.isclose(candidate, pred, rel_tol=0.01):
                return True
            digits = max(min(_decimals(pred), _decimals(candidate)), 2)
            if round(pred, digits) == round(candidate, digits):
                return True
        except (OverflowError, ValueError):
            continue
    return False


# --------------------------------------------------------------- numbers ----

_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_NUMBER = re.compile(r"[-+\u2212]?(?:\d+(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?")
_UNIT_WORDS = (
    "percent", "per cent", "pct", "million", "millions", "billion", "billions", "thousand",
    "thousands", "trillion", "mn", "bn", "k", "m", "b", "km", "kg", "mm", "cm", "m2", "meters",
    "metres", "miles", "mile", "acres", "minutes", "hours", "days", "years", "people", "persons",
    "times", "usd", "dollars", "eur", "euros", "gbp", "pounds", "points", "pp",
)
_UNIT_TAIL = re.compile(r"\s*(?:" + "|".join(re.escape(u) for u in sorted(_UNIT_WORDS, key=len, reverse=True))
                        + r")\.?$")
_CURRENCY = "$€£¥₹"


def drop_thousands_separators(text: str) -> str:
    """"1,577,000" -> "1577000"; commas between words or short groups stay."""
    return _THOUSANDS.sub("", text)


def read_number(text: Any) -> float | None:
    """A single number stated in ``text``, forgiving formatting (lenient rules).

    Accepts currency signs, thousands separators, a percent sign, one trailing
    unit or scale word ("5.2 million", "12 people") and surrounding words when
    the text holds exactly one number ("about 12 people"). The value is read
    as written: "5.2 million" is 5.2, the scale is not applied, because the
    benchmarks' questions fix the unit ("in millions"). ``None`` when there is
    no number or more than one.
    """
    if isinstance(text, bool):
        return None
    if isinstance(text, (int, float)):
        return float(text) if math.isfinite(text) else None
    s = drop_thousands_separators(str(text).strip().lower())
    s = s.replace("\u2212", "-").strip(" ;:").rstrip(".")  # a stop after the number, not a leading point (".5")
    s = s.strip(_CURRENCY).strip()
    s = s.rstrip("%").strip()
    s = _UNIT_TAIL.sub("", s).strip()
    s = s.lstrip(_CURRENCY).strip().rstrip("%").strip()
    if re.fullmatch(_NUMBER, s):
        value = float(s.replace("\u2212", "-"))
        return value if math.isfinite(value) else None
    found = _NUMBER.findall(s)
    if len(found) == 1:
        value = float(found[0].replace("\u2212", "-"))
        return value if math.isfinite(value) else None
    return None


# ----------------------------------------------------------------- lists ----

def split_items(body: str) -> list[str]:
    """Split "a, 'b, c', d" on top-level commas; quoted items keep their commas.

    A quote opens an item only at its start, and closes it only when followed
    by a comma or the end, so apostrophes inside words ("Iran's") are safe.
    Empty items are dropped.
    """
    items: list[str] = []
    i, n = 0, len(body)
    while i < n:
        while i < n and body[i].isspace():
            i += 1
        if i >= n:
            break
        if body[i] in "'\"":
            quote, j, item = body[i], i + 1, None
            while item is None:
                k = body.find(quote, j)
                if k == -1:  # unterminated: the rest is the item
                    item, i = body[i + 1:], n
                    break
                rest = body[k + 1:].lstrip()
                if not rest or rest[0] == ",":
                    item = body[i + 1:k]
                    i = n - len(rest) + 1 if rest else n
                else:
                    j = k + 1
        else:
            k = body.find(",", i)
            if k == -1:
                item, i = body[i:], n
            else:
                item, i = body[i:k], k + 1
        item = item.strip()
        if item:
            items.append(item)
    return items


def literal_list(text: str) -> list[Any] | None:
    """``text`` as a Python or JSON list literal, or ``None`` if it is not one."""
    if len(text) > _MAX_LITERAL_CHARS:
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        try:  # JSON spells null/true/false differently (loaders store lists as JSON)
            value = json.loads(text)
        except (ValueError, RecursionError):
            return None
    return list(value) if isinstance(value, (list, tuple)) else None


def bracket_items(text: str) -> list[Any]:
    """Items of a "[...]" string: a literal list if it parses, else split.

    "[red, gray]" (unquoted, not a literal) is read as ["red", "gray"].
    """
    parsed = literal_list(text)
    if parsed is not None:
        return parsed
    body = text.strip()
    if body.startswith("["):
        body = body[1:]
    if body.endswith("]"):
        body = body[:-1]
    return split_items(body)


def as_items(value: Any) -> list[Any] | None:
    """A list value as is; a "[...]" string parsed; anything else ``None``."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str) and value.strip().startswith("["):
        return bracket_items(value.strip())
    return None


def split_unbracketed(text: str, expected: int) -> list[str]:
    """Read a list written without brackets ("a, b and c"; one item a line).

    The split that yields ``expected`` items wins (the gold decides how
    ambiguous separators are read); otherwise the comma split is returned.
    """
    text = text.strip()
    lines = [ln.strip(" -*\u2022\t") for ln in text.splitlines() if ln.strip(" -*\u2022\t")]
    candidates: list[list[str]] = [[text]]
    if len(lines) > 1:
        candidates.append(lines)
    candidates.append([p.strip() for p in re.split(r";", text) if p.strip()])
    commas = split_items(text)
    candidates.append(commas)
    if commas:
        last = re.split(r"\s+(?:and|&)\s+", commas[-1])
        candidates.append(commas[:-1] + [p.strip() for p in last if p.strip()])
    candidates.append([p.strip() for p in re.split(r",|;|\s+(?:and|&)\s+", text) if p.strip()])
    for cand in candidates:
        if len(cand) == expected:
            return cand
    return commas or [text]


def item_text(value: Any) -> str:
    """A list item as text; a dict item becomes its values joined by "-"."""
    if isinstance(value, dict):
        return "-".join(str(v) for v in value.values())
    return str(value)


# ------------------------------------------------------- not answerable ----

_MARKUP = re.compile(r"[*_`#>\"\u201c\u201d]+")
_EDGE_QUOTES = "'\u2018\u2019 "
_LEADING_LABEL = re.compile(r"^(?:final\s+)?answer\s*[:\-\u2013]\s*", re.IGNORECASE)

_CANNOT_WORDS = r"cannot|can\s?not|can't|could\s?not|couldn't"
_CANNOT = r"(?:" + _CANNOT_WORDS + r")"
_EVIDENCE = (r"(?:(?:the|this|these|provided|given|available|supplied|attached)\s+)*"
             r"(?:documents?|text|texts|context|pages?|evidence|sources?|images?|excerpts?|"
             r"information|passages?|materials?|report|file|data|content)")
_NOT_ANSWERABLE_PATTERNS = tuple(re.compile(p) for p in (
    r"(?:(?:this|the)\s+)?(?:question\s+)?(?:is\s+)?(?:not\s+answerable|unanswerable)\b",
    r"(?:(?:this|the|that)\s+)?(?:question\s+|answer\s+|information\s+|value\s+|it\s+)?"
    + _CANNOT + r"\s+be\s+(?:answered|determined|found|inferred|identified|calculated|computed|"
      r"derived|known|ascertained|established|located|extracted)\b",
    r"(?:it\s+is\s+|it's\s+)?(?:not\s+possible|impossible)\s+to\s+(?:answer|determine|tell|know|"
    r"find|say|infer|identify|calculate|compute)\b",
    r"(?:there\s+is\s+|there's\s+)?(?:not\s+enough|insufficient|no)\s+(?:relevant\s+|sufficient\s+)?"
    r"(?:information|evidence|data|context|details)\b",
    _EVIDENCE + r"\s+(?:does|do|did)(?:\s+not|n't)\s+(?:contain|provide|mention|specify|state|"
                r"include|say|give|show|answer|have|indicate|list|disclose|present|offer)\b",
    r"(?:i\s+)?(?:" + _CANNOT_WORDS + r"|am\s+unable\s+to|am\s+not\s+able\s+to|was\s+unable\s+to)"
    r"\s+(?:find|determine|answer|tell|locate|identify|infer)\b",
    r"(?:not|no)(?:\s+explicitly)?\s+(?:mentioned|provided|specified|stated|given|found|shown|"
    r"listed|indicated|disclosed)\b",
    r"(?:the\s+)?(?:information|answer|data)\s+(?:is\s+)?(?:not|un)\s*(?:available|provided|given|"
    r"mentioned|specified|stated|found|present)\b",
))


def is_not_answerable(text: Any) -> bool:
    """Whether an answer says the question cannot be answered from the document.

    Matches phrasings at the start of the answer only ("Not answerable.",
    "The document does not mention ...", "Cannot be determined from the
    provided pages", "Insufficient information"), so an answer that gives a
    value and then hedges is not mistaken for a refusal. Short answers that
    are legitimate values ("No", "None", "N/A", "Not applicable") are not
    matched.
    """
    if text is None:
        return False
    s = _MARKUP.sub("", str(text)).replace("\u2019", "'").strip(_EDGE_QUOTES)
    s = _LEADING_LABEL.sub("", s).strip(_EDGE_QUOTES)
    s = re.sub(r"\s+", " ", s).strip().lower()
    if not s:
        return False
    return any(p.match(s) for p in _NOT_ANSWERABLE_PATTERNS)


def collapse_whitespace(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()
