"""Answer text from a reader's raw reply.

Why a thin layer: extraction and normalisation rules belong to
``mage_gym.readers.extract`` (shared with scoring); backends call this one
function so they never diverge. If that module is unavailable (a partial
checkout), a minimal local rule keeps readers working: the last
``<answer>...</answer>`` block, else the last non-empty line.
"""
from __future__ import annotations

import re
from typing import Callable

_BLOCK = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.IGNORECASE | re.DOTALL)

_EXTRACTOR: Callable[[str], object] | None = None


def _fallback_extract(raw: str) -> str:
    blocks = _BLOCK.findall(raw or "")
    if blocks:
        return blocks[-1].strip()
    lines = [ln.strip() for ln in (raw or "").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _extractor() -> Callable[[str], object]:
    global _EXTRACTOR
    if _EXTRACTOR is None:
        try:
            from mage_gym.readers.extract import extract_answer

            _EXTRACTOR = extract_answer
        except ImportError:
            _EXTRACTOR = _fallback_extract
    return _EXTRACTOR


def extract(raw: str) -> str:
    """The answer string in ``raw`` (never None for an answering reader)."""
    result = _extractor()(raw or "")
    result = getattr(result, "answer", result)  # tolerate a record-returning extractor
    return "" if result is None else str(result)


def has_answer_block(raw: str) -> bool:
    """True when the reply contains an ``<answer>`` block (LLM extraction not needed)."""
    return bool(_BLOCK.search(raw or ""))
