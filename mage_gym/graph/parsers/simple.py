"""Which PDF pages are too simple for the layout model: the layout parser's fast route.

Why: the layout model costs 0.2-0.5 CPU-s a page (most of it the image
network over a page render), whatever the page holds. A page whose text layer
is a few plain lines, with nothing drawn or placed on it, gives the model
nothing to find that the fast parser's rules do not find too: no picture,
chart or ruled table (those need images or vector paths), no text table (its
cells would split lines into separate pieces), no reading order or region
grouping to speak of. A generated report of one line a page, or a filing's
blank and near-blank pages, then costs milliseconds a page instead.

The rule, from the page's own structure and the document's font statistics
only (:func:`simple_page`); a page is *simple* when all of these hold:

1. no placed image and no vector path (``get_image_info``, ``get_cdrawings``);
2. its text is a single block (one run of text in one font, no gap: the
   fast parser's block split) or at most :data:`SIMPLE_MAX_LINES` lines
   (none at all: a blank page);
3. no two pieces of text stand side by side on one row (table cells,
   columns, labels: spans set apart within a line, or lines sharing a row);
4. the fast rules call no line page furniture (header or footer text). Which
   lines of a margin band are furniture is where the model's view is wanted,
   and where the two parsers' rules differ (the layout parser keeps any worded
   line of an otherwise empty page; the fast rules keep fine print there as
   furniture). A lone line of body text in a margin band, which the fast
   rules keep as content, is simple.

The simple page is typed by the fast parser's rules
(:func:`~mage_gym.graph.parsers.fast.classify`) with the document's
statistics, so a heading size ranks the same as on the model's pages.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mage_gym.graph.schema import ParsedPage

if TYPE_CHECKING:  # pragma: no cover
    import pymupdf

#: At most this many text lines (in any number of blocks) make a page simple (rule 2).
SIMPLE_MAX_LINES = 3


def simple_page(page: "pymupdf.Page", stats: Any = None, max_lines: int = SIMPLE_MAX_LINES) -> ParsedPage | None:
    """The page typed by the fast parser's rules when it is simple (module docstring), else None.

    ``stats`` are the document's :class:`~mage_gym.graph.parsers.fast.DocStats`
    (None: the page's own). The checks run cheapest first and stop at the
    first that fails: the text dictionary, then images, then vector paths.
    """
    from mage_gym.graph.parsers.fast import DocStats, RawPage, classify, text_blocks

    blocks = text_blocks(page)
    lines = [ln for b in blocks for ln in b.lines]
    if len(blocks) > 1 and len(lines) > max_lines:
        return None
    if _side_by_side([box for ln in lines for box, _ in ln.segments]):
        return None
    if page.get_image_info() or page.get_cdrawings():
        return None
    raw = RawPage(page.number, page.rect.width, page.rect.height, blocks)
    out = classify(raw, stats if isinstance(stats, DocStats) else DocStats.from_raw([raw]))
    if out.header_text or out.footer_text:
        return None
    return out


def _side_by_side(boxes: list[tuple[float, float, float, float]]) -> bool:
    """True when two boxes share a row: vertical overlap over half the lower one's height."""
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            overlap = min(a[3], b[3]) - max(a[1], b[1])
            if overlap > 0.5 * min(a[3] - a[1], b[3] - b[1]):
                return True
    return False


__all__ = ["SIMPLE_MAX_LINES", "simple_page"]
