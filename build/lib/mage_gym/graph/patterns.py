"""Text patterns shared by the parsers, the OCR line grouping and the edge builder.

Why one module: "is this line a bullet?" and "is this block a caption?" are
asked by the fast parser, by the OCR line grouping (scans) and by the layout
adapter; copies of a pattern drift apart (one gained a glyph, another lost a
label) and the same page then parsed differently by route. Each pattern here
has one meaning; where two places really ask different questions, both
patterns live here under names that say how they differ.

Bullets
  :data:`BULLET_GLYPHS` are the characters PDFs and OCR use as bullets,
  including the private-use code points of the Symbol and Wingdings fonts
  (a text layer that kept the font's own code) and ``»`` (how OCR reads arrow
  bullets). :data:`LIST_ITEM_RE`: a line that opens a list item, by a glyph
  or by an enumerator (``-``, ``1.``, ``a)``, ``(iv)``) followed by a space or
  the line's end. :data:`BULLET_ONLY_RE`: a line that is nothing but a glyph
  or a dash other than the em dash (drawn apart from its text; the parsers
  glue it to the text on its right).

Captions
  :data:`CAPTION_RE` types a *block anywhere on a page* as a caption, so it
  asks for a label and a number ("Figure 3", "Table IV", "Exhibit 2a").
  :data:`CAPTION_LIKE_RE` is the edge builder's looser test for a *text
  element already next to a visual* (it only pairs texts within a short gap
  of a figure, chart or table): more labels (``tab``, ``illustration``,
  ``photo``, ``image``, ``map``) and a letter or punctuation instead of a
  number ("Figure A", "Chart:").

OCR
  Lines read off a scan are noisier than a text layer, so the OCR line
  grouping asks both questions its own way: :data:`OCR_LIST_ITEM_RE` and
  :data:`OCR_CAPTION_RE` (their comments say how and why).
"""
from __future__ import annotations

import re

#: Characters used as bullets: typographic glyphs, Symbol/Wingdings private-use codes, OCR's ``»``.
BULLET_GLYPHS = (
    "\u2022\u25cf\u25aa\u25a0\u25e6\u2023\u2043\u2219\u00b7\u25cb\u25a1\u27a2\u25ba\u2713\u2714\u00bb"
    "\uf0b7\uf0a7\uf0d8\uf076\uf0fc\uf0a8"
)
#: Dashes and the asterisk: bullets only when a space follows (else they are text: "-5", "*note").
_DASHES = "\u2013\u2014\\-\\*"

#: A line opening a list item: a bullet glyph, or a dash/enumerator then a space or the line's end.
LIST_ITEM_RE = re.compile(
    rf"^\s*([{BULLET_GLYPHS}]"
    rf"|([{_DASHES}]|\(?\d{{1,3}}[.)](?!\d)|\(?[a-zA-Z][.)]|\((?:[ivxIVX]{{1,5}}|[a-zA-Z])\))(\s+|$))"
)
#: A line that is only a bullet glyph, en dash, hyphen or asterisk (PDFs often draw the bullet as its
#: own text run). Not the em dash: alone on a line it is a table's "nil" cell (734 such lines in the
#: first 40 pages of the dev filings), which must not be glued to the next cell as a bullet.
BULLET_ONLY_RE = re.compile(rf"^\s*[{BULLET_GLYPHS}\u2013\-\*]\s*$")

#: A block that is a caption: a figure/table label and a number, at the start.
CAPTION_RE = re.compile(
    r"^\s*(figure|fig\.?|table|chart|exhibit|graph|plate|diagram)\s*[\dIVX]+[a-z]?\s*[.:\-\u2013\u2014|]?",
    re.IGNORECASE,
)
#: A text element next to a visual that names it: wider labels, a number, letter or punctuation after.
CAPTION_LIKE_RE = re.compile(
    r"^\s*(fig(?:ure)?|chart|graph|table|tab|exhibit|plate|diagram|illustration|photo|image|map)\b\.?\s*"
    r"(?:[0-9ivxlc]+|[a-z]\b|[:.\-\u2013\u2014])",
    re.IGNORECASE,
)

#: OCR's list-item test (scans): a marker must be followed by a space, enumerators are 1-2 digits or
#: a letter a-h. Why apart: a lone "*" or "-" that OCR reads off a scan is a speck or a rule, not an
#: item. (With both text-layer tests instead, 64 of the 462 dev scan pages parse differently.)
OCR_LIST_ITEM_RE = re.compile(
    r"^\s*([\u2022\u25cf\u25aa\u25a0\u25e6\u2023\u2043\u2219\u00b7\u27a2\u25ba\u2713\u2714\u00bb]"
    r"|([\-\u2013\u2014\*]|\(?\d{1,2}[.)]|\(?[a-hA-H][.)])\s+)"
)
#: OCR's caption test (scans): also "Source: ..." attributions and labels whose number OCR lost. Why
#: apart: slides saved as pictures print the source under each chart (20 such captions on the dev
#: scans), and OCR often misreads or drops a figure number; text-layer pages keep the strict test.
OCR_CAPTION_RE = re.compile(r"^\s*(figure|fig\.?|table|chart|exhibit|graph|source)\s*[\dIVX]*[.:\s]", re.IGNORECASE)


def is_bullet_only(text: str) -> bool:
    """A line that is nothing but a bullet glyph (PDFs often draw it apart)."""
    return bool(BULLET_ONLY_RE.match(text))


__all__ = ["BULLET_GLYPHS", "LIST_ITEM_RE", "BULLET_ONLY_RE", "CAPTION_RE", "CAPTION_LIKE_RE", "OCR_LIST_ITEM_RE",
           "OCR_CAPTION_RE", "is_bullet_only"]
