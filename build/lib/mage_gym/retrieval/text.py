"""Node texts and the one tokeniser used by lexical retrieval.

Why one module: the index and the queries must be tokenised identically, and
the text an element is searched by (tables as markdown, figures by their
caption-like summary) is a retrieval decision, not a parser one.
"""
from __future__ import annotations

import re

from mage_gym.graph.graph import EvidenceGraph
from mage_gym.graph.schema import Element

# Runs of 2+ letters/digits, or a single digit: numbers ("2019", "4.5" -> "4", "5")
# matter in document QA, while lone letters are mostly list markers and OCR noise.
# Underscores separate tokens. (bm25s' default pattern drops single digits.)
_TOKEN = re.compile(r"[^\W_]{2,}|\d")


def _stopwords() -> frozenset[str]:
    # bm25s ships NLTK's English list; apostrophe forms are irrelevant after \w+ splitting.
    from bm25s.stopwords import STOPWORDS_EN_PLUS

    return frozenset(w for w in STOPWORDS_EN_PLUS if "'" not in w)


STOPWORDS: frozenset[str] = _stopwords()


def tokenize(text: str | None) -> list[str]:
    """Lowercased word tokens without English stopwords; ``[]`` for empty text.

    Single letters are dropped (mostly noise from lists and OCR) but single
    digits are kept.
    """
    if not text:
        return []
    stop = STOPWORDS
    return [t for t in _TOKEN.findall(text.lower()) if t not in stop]


def element_text(element: Element) -> str:
    """What an element is searched by: its text, plus its table markdown when that adds cells."""
    text = element.text or ""
    md = element.table_markdown
    if md and md.strip() and md.strip() != text.strip():
        text = f"{text}\n{md}" if text else md
    if not text.strip():
        text = element.summary or ""
    return text


def page_text(graph: EvidenceGraph, page: int) -> str:
    """A page's searchable text: page text + table markdown it lacks + header/footer.

    Falls back to the elements' text when the page text is empty (a builder
    that fills elements only), so a page is never less findable than its parts.
    """
    p = graph.pages[page]
    elements = graph.elements_of_page(page)
    parts = [p.text] if p.text and p.text.strip() else [element_text(e) for e in elements]
    if p.text and p.text.strip():
        parts += [e.table_markdown for e in elements
                  if e.table_markdown and e.table_markdown.strip() and e.table_markdown not in p.text]
    parts += [t for t in (p.header_text, p.footer_text) if t and t.strip()]
    return "\n".join(t for t in parts if t)
