"""Box geometry shared by the parsers: reading order, unions, margin bands.

Why here: the fast parser, the OCR grouping and the layout adapter all need
the same reading order (columns before rows) and the same notion of "this
line sits in the page's header band", and each rule should exist once.
"""
from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING, Callable, Sequence, TypeVar

from mage_gym.graph.patterns import is_bullet_only
from mage_gym.graph.schema import BBox, ParsedPage

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

T = TypeVar("T")

#: Share of the page height at the top/bottom where running headers/footers live.
MARGIN_BAND = 0.075
#: A line repeated (digits ignored) on this share of the parsed pages, inside
#: the wider repetition band, is a running header/footer even if not in MARGIN_BAND.
REPEAT_SHARE = 0.5
REPEAT_BAND = 0.15

_DIGITS = re.compile(r"\d+")
_WORD = re.compile(r"[^\W\d_]{2}")  # two letters in a row, in any script
_PAGE_NUMBER = re.compile(r"^\s*(page\s*)?[\divxlcIVXLC]{1,6}(\s*(/|of)\s*\d+)?\s*$", re.IGNORECASE)


def union(boxes: Sequence[BBox]) -> BBox:
    return (
        min(b[0] for b in boxes),
        min(b[1] for b in boxes),
        max(b[2] for b in boxes),
        max(b[3] for b in boxes),
    )


def area(b: BBox) -> float:
    return max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1])


def intersection(a: BBox, b: BBox) -> float:
    return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))


def inside_fraction(inner: BBox, outer: BBox) -> float:
    a = area(inner)
    return intersection(inner, outer) / a if a > 0 else 0.0


def clip_box(b: BBox, width: float, height: float) -> BBox:
    """Clamp a box into the page; keep x0<=x1, y0<=y1."""
    x0, y0, x1, y1 = b
    x0, x1 = sorted((min(max(x0, 0.0), width), min(max(x1, 0.0), width)))
    y0, y1 = sorted((min(max(y0, 0.0), height), min(max(y1, 0.0), height)))
    return (float(x0), float(y0), float(x1), float(y1))


def cluster_rects(rects: Sequence[BBox] | np.ndarray, width: float, height: float, tol: float = 3.0) -> list[BBox]:
    """Boxes around groups of neighbouring rectangles: PyMuPDF's ``Page.cluster_drawings``, in numpy.

    Same rule and output as PyMuPDF 2.0's pure-Python version (checked on
    every page of the benchmark PDFs): rectangles not wholly on the page are
    ignored; starting from the remaining one lowest on the page (then
    leftmost), a cluster box absorbs every rectangle within ``tol`` of it
    until none is left, then the next cluster starts; clusters are returned
    sorted by (bottom, left), without duplicates, and only when wider and
    taller than ``tol``. Why our own: PyMuPDF compares rectangle objects
    pairwise in Python, which was a third of the fast parser's time on pages
    with charts (thousands of paths).
    """
    import numpy as np

    raw = np.asarray(rects, dtype=np.float64).reshape(-1, 4)
    raw = raw[(raw[:, 0] >= 0) & (raw[:, 2] <= width) & (raw[:, 1] >= 0) & (raw[:, 3] <= height)]
    r = np.column_stack([np.minimum(raw[:, 0], raw[:, 2]), np.minimum(raw[:, 1], raw[:, 3]),
                         np.maximum(raw[:, 0], raw[:, 2]), np.maximum(raw[:, 1], raw[:, 3])])
    left = np.ones(len(r), dtype=bool)
    order = np.lexsort((r[:, 0], r[:, 3]))  # by bottom, then left
    out: set[BBox] = set()
    for seed in order:
        if not left[seed]:
            continue
        left[seed] = False
        box = r[seed].copy()
        while True:
            near = left & (r[:, 2] >= box[0] - tol) & (r[:, 0] <= box[2] + tol) & \
                (r[:, 3] >= box[1] - tol) & (r[:, 1] <= box[3] + tol)
            if not near.any():
                break
            m = r[near]
            box = np.array([min(box[0], m[:, 0].min()), min(box[1], m[:, 1].min()),
                            max(box[2], m[:, 2].max()), max(box[3], m[:, 3].max())])
            left &= ~near
        out.add((float(box[0]), float(box[1]), float(box[2]), float(box[3])))
    return sorted((b for b in out if b[2] - b[0] > tol and b[3] - b[1] > tol), key=lambda b: (b[3], b[0]))


def _gaps(intervals: list[tuple[float, float]], min_gap: float) -> list[float]:
    """Cut positions in the middle of gaps >= ``min_gap`` of a 1-D projection."""
    cuts: list[float] = []
    ivs = sorted(intervals)
    reach = ivs[0][1]
    for lo, hi in ivs[1:]:
        if lo - reach >= min_gap:
            cuts.append((reach + lo) / 2.0)
        reach = max(reach, hi)
    return cuts


def xy_cut_order(items: Sequence[T], box_of: Callable[[T], BBox], min_gap_x: float = 8.0,
                 min_gap_y: float = 2.0) -> list[T]:
    """Reading order by recursive XY-cut, preferring column cuts.

    At each level the items are split at vertical gaps (columns, read left to
    right) when any exist, otherwise at horizontal gaps (rows, top to bottom);
    a group with no gap is read top-to-bottom, left-to-right. Preferring
    columns reads two-column papers column by column, while a full-width title
    or footer block (which closes every vertical gap) is cut off by rows first.
    """
    items = list(items)
    if len(items) <= 1:
        return items

    def rec(group: list[T], depth: int) -> list[T]:
        if len(group) <= 1 or depth > 40:
            return sorted(group, key=lambda it: (round(box_of(it)[1], 1), box_of(it)[0]))
        for axis, gap in ((0, min_gap_x), (1, min_gap_y)):
            lo, hi = (0, 2) if axis == 0 else (1, 3)
            cuts = _gaps([(box_of(it)[lo], box_of(it)[hi]) for it in group], gap)
            if cuts:
                bins: list[list[T]] = [[] for _ in range(len(cuts) + 1)]
                for it in group:
                    mid = (box_of(it)[lo] + box_of(it)[hi]) / 2.0
                    k = sum(1 for c in cuts if mid > c)
                    bins[k].append(it)
                bins = [b for b in bins if b]
                if len(bins) > 1:
                    return [x for b in bins for x in rec(b, depth + 1)]
        return sorted(group, key=lambda it: (round(box_of(it)[1], 1), box_of(it)[0]))

    return rec(items, 0)


def normalise_repeat_key(text: str) -> str:
    """Text with digits masked, for spotting running headers ("Page 3" == "Page 4")."""
    return _DIGITS.sub("#", " ".join(text.lower().split()))


def is_page_number(text: str) -> bool:
    return bool(_PAGE_NUMBER.match(text)) and len(text.strip()) <= 14


def band_of(bbox: BBox, height: float, band: float = MARGIN_BAND) -> str | None:
    """"header"/"footer" when the box lies wholly in the top/bottom band."""
    if height <= 0:
        return None
    if bbox[3] <= band * height:
        return "header"
    if bbox[1] >= (1.0 - band) * height:
        return "footer"
    return None


def repeated_margin_keys(pages_lines: list[list[tuple[BBox, str]]], heights: list[float]) -> set[str]:
    """Keys of lines that recur near the top/bottom of many pages.

    ``pages_lines`` holds, per page, (bbox, text) of candidate lines. A key
    counts once per page; with fewer than 3 pages repetition is not evidence.
    """
    n = len(pages_lines)
    if n < 3:
        return set()
    counts: Counter[str] = Counter()
    for lines, h in zip(pages_lines, heights):
        seen = set()
        for bbox, text in lines:
            if band_of(bbox, h, REPEAT_BAND) and len(text.strip()) >= 3:
                seen.add(normalise_repeat_key(text))
        counts.update(seen)
    need = max(3, int(REPEAT_SHARE * n + 0.999))
    return {k for k, c in counts.items() if c >= need}


def only_content(margins: Sequence[T], text_of: Callable[[T], str], page_has_content: bool) -> list[T]:
    """The margin candidates that stay content because nothing else is on the page.

    Why: headers and footers are furniture *around* content. On a page whose
    every line looks like furniture (a one-line page of a generated report,
    whose lines repeat but for their numbers; a slide with one short title at
    its top), moving them to the margins left a page with no element at all,
    which no element-level action can ever reach. So when ``page_has_content``
    is False, every candidate with a word in it (two letters in a row) stays
    content, but for a page number ("Page 3 of 10"). Lines without a word
    ("- 2 -", a print-shop slug "41086.01500") stay furniture: on a page that
    holds nothing else (a blank page of a filing) they are no evidence.
    """
    if page_has_content:
        return []
    return [m for m in margins if _WORD.search(text_of(m)) and not is_page_number(text_of(m))]


def join_margin_text(parts: list[str]) -> str:
    return " | ".join(p.strip() for p in parts if p.strip())


def move_to_margins(page: ParsedPage, header: list[str], footer: list[str]) -> None:
    page.header_text = join_margin_text(([page.header_text] if page.header_text else []) + header)
    page.footer_text = join_margin_text(([page.footer_text] if page.footer_text else []) + footer)


_NUMERIC_TOKEN = re.compile(r"^[\s$€£(+\-\u2212]*\d[\d.,]*\s*[%)kKmMbB]?[,;]?$")


def numeric_tokens(texts: Sequence[str]) -> int:
    """Count of number-like tokens (axis ticks, values, percentages)."""
    return sum(1 for t in texts for tok in t.split() if _NUMERIC_TOKEN.match(tok))


def looks_like_chart(label_texts: Sequence[str], n_paths: int) -> bool:
    """Chart-vs-figure rule shared by the parsers.

    A picture region is a *chart* when the text inside it has >= 3 numeric
    tokens (tick labels, data labels, percentages), or >= 2 numeric tokens with
    >= 20 vector paths inside (bars, axes, gridlines drawn as vectors). Photos,
    logos and diagrams rarely carry several numbers.
    """
    n = numeric_tokens(label_texts)
    return n >= 3 or (n >= 2 and n_paths >= 20)


def join_lines(texts: Sequence[str], sep: str = " ") -> str:
    """Join line texts, gluing a lone bullet glyph to the line after it."""
    out: list[str] = []
    pending = ""
    for t in texts:
        t = t.strip()
        if not t:
            continue
        if is_bullet_only(t):
            pending = "\u2022 "
            continue
        out.append(pending + t)
        pending = ""
    return sep.join(out)


def merge_list_items(elements: list, max_item_lines: int = 2, max_items: int = 15) -> list:
    """Merge runs of consecutive short list items (in reading order) into one list.

    Why only short items: a bullet list of one-liners is one unit of evidence,
    but long items (references, multi-sentence bullets) are paragraph-sized
    regions already, and merging them would make page-long "lists". Items
    merge when each has <= ``max_item_lines`` lines (``\\n``-separated), they
    overlap horizontally and the vertical gap is <= 2.5 line heights; a run
    stops at ``max_items``.
    """
    from mage_gym.graph.schema import ParsedElement

    out: list = []
    run_items = 0
    for e in elements:
        n_lines = e.text.count("\n") + 1
        prev = out[-1] if out else None
        if (prev is not None and e.type == "list" and prev.type == "list" and n_lines <= max_item_lines
                and run_items > 0 and run_items < max_items):
            line_h = max(4.0, min((prev.bbox[3] - prev.bbox[1]) / (prev.text.count("\n") + 1),
                                  (e.bbox[3] - e.bbox[1]) / n_lines))
            h_ov = min(prev.bbox[2], e.bbox[2]) - max(prev.bbox[0], e.bbox[0])
            if h_ov > 0 and -line_h <= e.bbox[1] - prev.bbox[3] <= 2.5 * line_h:
                out[-1] = ParsedElement("list", union([prev.bbox, e.bbox]), prev.text + "\n" + e.text,
                                        ocr=prev.ocr and e.ocr)
                run_items += 1
                continue
        out.append(e)
        run_items = 1 if (e.type == "list" and n_lines <= max_item_lines) else 0
    return out
