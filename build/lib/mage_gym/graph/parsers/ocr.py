"""OCR for pages without a text layer: scanned PDFs, slides saved as pictures,
and image-folder documents (LongDocURL's page PNGs).

Why RapidOCR: its PP-OCRv4 detection and recognition models ship inside the
``rapidocr-onnxruntime`` wheel, so OCR works offline with no model download.
One engine per process, created on first use (loading costs ~0.2 s and
~100 MB). OCR returns *lines*; an evidence graph wants paragraph-sized
regions, so :func:`group_lines` merges vertically adjacent, horizontally
overlapping lines of similar height into blocks, and marks blocks of
noticeably taller lines as titles. Short lines wholly inside the top/bottom
margin band become the page's header/footer text, not elements.

Resolution: recognition reads each line at a fixed 48-pixel height, so tiny
renders garble small print (72-dpi LongDocURL PNGs lose whole lines). PDF pages
are rendered at ``dpi`` (144 by default) and small page images are upscaled
to at least ``min_short_side`` pixels before OCR; boxes are mapped back to
page units (points for PDFs, source pixels for images).
"""
from __future__ import annotations

import functools
import os
import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mage_gym.graph.parsers.geometry import (
    MARGIN_BAND, band_of, clip_box, is_page_number, merge_list_items, union, xy_cut_order,
)
from mage_gym.graph.patterns import OCR_CAPTION_RE, OCR_LIST_ITEM_RE
from mage_gym.graph.schema import BBox, ParsedElement, ParsedPage

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import pymupdf

#: Largest side (pixels) of an image handed to OCR; bigger renders are scaled down.
MAX_OCR_SIDE = 3000
#: Lines whose recognition confidence is below this are dropped as noise.
MIN_LINE_SCORE = 0.5

_ENGINE: Any = None
#: Seconds spent in OCR in this process and pages OCR'd (for benchmarks); pages answered
#: from the OCR cache (:mod:`.ocr_cache`) are counted apart, under ``cached``.
OCR_STATS: dict[str, float] = {"pages": 0, "seconds": 0.0, "cached": 0}

@dataclass
class OcrLine:
    bbox: BBox  # page units
    text: str
    score: float

    @property
    def height(self) -> float:
        return self.bbox[3] - self.bbox[1]


def get_engine() -> Any:
    """The process-wide RapidOCR engine (lazy). ``MAGE_GYM_OCR_THREADS`` caps its threads."""
    global _ENGINE
    if _ENGINE is None:
        from rapidocr_onnxruntime import RapidOCR

        kwargs: dict[str, Any] = {}
        threads = int(os.environ.get("MAGE_GYM_OCR_THREADS", "0") or 0)
        if threads > 0:
            kwargs = {"intra_op_num_threads": threads, "inter_op_num_threads": 1}
        _ENGINE = RapidOCR(**kwargs)
    return _ENGINE


@functools.lru_cache(maxsize=1)
def engine_id() -> str:
    """What the OCR output depends on besides the pixels (part of the OCR cache key)."""
    try:
        from importlib.metadata import version

        ver = version("rapidocr-onnxruntime")
    except Exception:  # noqa: BLE001 - metadata missing: still a usable key
        ver = "unknown"
    return f"rapidocr-onnxruntime=={ver};use_cls=False;min_score={MIN_LINE_SCORE}"


def _run_engine(rgb: "np.ndarray") -> list[tuple[tuple[float, float, float, float], str, float]]:
    """RapidOCR on ``rgb``: (box in array pixels, text, score) per kept line."""
    t0 = time.perf_counter()
    result, _ = get_engine()(rgb, use_cls=False)
    OCR_STATS["seconds"] += time.perf_counter() - t0
    OCR_STATS["pages"] += 1
    raw = []
    for quad, text, score in result or []:
        text = " ".join(str(text).split())
        if not text or float(score) < MIN_LINE_SCORE:
            continue
        xs = [float(p[0]) for p in quad]
        ys = [float(p[1]) for p in quad]
        raw.append(((min(xs), min(ys), max(xs), max(ys)), text, float(score)))
    return raw


def ocr_array(rgb: "np.ndarray", scale: float) -> list[OcrLine]:
    """OCR an RGB uint8 array (through the OCR cache); ``scale`` = array pixels per page unit."""
    from mage_gym.graph.parsers import ocr_cache

    key = ocr_cache.image_key(rgb, engine_id()) if ocr_cache.enabled() else ""
    raw = ocr_cache.load(key) if key else None
    if raw is None:
        raw = _run_engine(rgb)
        if key:
            ocr_cache.save(key, raw)
    else:
        OCR_STATS["cached"] += 1
    return [OcrLine((b[0] / scale, b[1] / scale, b[2] / scale, b[3] / scale), text, score) for b, text, score in raw]


# --- grouping ---------------------------------------------------------------------


def _h_overlap(a: BBox, b: BBox) -> float:
    """Horizontal overlap as a share of the narrower box."""
    inter = min(a[2], b[2]) - max(a[0], b[0])
    narrow = max(min(a[2] - a[0], b[2] - b[0]), 1e-6)
    return max(0.0, inter) / narrow


def _is_gutter(a: OcrLine, b: OcrLine, lines: list[OcrLine]) -> bool:
    """True when the gap between ``a`` and ``b`` continues as empty space above
    and below (a column gutter), False when other lines cross it (word spacing)."""
    h = max(a.height, b.height)
    lo, hi = a.bbox[2] + 0.3 * h, b.bbox[0] - 0.3 * h  # OCR boxes wobble by a few pixels
    if hi <= lo:
        return False
    y0, y1 = min(a.bbox[1], b.bbox[1]) - 4 * h, max(a.bbox[3], b.bbox[3]) + 4 * h
    left = right = 0
    for ln in lines:
        if ln is a or ln is b or ln.bbox[3] < y0 or ln.bbox[1] > y1:
            continue
        if ln.bbox[0] < hi and ln.bbox[2] > lo:
            return False  # a line crosses the gap: it is only word spacing
        if ln.bbox[2] <= lo:
            left += 1
        elif ln.bbox[0] >= hi:
            right += 1
    return left >= 2 and right >= 2


def merge_row_fragments(lines: list[OcrLine], max_gap: float = 2.0) -> list[OcrLine]:
    """Join fragments of one printed line (OCR splits justified slide text into words).

    Fragments merge when they share a row (vertical overlap > 50% of the
    smaller height, heights within 1.6x), the horizontal gap is below
    ``max_gap`` x the line height (table cells are usually further apart), and
    the gap is not a column gutter (empty space continuing above and below).
    """
    rest = sorted(lines, key=lambda l: (l.bbox[0], l.bbox[1]))
    out: list[OcrLine] = []
    for ln in rest:
        for i, prev in enumerate(out):
            h = min(ln.height, prev.height)
            ov = min(prev.bbox[3], ln.bbox[3]) - max(prev.bbox[1], ln.bbox[1])
            gap = ln.bbox[0] - prev.bbox[2]
            if ov > 0.5 * h and max(ln.height, prev.height) <= 1.6 * max(h, 1e-6) and -1.0 * h <= gap <= max_gap * h \
                    and not _is_gutter(prev, ln, lines):
                out[i] = OcrLine(union([prev.bbox, ln.bbox]), prev.text + " " + ln.text, min(prev.score, ln.score))
                break
        else:
            out.append(ln)
    return out


def typical_line_gap(lines: list[OcrLine]) -> float:
    """Median vertical gap from each line to the next line below it in the same column.

    Leading differs a lot between documents (tight reports, airy slides), so
    the paragraph break threshold is relative to the page's own line spacing.
    """
    gaps: list[float] = []
    srt = sorted(lines, key=lambda l: l.bbox[1])
    for i, a in enumerate(srt):
        for b in srt[i + 1 : i + 40]:
            if b.bbox[1] >= a.bbox[3] - 0.3 * a.height and _h_overlap(a.bbox, b.bbox) >= 0.5:
                gaps.append(max(0.0, b.bbox[1] - a.bbox[3]))
                break
    return statistics.median(gaps) if gaps else 0.0


def _continues(block: list[OcrLine], line: OcrLine, line_gap: float | None = None) -> float | None:
    """Vertical gap if ``line`` continues ``block`` as its next line (else None).

    The gap must stay below ``max(2.5 x typical gap, 0.3 x line height)``,
    capped at 0.9 line heights: a paragraph break is a visibly larger gap.
    """
    last = block[-1]
    h_ref = statistics.median(l.height for l in block)
    if not (0.65 <= line.height / max(h_ref, 1e-6) <= 1.5):
        return None
    bottom = max(l.bbox[3] for l in block)
    gap = line.bbox[1] - bottom
    h = max(h_ref, line.height)
    limit = 0.9 * h if line_gap is None else min(0.9 * h, max(2.5 * line_gap, 0.3 * h))
    if gap > limit or gap < -0.4 * h_ref:
        return None
    left = min(l.bbox[0] for l in block)
    aligned_left = abs(line.bbox[0] - left) <= 1.5 * h_ref
    if _h_overlap(last.bbox, line.bbox) < 0.5 and not aligned_left:
        return None
    if OCR_LIST_ITEM_RE.match(line.text) and not OCR_LIST_ITEM_RE.match(block[0].text):
        return None  # a bullet after plain text starts a list
    return gap


def group_lines(lines: list[OcrLine], width: float, height: float) -> tuple[list[ParsedElement], list[str], list[str]]:
    """Merge OCR lines into paragraph-sized elements in reading order.

    Returns (elements, header parts, footer parts). Steps: join row
    fragments; short lines wholly in the top/bottom margin band -> header/
    footer; text-grid tables (:mod:`.tables`) -> table elements; remaining lines
    stack into blocks (next line below within the paragraph-break gap of
    :func:`_continues`, similar height, overlapping or left-aligned). A block of <= 3 lines whose median line height
    is >= 1.3x the page's median is a title (level 1 from 1.8x, else 2).
    """
    from mage_gym.graph.parsers.tables import text_grid_tables

    if not lines:
        return [], [], []
    lines = merge_row_fragments(lines)
    header: list[str] = []
    footer: list[str] = []
    body: list[OcrLine] = []
    # Unlike the text-layer rule (geometry.only_content), short lines in the bands stay margins even on a
    # page with nothing else: the page's picture is its content, and OCR reads specks and slide footers there.
    for ln in sorted(lines, key=lambda l: (l.bbox[1], l.bbox[0])):
        where = band_of(ln.bbox, height, MARGIN_BAND)
        if where and (len(ln.text.split()) <= 8 or is_page_number(ln.text)):
            (header if where == "header" else footer).append(ln.text)
        else:
            body.append(ln)
    if not body:
        return [], header, footer
    page_h = statistics.median(l.height for l in body)
    elements: list[ParsedElement] = []
    taken: set[int] = set()
    for gt in text_grid_tables([(l.bbox, l.text) for l in body], width):
        taken.update(gt.members)
        text = " ".join(body[j].text for j in sorted(gt.members, key=lambda j: (body[j].bbox[1], body[j].bbox[0])))
        elements.append(ParsedElement("table", clip_box(gt.bbox, width, height), text, table_markdown=gt.markdown, ocr=True))
    blocks: list[list[OcrLine]] = []
    line_gap = typical_line_gap([l for j, l in enumerate(body) if j not in taken])
    for j, ln in enumerate(body):
        if j in taken:
            continue
        best, best_gap = None, None
        for blk in blocks[-12:]:  # only recent blocks can be directly above
            gap = _continues(blk, ln, line_gap)
            if gap is not None and (best_gap is None or gap < best_gap):
                best, best_gap = blk, gap
        if best is None:
            blocks.append([ln])
        else:
            best.append(ln)
    for blk in blocks:
        text = " ".join(l.text for l in blk)
        bbox = clip_box(union([l.bbox for l in blk]), width, height)
        h = statistics.median(l.height for l in blk)
        if len(blk) <= 3 and h >= 1.3 * page_h and len(text.split()) <= 20:
            elements.append(ParsedElement("title", bbox, text, heading_level=1 if h >= 1.8 * page_h else 2, ocr=True))
        elif OCR_CAPTION_RE.match(text) and len(blk) <= 4:
            elements.append(ParsedElement("caption", bbox, text, ocr=True))
        elif OCR_LIST_ITEM_RE.match(blk[0].text):
            elements.append(ParsedElement("list", bbox, "\n".join(l.text for l in blk), ocr=True))
        else:
            elements.append(ParsedElement("paragraph", bbox, text, ocr=True))
    elements = xy_cut_order(elements, lambda e: e.bbox, min_gap_x=0.02 * width, min_gap_y=0.5 * page_h)
    return merge_list_items(elements), header, footer


# --- entry points -----------------------------------------------------------------


def pdf_page_lines(page: "pymupdf.Page", dpi: int = 144) -> tuple[list[OcrLine], list[str]]:
    """OCR lines of a PDF page rendered at ``dpi`` (capped at :data:`MAX_OCR_SIDE`), in points."""
    import numpy as np
    import pymupdf

    w, h = page.rect.width, page.rect.height
    scale = min(dpi / 72.0, MAX_OCR_SIDE / max(w, h, 1e-6))
    warnings: list[str] = []
    if scale < dpi / 72.0:
        warnings.append(f"page is {w:.0f}x{h:.0f} pt; OCR ran on a downscaled render ({scale * 72:.0f} dpi)")
    pix = page.get_pixmap(matrix=pymupdf.Matrix(scale, scale), alpha=False, colorspace=pymupdf.csRGB)
    rgb = np.frombuffer(pix.samples, dtype=np.uint8).reshape(pix.height, pix.width, pix.n)[:, :, :3]
    return ocr_array(np.ascontiguousarray(rgb), scale), warnings


def image_lines(path: str, min_short_side: int = 1000) -> tuple[list[OcrLine], int, int, list[str]]:
    """OCR lines of a page image in its own pixels, plus (width, height) and warnings.

    Small images are upscaled so the short side has >= ``min_short_side``
    pixels (72-dpi renders garble otherwise); huge ones are scaled down.
    """
    import numpy as np
    from PIL import Image

    from mage_gym.graph.errors import UnsupportedSourceError
    from mage_gym.graph.images import MAX_SOURCE_PIXELS

    with Image.open(path) as im:
        w, h = im.width, im.height
        if w * h > MAX_SOURCE_PIXELS:
            raise UnsupportedSourceError(path, f"page image too large ({w}x{h} px)")
        scale = max(1.0, min_short_side / max(min(w, h), 1))
        scale = min(scale, MAX_OCR_SIDE / max(w, h, 1))
        rgb_im = im.convert("RGB")
        if abs(scale - 1.0) > 1e-3:
            rgb_im = rgb_im.resize((max(1, round(w * scale)), max(1, round(h * scale))), Image.Resampling.BICUBIC)
        rgb = np.asarray(rgb_im)
    warnings = [] if scale >= 1.0 - 1e-3 else [f"image is {w}x{h} px; OCR ran on a downscaled copy"]
    return ocr_array(rgb, scale), w, h, warnings


def page_from_lines(index: int, width: float, height: float, lines: list[OcrLine], warnings: list[str]) -> ParsedPage:
    elements, header, footer = group_lines(lines, width, height)
    return ParsedPage(
        index=index, width=float(width), height=float(height), elements=elements,
        header_text=" | ".join(header), footer_text=" | ".join(footer), image_only=True, warnings=list(warnings),
    )


def ocr_pdf_page(page: "pymupdf.Page", dpi: int = 144) -> ParsedPage:
    """An image-only PDF page as OCR blocks; boxes in points."""
    lines, warnings = pdf_page_lines(page, dpi)
    return page_from_lines(page.number, page.rect.width, page.rect.height, lines, warnings)


def ocr_image_file(path: str, index: int, enabled: bool = True, min_short_side: int = 1000) -> ParsedPage:
    """A page image as OCR blocks; boxes in the image's own pixels."""
    if not enabled:
        from PIL import Image

        with Image.open(path) as im:
            w, h = im.width, im.height
        return ParsedPage(index=index, width=float(w), height=float(h), image_only=True,
                          warnings=["OCR disabled: image page has no text"])
    lines, w, h, warnings = image_lines(path, min_short_side)
    return page_from_lines(index, w, h, lines, warnings)


__all__ = [
    "get_engine", "ocr_array", "group_lines", "ocr_pdf_page", "ocr_image_file", "pdf_page_lines", "image_lines",
    "page_from_lines", "OcrLine", "OCR_STATS",
]
