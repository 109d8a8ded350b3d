"""The answer string in a reader's raw reply.

Why it exists: the reader prompt (``mage_gym.readers.prompt``) asks for a
final ``<answer>...</answer>`` block, but models reason first, repeat the tag
inside their reasoning, get cut off, or ignore the format. Scoring compares
strings, so the extraction decides a large share of the score; one function
used by every reader keeps that decision in one place.

Order of preference:

1. ``<think>...</think>`` reasoning is dropped.
2. The last non-empty ``<answer>...</answer>`` block (tags in any case); if a
   block is opened but never closed (the reply was cut off), what follows the
   last opening tag.
3. The text after the last "Answer:" / "Final answer:" label, or after "the
   answer is".
4. The last non-empty line.

The result is normalised: markdown emphasis and an inner "Answer:" label
removed, whitespace collapsed, a bullet list turned into a list literal
(``["a", "b"]``), the full stop after a bare number dropped, and any
"cannot be answered from the document" phrasing mapped to exactly
``"Not answerable"`` (the rule lives in :func:`mage_gym.scoring.is_not_answerable`,
shared with lenient scoring).
"""
from __future__ import annotations

import json
import re

from mage_gym.scoring.text import NOT_ANSWERABLE, collapse_whitespace, is_not_answerable

__all__ = ["NOT_ANSWERABLE", "extract_answer"]

_THINK = re.compile(r"<think>.*?</think>", re.IGNORECASE | re.DOTALL)
_BLOCK = re.compile(r"<\s*answer\s*>(.*?)<\s*/\s*answer\s*>", re.IGNORECASE | re.DOTALL)
_OPEN = re.compile(r"<\s*answer\s*>", re.IGNORECASE)
_STRAY_TAG = re.compile(r"<\s*/?\s*answer\s*>", re.IGNORECASE)
_LABEL = re.compile(r"(?:^|\n)[ \t*_#>-]*(?:final\s+)?answer[ \t*_]*[:\uff1a][ \t*_]*(?P<rest>[^\n]*)",
                    re.IGNORECASE)
_ANSWER_IS = re.compile(r"\bthe\s+(?:final\s+)?answer\s+is\s*:?\s*(?P<rest>[^\n]+)", re.IGNORECASE)
_INNER_LABEL = re.compile(r"^(?:final\s+)?answer\s*[:\uff1a]\s*", re.IGNORECASE)
_EMPHASIS = re.compile(r"^(\*\*|__|\*|_|`+)(.+?)\1$", re.DOTALL)
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+(?P<item>.+?)\s*$")
_NUMBER_WITH_STOP = re.compile(r"^[-+$\u20ac\u00a3]?\d[\d,]*(?:\.\d+)?%?\.$")


def _candidate(raw: str) -> str:
    text = _THINK.sub("", raw)
    blocks = [b for b in _BLOCK.findall(text) if b.strip()]
    if blocks:
        return blocks[-1]
    opened = list(_OPEN.finditer(text))
    if opened:
        tail = _STRAY_TAG.sub("", text[opened[-1].end():])
        if tail.strip():
            return tail
    labelled = [m.group("rest") for m in _LABEL.finditer(text) if m.group("rest").strip(" *_")]
    if labelled:
        return labelled[-1]
    stated = [m.group("rest") for m in _ANSWER_IS.finditer(text)]
    if stated:
        return stated[-1]
    lines = [ln for ln in _STRAY_TAG.sub("", text).splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _as_list_literal(text: str) -> str | None:
    """A block of bullet lines -> '["a", "b"]'; None if it is not one."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) < 2:
        return None
    items = []
    for line in lines:
        m = _BULLET.match(line)
        if m is None:
            return None
        items.append(collapse_whitespace(m.group("item")).strip("*_` "))
    return json.dumps(items, ensure_ascii=False)


def _strip_markup(text: str) -> str:
    text = text.strip()
    for _ in range(3):  # nested "**`x`**"
        m = _EMPHASIS.match(text)
        if m is None:
            break
        text = m.group(2).strip()
    return text


def extract_answer(raw: str | None) -> str:
    """The normalised final answer in ``raw`` ("" when there is none)."""
    if not raw:
        return ""
    candidate = _candidate(str(raw))
    listed = _as_list_literal(candidate)
    if listed is not None:
        return listed
    answer = collapse_whitespace(candidate)
    answer = _strip_markup(answer)
    answer = _INNER_LABEL.sub("", answer)
    answer = _strip_markup(answer).strip()
    if _NUMBER_WITH_STOP.match(answer):
        answer = answer[:-1]
    if is_not_answerable(answer):
        return NOT_ANSWERABLE
    return answer
