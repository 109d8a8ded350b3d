"""Short extractive summaries of elements and pages.

Why: the LLM evaluator's text view and the reader's view of *non-opened*
nodes show a summary instead of the full text, so a summary must say what the
node is about in one line (~160 characters) without any model call. It is
extractive (first sentence(s), a table's caption/header and size, a figure's
caption) so it never invents content.
"""
from __future__ import annotations

import re
from typing import Sequence

MAX_CHARS = 160
_SENT_END = re.compile(r"(?<=[.!?;:])\s+(?=[\"'(\[]?[A-Z0-9])")
_WS = re.compile(r"\s+")


def clean(text: str) -> str:
    """Collapse whitespace (parsers keep line breaks of the PDF layout)."""
    return _WS.sub(" ", text or "").strip()


def truncate(text: str, limit: int = MAX_CHARS) -> str:
    """Cut at a word boundary and mark the cut with an ellipsis."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    sp = cut.rfind(" ")
    if sp > limit // 2:
        cut = cut[:sp]
    return cut.rstrip(" ,;:-") + "\u2026"


def first_sentences(text: str, limit: int = MAX_CHARS) -> str:
    """Whole leading sentences that fit in ``limit``; the first one cut if it alone is too long."""
    t = clean(text)
    if len(t) <= limit:
        return t
    parts = _SENT_END.split(t)
    out = ""
    for p in parts:
        cand = f"{out} {p}".strip()
        if len(cand) > limit:
            break
        out = cand
    return out if out else truncate(t, limit)


def _md_rows(markdown: str) -> list[list[str]]:
    rows = []
    for line in markdown.splitlines():
        line = line.strip()
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells and all(re.fullmatch(r":?-{2,}:?", c) for c in cells if c):
            continue  # the |---|---| separator
        rows.append(cells)
    return rows


def table_shape(markdown: str | None, text: str) -> tuple[int, int]:
    """(rows, columns) from markdown, else from text lines (columns unknown = 0)."""
    if markdown:
        rows = _md_rows(markdown)
        if rows:
            return len(rows), max(len(r) for r in rows)
    lines = [ln for ln in (text or "").splitlines() if ln.strip()]
    return len(lines), 0


def summarize_table(text: str, markdown: str | None, caption: str = "", limit: int = MAX_CHARS) -> str:
    """``Table (R x C): <caption or header row>``: what it is about and how big it is."""
    rows, cols = table_shape(markdown, text)
    size = f"{rows}x{cols}" if cols else f"{rows} rows"
    head = clean(caption)
    if not head and markdown:
        md = _md_rows(markdown)
        if md:
            head = " | ".join(c for c in md[0] if c)
    if not head:
        head = clean(text)
    prefix = f"Table ({size})"
    return truncate(f"{prefix}: {head}" if head else prefix, limit)


def summarize_visual(etype: str, text: str, caption: str = "", limit: int = MAX_CHARS) -> str:
    """A figure or chart: its caption when one is adjacent, else the text found inside it."""
    kind = etype.capitalize()
    if clean(caption):
        return truncate(f"{kind}: {clean(caption)}", limit)
    inner = clean(text)
    return truncate(f"{kind} (text inside): {inner}", limit) if inner else f"{kind} (no text)"


def summarize_element(etype: str, text: str, table_markdown: str | None = None, caption: str = "",
                      limit: int = MAX_CHARS) -> str:
    """One-line summary of an element of any type."""
    if etype == "table":
        return summarize_table(text, table_markdown, caption, limit)
    if etype in ("figure", "chart"):
        return summarize_visual(etype, text, caption, limit)
    if etype == "title":
        return truncate(clean(text), limit)
    return first_sentences(text, limit)


def summarize_page(titles: Sequence[str], first_paragraph: str, fallback: str = "",
                   limit: int = MAX_CHARS, max_titles: int = 3) -> str:
    """A page's titles (the first few), then the first sentence of its first paragraph.

    Titles get at most ~60 % of the budget when there is a paragraph, so a
    page with many headings still shows what its text says. ``fallback``
    (e.g. the page's text) is used when the page has neither, such as a slide
    that is only a chart.
    """
    uniq = list(dict.fromkeys(t for t in (clean(t) for t in titles) if t))
    heads = " / ".join(uniq[:max_titles])
    body = first_sentences(first_paragraph, limit) if first_paragraph else ""
    if body:
        body = _SENT_END.split(body)[0]
        heads = truncate(heads, int(limit * 0.6)) if heads else heads
    text = " \u2014 ".join(p for p in (heads, body) if p)
    if not text:
        text = first_sentences(fallback, limit)
    return truncate(text, limit)
