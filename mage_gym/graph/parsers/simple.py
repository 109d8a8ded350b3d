"""Which PDF pages are too simple for the layout model: the layout parser's fast route.

Why: the layout model costs 0.2-0.5 CPU-s a page (most of it the image
network over a page render), whatever the page holds. A page whose text layer
is one plain run of text, with nothing drawn or placed on it, gives the model
nothing to find that the fast parser's rules do not find too: no picture,
chart or ruled table (those need images or vector paths), no text table (its
cells stand side by side), no regions to group or order. A generated report
of one line a page, or a filing's blank pages, then costs milliseconds a page
instead.

The rule, from the page's own structure and the document's font statistics
only (:func:`simple_page`); a page is *simple* when all of these hold:

1. no placed image and no vector path (``get_image_info``, ``get_cdrawings``);
2. its text is at most one block: one run of lines in one font and weight
   with no gap (the fast parser's block split), or nothing (a blank page).
   Two blocks are already a grouping question, and there the fast rules and
   the model disagree: a cover's two-line heading came out of the fast rules
   as a title plus a paragraph, of the model as one region;
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

def simple_page(page: "pymupdf.Page", stats: Any = None) -> ParsedPage | None:
    """The page typed by the fast parser's rules when it is simple (module docstring), else None.

    ``stats`` are the document's :class:`~mage_gym.graph.parsers.fast.DocStats`
    (None: the page's own). The checks run cheapest first and stop at the
    first that fails: the text dictionary, then images, then vector paths.
    """
    from mage_gym.graph.parsers.fast import DocStats, RawPage, classify, text_blocks

    blocks = text_blocks(page)
    if len(blocks) > 1:
        return None
    if _side_by_side([box for b in blocks for ln in b.lines for box, _ in ln.segments]):
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


__all__ = ["simple_page"]
