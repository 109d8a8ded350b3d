"""Explicit cross-references: "see Figure 3", "Table 2", "Section 4.1", "Note 7", "page 12" -> their targets.

Why a relation of its own (beyond the paper's five): a question often names
what a document's text points at ("the chart in Figure 4", "Note 7 of the
filing"), and the element that mentions it may sit pages away from the
target. Reading order, layout and the section tree do not join them; the
semantic k-NN joins them only when their words happen to agree. A reference
edge goes from the mentioning element to the element that *defines* the label
(a caption or table/figure starting with "Figure 3", a heading starting with
"4.1" or "Appendix B" or "Note 7") or, for a printed page label ("see page
12"), to the page whose header or footer prints that number.

Rules, kept simple so their precision can be measured:

- a mention is a label word and a number/letter (:data:`MENTION_RE`); a mention
  at the very start of a caption, heading, table or figure, or of any element
  when a separator follows it ("Note 7. Debt", "Table 2: Sales"), is that
  element's own label (it defines it), not a reference, and is skipped;
- a mention naming another document ("Exhibit 10.3 to the Quarterly Report on
  Form 10-Q", "Note 20 of the 2020 Form 10-K", "Code Section 409A") is found
  but marked ``external`` and never linked; so is a three-digit section number
  ("Section 409A", "Section 162(m)"): statutes number their sections so;
- the target of a figure/table/exhibit/chart label is the element whose text
  *starts* with the same label and number (a caption, heading, table or
  figure; any other element only when a separator and a title follow, as in
  "Note 7. Debt", so a wrapped line opening "Section 6.1 and ..." defines
  nothing); of several, a caption or heading beats a table/figure, which beats
  any other type, a table-of-contents line (ending in a page number) comes
  after the rest, and then the one nearest the mention in reading order;
- only when nothing defines a note, section or appendix outright, a short
  heading with its bare number ("4. Restructuring Charges", "3.3 Credited
  Service: The amount ...") that the parser typed as a list or paragraph
  defines it, and a heading after page 1 opening with a capital letter
  ("B.1 Setup") defines the appendix; a panel ("Figure 8c") falls back to
  its figure ("Figure 8");
- a figure/table label followed by a colon mid-text ("16.0 Table 3: Citation
  quality") is a caption the parser fused into a paragraph: a definition;
- sections, appendices and notes target headings (``title``) starting with the
  number (``4.1``), ``Section 4.1``, ``Appendix B`` or ``Note 7``;
- printed page labels target the one page whose header or footer holds that
  number as a whole token (none when no page or several pages do); the total
  in "Page 12 of 54" is no page's label.

:func:`find_references` returns every mention with its target (or none), so a
quality script can count mentions found vs linked and sample them for review.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from mage_gym.graph.schema import Element, Page

#: Label words, normalised: the key a mention and a definition must share.
_LABELS = {
    "figure": "figure", "fig": "figure", "figs": "figure", "figures": "figure",
    "table": "table", "tables": "table", "tab": "table",
    "exhibit": "exhibit", "exhibits": "exhibit",
    "chart": "chart", "charts": "chart",
    "section": "section", "sections": "section", "sec": "section", "§": "section",
    "appendix": "appendix", "appendices": "appendix",
    "note": "note", "notes": "note",
    "page": "page", "pages": "page", "p": "page", "pp": "page",
}
#: Letters and roman numerals are capitals only, whatever the label's case ("Appendix B", not "section a").
_NUM = r"(?:\d{1,3}(?:\.\d{1,3}){0,3}[a-z]?|(?-i:[A-Z](?:\.\d{1,2})?|[IVX]{1,5}))"
#: A mention: a label word, optional period, then a number, a capital letter (Appendix B) or a roman numeral.
MENTION_RE = re.compile(
    r"(?<![\w.])(?P<label>figures?|figs?|tables?|tab|exhibits?|charts?|sections?|sec|§|appendix|appendices|notes?"
    r"|pages?|pp?)(?:\.|\b)\s?(?P<num>" + _NUM + r")(?![\w])",
    re.IGNORECASE,
)
#: Page mentions must read as a pointer ("see page 12", "on page 12", "p. 12"), not a count ("12 pages").
_PAGE_POINTER_RE = re.compile(r"(?:see|on|at|in|refer to|from|to|cf\.?)\s+(?:the\s+)?$", re.IGNORECASE)
#: A mention naming another document is no link: "Exhibit 10.3 to the Quarterly Report on Form 10-Q", "Note 20 of
#: JPMorgan Chase's 2020 Form 10-K", "Section 409A of the Internal Revenue Code" (but "page 7 of this Form 10-Q").
_EXTERNAL_DOC_RE = re.compile(
    r"\b(?:Form\s+(?:10-K|10-Q|8-K|20-F|11-K|S-\d{1,2})|Internal Revenue Code|Code\b|Act\b|Regulations?\b"
    r"|Registration Statement|(?:Quarterly|Annual|Current) Report|Proxy Statement|File No)")
#: What may sit between a mention and "of/to/in <document>": a page range ("pages 8-32 of"), subsections
#: ("Section 162(m) of"), a note's title between commas ("Note 10, Goodwill, in our Annual Report").
_EXTERNAL_LINK_RE = re.compile(r"^(?:\s?[-\u2013]\s?\d{1,4})?(?:\([a-z0-9]{1,4}\))*(?:,\s*[A-Z][^,.;]{0,60},)?"
                               r"[\s,)\]]*(?:of|to|in|under)\s")
#: A three-digit section number is a statute's ("Section 409A", "Section 162(m)"), not a report's.
_STATUTE_SECTION_RE = re.compile(r"\d{3}[A-Z]?")
_EXTERNAL_BEFORE_RE = re.compile(r"(?:\bCode|\bAct|\bRegulations?|\bERISA|Treas\.\s*Reg\.)\s*$")
_SENTENCE_END_RE = re.compile(r"[.;](?:\s|$)")
#: Which mention labels point at which target kind.
VISUAL_LABELS = ("figure", "table", "exhibit", "chart")
HEADING_LABELS = ("section", "appendix", "note")
_DEF_RE = re.compile(r"^\s*(?P<label>figure|fig\.?|table|exhibit|chart|section|appendix|note)\s?(?P<num>" + _NUM
                     + r")(?![\w])", re.IGNORECASE)
#: What ends a label that opens a block of its own ("Note 7. Debt", "Table 2: Sales", "NOTE 7 - DEBT").
_DEF_END_RE = re.compile(r"\s*(?:[.:\u2013\u2014-](?:\s|$|(?=[A-Z]))|$)")  # "Figure 9:Few-shot" too
#: A caption fused into a paragraph by the parser, mid-text: "... 16.0 Table 3: Citation quality".
_FUSED_CAPTION_RE = re.compile(r":\s?[A-Z]")
#: A paper's appendix heading: a capital letter (and subsection) then a capitalised word ("B.1 Setup").
_APPENDIX_HEADING_RE = re.compile(r"^\s*(?P<num>[A-Z](?:\.\d{1,2})?)\.?\s+[A-Z][a-z]")
#: A non-heading element defines a label only when a title follows it ("Note 7. Debt"), not a wrapped line
#: that happens to open with "Section 6.1 and shall ..." or a fragment "Section 5.2.".
_DEF_TITLE_RE = re.compile(r"\s*[.:\u2013\u2014-]\s*[A-Za-z]")
#: A table-of-contents line ends with its page number; a real definition rarely does.
_TOC_LINE_RE = re.compile(r"\s\d{1,3}\s*$")
#: Weak definitions, used only when no element defines the label outright: a short numbered heading the parser
#: typed as a list or paragraph, as filings head their notes ("4. Restructuring Charges") and plans their
#: sections ("3.3 Credited Service: The amount of ...").
_NOTE_HEADING_RE = re.compile(r"^\s*(?P<num>\d{1,2})\.\s+[A-Z][^\s.;:]*(?:\s+[^\s.;:]+){0,7}\s*$")
_INLINE_SECTION_RE = re.compile(r"^\s*(?P<num>\d{1,2}\.\d{1,2}(?:\.\d{1,2})?)\s+[A-Z][^.:;]{0,60}?[.:]\s")
_SECTION_NUMBER_RE = re.compile(r"^\s*(?P<num>\d{1,2}(?:\.\d{1,2}){0,3})\.?\s+\S")
#: Element types whose leading label defines it (a paragraph opening "Table 2 shows" refers to it).
DEFINING_TYPES = frozenset({"caption", "title", "table", "figure", "chart"})
_TYPE_RANK = {"caption": 0, "title": 0, "table": 1, "figure": 1, "chart": 1}


@dataclass(frozen=True)
class Mention:
    """One cross-reference found in an element's text; ``target`` is a node index or -1 when unresolved."""

    source: int  # node index of the mentioning element
    label: str  # normalised label: figure, table, exhibit, chart, section, appendix, note, page
    number: str
    text: str  # the mention as written
    target: int
    start: int = 0  # character offset of the mention in the source element's text
    external: bool = False  # names another document (a filing, a statute): never linked


def _key(label: str, num: str) -> tuple[str, str]:
    return _LABELS.get(label.lower().rstrip("."), label.lower()), num.upper().rstrip(".")


def _weak_definitions(elements: Sequence[Element], n_pages: int) -> dict[tuple[str, str], list[int]]:
    """Label -> elements that head a note or section by its bare number (see :data:`_NOTE_HEADING_RE`)."""
    defs: dict[tuple[str, str], list[int]] = {}
    for pos, el in enumerate(elements):
        if el.type not in ("title", "list", "paragraph"):
            continue
        m = _NOTE_HEADING_RE.match(el.text)
        if m and not _TOC_LINE_RE.search(el.text):
            defs.setdefault(("note", m["num"]), []).append(n_pages + pos)
        m = _APPENDIX_HEADING_RE.match(el.text)
        if m and el.type == "title" and el.page > 0:  # page 0 holds the document's title ("A Survey of ...")
            defs.setdefault(("appendix", m["num"]), []).append(n_pages + pos)
        m = _INLINE_SECTION_RE.match(el.text)
        if m and el.type != "title":
            defs.setdefault(("section", m["num"]), []).append(n_pages + pos)
    return defs


def _definitions(elements: Sequence[Element], n_pages: int) -> dict[tuple[str, str], list[int]]:
    """Label -> node indices of the elements that define it (their text starts with the label)."""
    defs: dict[tuple[str, str], list[int]] = {}
    for pos, el in enumerate(elements):
        node = n_pages + pos
        m = _DEF_RE.match(el.text)
        if m and (el.type in DEFINING_TYPES or _DEF_TITLE_RE.match(el.text, m.end())):
            defs.setdefault(_key(m["label"], m["num"]), []).append(node)
        for f in MENTION_RE.finditer(el.text):
            if f.start() > 0 and _FUSED_CAPTION_RE.match(el.text, f.end()):
                defs.setdefault(_key(f["label"], f["num"]), []).append(node)
        if el.type == "title":
            s = _SECTION_NUMBER_RE.match(el.text)
            if s:
                defs.setdefault(("section", s["num"].upper()), []).append(node)
    return defs


#: "of 54" in a "Page 12 of 54" footer: the total, printed on every page, is no page's label.
_PAGE_TOTAL_RE = re.compile(r"\bof\s+\d{1,4}\b", re.IGNORECASE)


def _printed_page_labels(pages: Sequence[Page]) -> dict[str, int]:
    """Printed page number -> page index, for numbers printed in exactly one page's header or footer."""
    seen: dict[str, list[int]] = {}
    for p in pages:
        margins = _PAGE_TOTAL_RE.sub(" ", f"{p.header_text} {p.footer_text}")
        tokens = set(re.findall(r"(?<![\w.,])\d{1,4}(?![\w.,]\d)", margins))
        for t in tokens:
            seen.setdefault(t.lstrip("0") or "0", []).append(p.index)
    return {t: idx[0] for t, idx in seen.items() if len(idx) == 1}


def _choose(candidates: list[int], source: int, elements: Sequence[Element], n_pages: int) -> int:
    options = [c for c in candidates if c != source]
    if not options:
        return -1
    return min(options, key=lambda c: (_TYPE_RANK.get(elements[c - n_pages].type, 2),
                                       bool(_TOC_LINE_RE.search(elements[c - n_pages].text)), abs(c - source)))


def is_external(text: str, start: int, end: int) -> bool:
    """Whether the mention at ``text[start:end]`` names a part of another document (see :data:`_EXTERNAL_DOC_RE`)."""
    if _EXTERNAL_BEFORE_RE.search(text[max(0, start - 24): start]):
        return True
    after = text[end: end + 90]
    stop = _SENTENCE_END_RE.search(after)
    after = after[: stop.start()] if stop else after
    if not _EXTERNAL_LINK_RE.match(after):
        return False
    doc = _EXTERNAL_DOC_RE.search(after)
    return doc is not None and not re.search(r"\b(?:this|these)\b", after[: doc.start()], re.IGNORECASE)


def _parent(defs: dict[tuple[str, str], list[int]], label: str, num: str) -> list[int]:
    """The definitions of "Figure 8" for a mention of panel "Figure 8c" (none for other numbers)."""
    if label in VISUAL_LABELS and len(num) > 1 and num[-1].isalpha() and num[-2].isdigit():
        return defs.get((label, num[:-1]), [])
    return []


def find_references(pages: Sequence[Page], elements: Sequence[Element]) -> list[Mention]:
    """Every mention in the elements' text, resolved to a target node index (-1 when none is found)."""
    n_pages = len(pages)
    defs = _definitions(elements, n_pages)
    weak = _weak_definitions(elements, n_pages)
    printed = _printed_page_labels(pages)
    out: list[Mention] = []
    for pos, el in enumerate(elements):
        src = n_pages + pos
        for m in MENTION_RE.finditer(el.text):
            label, num = _key(m["label"], m["num"])
            at_start = m.start() == len(el.text) - len(el.text.lstrip())
            if at_start and label != "page" and (el.type in DEFINING_TYPES or _DEF_END_RE.match(el.text, m.end())):
                continue  # a caption's, heading's or note's own label: a definition, not a reference
            if label in VISUAL_LABELS and _FUSED_CAPTION_RE.match(el.text, m.end()):
                continue  # a caption the parser fused into this element: a definition too
            if label == "page" and (not num.isdigit()
                                    or not _PAGE_POINTER_RE.search(el.text[max(0, m.start() - 12): m.start()])):
                continue
            if is_external(el.text, m.start(), m.end()) or (label == "section" and _STATUTE_SECTION_RE.fullmatch(num)):
                out.append(Mention(source=src, label=label, number=num, text=m.group(0), target=-1,
                                   start=m.start(), external=True))
                continue
            if label == "page":
                target = printed.get(num.lstrip("0") or "0", -1)
                if target == el.page:
                    target = -1
            else:
                target = _choose(defs.get((label, num)) or weak.get((label, num)) or _parent(defs, label, num),
                                 src, elements, n_pages)
            out.append(Mention(source=src, label=label, number=num, text=m.group(0), target=target, start=m.start()))
    return out


def reference_pairs(pages: Sequence[Page], elements: Sequence[Element]) -> tuple[list[int], list[int]]:
    """(sources, targets) of the resolved mentions, one edge per distinct pair."""
    pairs = dict.fromkeys((m.source, m.target) for m in find_references(pages, elements) if m.target >= 0)
    return [s for s, _ in pairs], [t for _, t in pairs]
