"""Draw planned blocks onto PDF pages and record exactly where each one went.

Why our own line breaking instead of ``insert_htmlbox``: the gold box of every
element must be what was drawn, to the point, and known without parsing the
PDF back. Measuring words with the font's advance widths and placing each line
with a :class:`pymupdf.TextWriter` gives us that, is fast (no HTML engine) and
keeps files small: text uses Helvetica-compatible fonts subset at save time.

Spacing choices serve the parsers: blocks are separated by gaps larger than a
line's leading (so text extraction splits paragraphs), tables carry real ruling
lines (``find_tables(use_layout=False)`` finds them), captions sit a few points
from their image/table, and running headers/footers stay in the margins.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from mage_gym.data.synth.blocks import (
    FOOTNOTE_MARK,
    Block,
    ChartBlock,
    FigureBlock,
    Heading,
    ListBlock,
    PageBreak,
    Paragraph,
    TableBlock,
)
from mage_gym.data.synth.bridge import PageLabels
from mage_gym.data.synth.charts import CHART_SIZE_IN, RasterFactory
from mage_gym.data.synth.config import SynthConfig
from mage_gym.graph.schema import BBox

if TYPE_CHECKING:  # pragma: no cover
    import pymupdf

MARGIN_X = 72.0
TOP = 72.0
BOTTOM_GAP = 72.0  # distance of the content's bottom limit from the page bottom
BODY_SIZE, BODY_LEAD = 10.0, 13.0
LIST_LEAD, ITEM_GAP = 13.0, 2.0
CAPTION_SIZE, CAPTION_LEAD = 9.0, 11.5
# Cell padding keeps >= 18 pt between texts of adjacent cells: text-grid table finders split
# cells at horizontal gaps above ~2% of the page width, so tight columns would merge cells.
TABLE_SIZE, TABLE_LINE, CELL_PAD = 9.0, 11.0, 9.0
FOOT_SIZE, FOOT_LEAD = 7.5, 9.5
HEAD_SIZE = {0: 22.0, 1: 15.0, 2: 12.5, 3: 11.0}
GAP_AFTER = {"paragraph": 10.0, "heading": 8.0, "list": 11.0, "table": 14.0, "image": 14.0}
GAP_BEFORE_HEADING = {0: 0.0, 1: 22.0, 2: 16.0, 3: 12.0}
SUPERSCRIPTS = "\u00b9\u00b2\u00b3"  # markers available in the base fonts
MAX_TABLE_HEADER_W = 118.0
#: Space above a picture: parsers grow picture regions over short text (axis labels) within ~2.5 body
#: sizes, so a short list item or heading drawn closer would be swallowed into the picture.
IMAGE_GAP_BEFORE = 28.0
#: A printed-page-label placeholder (see ``bridge.PAGE_MARK``): ``i<index>`` or ``b<block id>``.
_PAGE_MARK_RE = re.compile("\x00pg:([ib])(-?\\d+)\x00")


@dataclass(frozen=True)
class DrawnElement:
    """One element as drawn: the generator's own gold geometry (PDF points)."""

    elem_id: str  # "b{block_id}" or "b{block_id}.caption" / ".footnote"
    block_id: int
    type: str  # an ELEMENT_TYPES name
    page: int  # 0-based
    bbox: BBox  # points
    text: str


@dataclass
class _Prepared:
    height: float
    gap_before: float
    gap_after: float
    draw: Callable[[float], None]  # draws with its top at y
    footnote: str | None = None


class PageWriter:
    """Flows block groups down pages; keeps each group on one page when it fits."""

    def __init__(self, cfg: SynthConfig, rasters: RasterFactory, labels: PageLabels | None = None) -> None:
        import pymupdf

        self._pm = pymupdf
        self.cfg = cfg
        self.rasters = rasters
        self.labels = labels or PageLabels()
        self.block_page: dict[int, int] = {}  # page where each block was first drawn
        self.page_furniture: list[list[str]] = []  # running header / footer texts of each page (after finish)
        self.W, self.H = cfg.page_width, cfg.page_height
        self.content_w = self.W - 2 * MARGIN_X
        self.bottom = self.H - BOTTOM_GAP
        self.doc = pymupdf.open()
        self.fonts = {k: pymupdf.Font(k) for k in ("helv", "hebo", "heit")}
        self._asc = self.fonts["helv"].ascender
        self._desc = -self.fonts["helv"].descender
        self._widths: dict[tuple[str, str], float] = {}
        self._adv: dict[str, dict[str, float]] = {k: {} for k in self.fonts}
        self._wrapped: dict[tuple[str, str, float, float], list[tuple[str, float]]] = {}
        self.elements: list[DrawnElement] = []
        self.page_chapter: list[str] = []
        self._chapter = ""
        self._page: pymupdf.Page | None = None
        self._tw: pymupdf.TextWriter | None = None
        self._y = TOP
        self._gap = 0.0
        self._empty = True
        self._footnotes: list[tuple[str, str, int]] = []  # (marker, text, block_id)
        self._foot_h = 0.0
        self._new_page()

    # --- pages --------------------------------------------------------------------

    @property
    def page_count(self) -> int:
        return len(self.doc)

    @property
    def page_index(self) -> int:
        return len(self.doc) - 1

    def _new_page(self) -> None:
        if self._page is not None:
            self._close_page()
        self._page = self.doc.new_page(width=self.W, height=self.H)
        self._tw = self._pm.TextWriter(self._page.rect)
        self._y, self._gap, self._empty = TOP, 0.0, True
        self._footnotes, self._foot_h = [], 0.0
        self.page_chapter.append("")

    def _close_page(self) -> None:
        assert self._page is not None and self._tw is not None
        self._draw_footnotes()
        self._tw.write_text(self._page)

    def _limit(self) -> float:
        return self.bottom - (self._foot_h + 8.0 if self._foot_h else 0.0)

    # --- text measuring -------------------------------------------------------------

    def _w(self, text: str, font: str, size: float) -> float:
        """Advance width: a sum of cached per-glyph advances (what ``text_length`` computes, 50x cheaper)."""
        k = (font, text)
        w = self._widths.get(k)
        if w is None:
            adv = self._adv[font]
            w = 0.0
            for ch in text:
                a = adv.get(ch)
                if a is None:
                    a = adv[ch] = self.fonts[font].glyph_advance(ord(ch))
                w += a
            self._widths[k] = w
        return w * size

    def wrap(self, text: str, font: str, size: float, width: float) -> list[tuple[str, float]]:
        """Greedy line breaking; each line comes with its drawn width (sum of advances)."""
        key = (text, font, size, width)
        hit = self._wrapped.get(key)
        if hit is not None:
            return hit
        space = self._w(" ", font, size)
        lines: list[tuple[str, float]] = []
        cur: list[str] = []
        cur_w = 0.0
        for word in text.split():
            ww = self._w(word, font, size)
            if cur and cur_w + space + ww > width:
                lines.append((" ".join(cur), cur_w))
                cur, cur_w = [word], ww
            else:
                cur_w = cur_w + space + ww if cur else ww
                cur.append(word)
        if cur:
            lines.append((" ".join(cur), cur_w))
        self._wrapped[key] = lines or [("", 0.0)]
        return self._wrapped[key]

    def _text_lines(self, lines: list[tuple[str, float]], x: float, top: float, font: str, size: float, lead: float,
                    center_in: tuple[float, float] | None = None) -> BBox:
        """Draw lines with the first line's top at ``top``; return their tight box."""
        assert self._tw is not None
        base = top + self._asc * size
        x0s, x1s = [], []
        for i, (line, lw) in enumerate(lines):
            lx = x if center_in is None else center_in[0] + (center_in[1] - center_in[0] - lw) / 2
            self._tw.append((lx, base + i * lead), line, font=self.fonts[font], fontsize=size)
            x0s.append(lx)
            x1s.append(lx + lw)
        y1 = base + (len(lines) - 1) * lead + self._desc * size
        return (min(x0s), top, max(x1s), y1)

    def _lines_height(self, n: int, size: float, lead: float) -> float:
        return (n - 1) * lead + (self._asc + self._desc) * size

    def _record(self, elem_id: str, block: Block, etype: str, bbox: BBox, text: str) -> None:
        self.elements.append(DrawnElement(elem_id, block.block_id, etype, self.page_index, bbox, text))
        self.block_page.setdefault(block.block_id, self.page_index)
        if not self.page_chapter[-1]:
            self.page_chapter[-1] = self._chapter

    # --- preparing blocks -----------------------------------------------------------------

    def _prepare(self, block: Block) -> _Prepared:
        if isinstance(block, Heading):
            return self._prep_heading(block)
        if isinstance(block, Paragraph):
            return self._prep_paragraph(block)
        if isinstance(block, ListBlock):
            return self._prep_list(block)
        if isinstance(block, TableBlock):
            return self._prep_table(block)
        if isinstance(block, (ChartBlock, FigureBlock)):
            return self._prep_image(block)
        raise TypeError(f"cannot draw block {type(block).__name__}")

    def _prep_heading(self, b: Heading) -> _Prepared:
        size = HEAD_SIZE[b.level]
        lead = size * 1.3
        font = "hebo"
        lines = self.wrap(b.text, font, size, self.content_w)

        def draw(y: float) -> None:
            if b.level == 1:
                self._chapter = b.text
            center = (MARGIN_X, self.W - MARGIN_X) if b.level == 0 else None
            bbox = self._text_lines(lines, MARGIN_X, y, font, size, lead, center)
            self._record(f"b{b.block_id}", b, "title", bbox, b.text)

        top_gap = 150.0 if b.level == 0 else GAP_BEFORE_HEADING[b.level]
        return _Prepared(self._lines_height(len(lines), size, lead), top_gap, GAP_AFTER["heading"], draw)

    def _prep_paragraph(self, b: Paragraph) -> _Prepared:
        size, lead, font = BODY_SIZE, BODY_LEAD, "helv"
        has_fn = b.footnote is not None and FOOTNOTE_MARK in b.text and len(self._footnotes) < len(SUPERSCRIPTS)
        marker = SUPERSCRIPTS[len(self._footnotes)] if has_fn else ""
        text = self.resolve_page_marks(b.text.replace(FOOTNOTE_MARK, marker))
        lines = self.wrap(text, font, size, self.content_w)
        fn_text = f"{marker} {b.footnote}" if has_fn else None
        center = (MARGIN_X, self.W - MARGIN_X) if b.role == "subtitle" else None

        def draw(y: float) -> None:
            bbox = self._text_lines(lines, MARGIN_X, y, font, size, lead, center)
            self._record(f"b{b.block_id}", b, "paragraph", bbox, text)

        return _Prepared(self._lines_height(len(lines), size, lead), 0.0, GAP_AFTER["paragraph"], draw, fn_text)

    def resolve_page_marks(self, text: str) -> str:
        """Printed page labels in place of page placeholders (a cited block must already be drawn)."""
        if "\x00pg:" not in text:
            return text

        def label(m: re.Match[str]) -> str:
            index = int(m.group(2)) if m.group(1) == "i" else self.block_page[int(m.group(2))]
            return self.labels.label(index)

        return _PAGE_MARK_RE.sub(label, text)

    def _prep_list(self, b: ListBlock) -> _Prepared:
        size, lead, font = BODY_SIZE, LIST_LEAD, "helv"
        indent = 20.0
        wrapped = [self.wrap(it, font, size, self.content_w - indent) for it in b.items]
        n_lines = sum(len(w) for w in wrapped)
        height = self._lines_height(n_lines, size, lead) + ITEM_GAP * (len(b.items) - 1)

        def draw(y: float) -> None:
            top = y
            x0s, x1s = [], []
            for i, lines in enumerate(wrapped):
                mark = f"{i + 1}." if b.numbered else "\u2022"
                mx = MARGIN_X + (2.0 if b.numbered else 6.0)
                box = self._text_lines([(mark, self._w(mark, font, size))], mx, top, font, size, lead)
                x0s.append(box[0])
                box = self._text_lines(lines, MARGIN_X + indent, top, font, size, lead)
                x1s.append(box[2])
                top += len(lines) * lead + ITEM_GAP
            bbox = (min(x0s), y, max(x1s), y + height)
            self._record(f"b{b.block_id}", b, "list", bbox, "\n".join(b.items))

        return _Prepared(height, 0.0, GAP_AFTER["list"], draw)

    def _prep_table(self, b: TableBlock) -> _Prepared:
        cap_lines = self.wrap(b.caption, "heit", CAPTION_SIZE, self.content_w)
        cap_h = self._lines_height(len(cap_lines), CAPTION_SIZE, CAPTION_LEAD)
        ncol = len(b.header)
        widths = []
        for c in range(ncol):
            cells = [self._w(r[c], "helv", TABLE_SIZE) for r in b.rows]
            head_w = self._w(b.header[c], "hebo", TABLE_SIZE)
            body_w = max(cells) if cells else 0.0
            widths.append(max(body_w, min(head_w, MAX_TABLE_HEADER_W), 28.0) + 2 * CELL_PAD)
        scale = min(1.0, self.content_w / sum(widths))
        widths = [w * scale for w in widths]
        head_lines = [self.wrap(h, "hebo", TABLE_SIZE, w - 2 * CELL_PAD) for h, w in zip(b.header, widths)]
        head_h = max(len(h) for h in head_lines) * TABLE_LINE + 6.0
        row_h = TABLE_LINE + 6.0
        grid_h = head_h + row_h * len(b.rows)
        cap_gap = 5.0

        def draw(y: float) -> None:
            assert self._page is not None
            cbox = self._text_lines(cap_lines, MARGIN_X, y, "heit", CAPTION_SIZE, CAPTION_LEAD)
            self._record(f"b{b.block_id}.caption", b, "caption", cbox, b.caption)
            top = y + cap_h + cap_gap
            xs = [MARGIN_X]
            for w in widths:
                xs.append(xs[-1] + w)
            # header
            for c in range(ncol):
                lines = head_lines[c]
                for i, (line, _lw) in enumerate(lines):
                    self._cell(line, "hebo", xs[c], xs[c + 1], top + 3.0 + i * TABLE_LINE, left=(c == 0))
            ry = top + head_h
            for r in b.rows:
                for c in range(ncol):
                    self._cell(r[c], "helv", xs[c], xs[c + 1], ry + 3.0, left=(c == 0))
                ry += row_h
            shape = self._page.new_shape()
            ys = [top, top + head_h] + [top + head_h + row_h * (i + 1) for i in range(len(b.rows))]
            for yy in ys:
                shape.draw_line((xs[0], yy), (xs[-1], yy))
            for xx in xs:
                shape.draw_line((xx, top), (xx, ys[-1]))
            shape.finish(width=0.7, color=(0, 0, 0))
            shape.commit()
            text = "\n".join(" | ".join(r) for r in (b.header,) + b.rows)
            self._record(f"b{b.block_id}", b, "table", (xs[0], top, xs[-1], ys[-1]), text)

        return _Prepared(cap_h + cap_gap + grid_h, 4.0, GAP_AFTER["table"], draw)

    def _cell(self, text: str, font: str, x0: float, x1: float, top: float, left: bool) -> None:
        assert self._tw is not None
        w = self._w(text, font, TABLE_SIZE)
        x = x0 + CELL_PAD if left else x1 - CELL_PAD - w
        self._tw.append((x, top + self._asc * TABLE_SIZE), text, font=self.fonts[font], fontsize=TABLE_SIZE)

    def _prep_image(self, b: ChartBlock | FigureBlock) -> _Prepared:
        if isinstance(b, ChartBlock):
            data = self.rasters.chart_png(b.spec)
            w, h = CHART_SIZE_IN[0] * 72.0, CHART_SIZE_IN[1] * 72.0
            etype = "chart"
        else:
            data, (w, h) = self.rasters.figure_bytes(b.spec)
            etype = "figure"
        cap_lines = self.wrap(b.caption, "heit", CAPTION_SIZE, self.content_w)
        cap_h = self._lines_height(len(cap_lines), CAPTION_SIZE, CAPTION_LEAD)
        cap_gap = 6.0

        def draw(y: float) -> None:
            assert self._page is not None
            x0 = (self.W - w) / 2
            rect = (x0, y, x0 + w, y + h)
            self._page.insert_image(self._pm.Rect(*rect), stream=data)
            self._record(f"b{b.block_id}", b, etype, rect, "")
            cbox = self._text_lines(cap_lines, MARGIN_X, y + h + cap_gap, "heit", CAPTION_SIZE, CAPTION_LEAD,
                                    (MARGIN_X, self.W - MARGIN_X))
            self._record(f"b{b.block_id}.caption", b, "caption", cbox, b.caption)

        return _Prepared(h + cap_gap + cap_h, IMAGE_GAP_BEFORE, GAP_AFTER["image"], draw)

    # --- footnotes -------------------------------------------------------------------------

    def _foot_lines(self, text: str) -> list[str]:
        return self.wrap(text, "helv", FOOT_SIZE, self.content_w)

    def _foot_height(self, text: str) -> float:
        return len(self._foot_lines(text)) * FOOT_LEAD + 2.0

    def _draw_footnotes(self) -> None:
        if not self._footnotes or self._page is None:
            return
        y = self.bottom - self._foot_h
        shape = self._page.new_shape()
        shape.draw_line((MARGIN_X, y - 5.0), (MARGIN_X + 120.0, y - 5.0))
        shape.finish(width=0.5, color=(0.3, 0.3, 0.3))
        shape.commit()
        for _marker, text, block_id in self._footnotes:
            lines = self._foot_lines(text)
            bbox = self._text_lines(lines, MARGIN_X, y, "helv", FOOT_SIZE, FOOT_LEAD)
            self.elements.append(DrawnElement(f"b{block_id}.footnote", block_id, "footnote", self.page_index, bbox,
                                              text))
            y += len(lines) * FOOT_LEAD + 2.0

    # --- placing ------------------------------------------------------------------------------

    def _needed(self, preps: list[_Prepared], at_top: bool) -> tuple[float, float]:
        """(content height incl. gaps, extra footnote height) of a group here."""
        h = 0.0
        prev_gap = 0.0 if at_top else self._gap
        foot = 0.0
        for i, p in enumerate(preps):
            if not (at_top and i == 0):
                h += max(prev_gap, p.gap_before)
            h += p.height
            prev_gap = p.gap_after
            if p.footnote:
                foot += self._foot_height(p.footnote) + (0.0 if (self._foot_h or foot) else 8.0)
        return h, foot

    def fits(self, group: list[Block]) -> bool:
        """Would the whole group fit below the cursor on the current page?"""
        if any(isinstance(b, PageBreak) for b in group):
            return self._empty
        preps = [self._prepare_measure_only(b) for b in group]
        h, foot = self._needed(preps, self._empty)
        return self._y + h <= self._limit() - foot

    def _prepare_measure_only(self, block: Block) -> _Prepared:
        if isinstance(block, (ChartBlock, FigureBlock)):  # avoid rendering rasters just to measure
            if isinstance(block, ChartBlock):
                h = CHART_SIZE_IN[1] * 72.0
            else:
                from mage_gym.data.synth.charts import DIAGRAM_SIZE_IN, PHOTO_SIZE_PX

                h = PHOTO_SIZE_PX[1] * 0.75 if block.spec.kind == "photo" else DIAGRAM_SIZE_IN[1] * 72.0
            cap = self.wrap(block.caption, "heit", CAPTION_SIZE, self.content_w)
            return _Prepared(h + 6.0 + self._lines_height(len(cap), CAPTION_SIZE, CAPTION_LEAD), IMAGE_GAP_BEFORE,
                             GAP_AFTER["image"], lambda y: None)
        return self._prepare(block)

    def place(self, group: list[Block]) -> None:
        """Draw a group, starting a new page first when it does not fit here."""
        if any(isinstance(b, PageBreak) for b in group):
            if not self._empty:
                self._new_page()
            return
        if not self.fits(group) and not self._empty:
            self._new_page()
        for block in group:
            self._place_one(block)

    def _place_one(self, block: Block) -> None:
        prep = self._prepare(block)
        h, foot = self._needed([prep], self._empty)
        if self._y + h > self._limit() - foot and not self._empty:
            self._new_page()
            prep = self._prepare(block)  # footnote marker numbering restarts on the new page
            h, foot = self._needed([prep], True)
        if not self._empty:
            self._y += max(self._gap, prep.gap_before)
        elif isinstance(block, Heading) and block.level == 0:
            self._y += prep.gap_before
        prep.draw(self._y)
        self._y += prep.height
        self._gap = prep.gap_after
        self._empty = False
        if prep.footnote:
            self._foot_h += self._foot_height(prep.footnote)
            self._footnotes.append((prep.footnote[:1], prep.footnote, block.block_id))

    # --- finishing ------------------------------------------------------------------------------

    def finish(self, title: str, author: str, year: int) -> bytes:
        """Close the last page, add running headers/footers, subset fonts, return PDF bytes."""
        self._close_page()
        n = len(self.doc)
        grey = (0.35, 0.35, 0.35)
        front = max(1, self.labels.n_front)  # no running header on the cover (and a blank page after it)
        self.page_furniture = []
        for i in range(n):
            page = self.doc[i]
            tw = self._pm.TextWriter(page.rect, color=grey)
            furniture = []
            if i >= front:
                # Title only: a chapter name on the same baseline makes the header line vary from
                # page to page, and rule-based parsers then stop recognising it as a running header.
                tw.append((MARGIN_X, 44.0), title, font=self.fonts["helv"], fontsize=7.5)
                shape = page.new_shape()
                shape.draw_line((MARGIN_X, 50.0), (self.W - MARGIN_X, 50.0))
                shape.finish(width=0.4, color=grey)
                shape.commit()
                furniture.append(title)
            foot = self.labels.footer_text(i, n)
            fw = self._w(foot, "helv", 8.0)
            tw.append(((self.W - fw) / 2, self.H - 36.0), foot, font=self.fonts["helv"], fontsize=8.0)
            furniture.append(foot)
            self.page_furniture.append(furniture)
            tw.write_text(page)
        rules = self.labels.pdf_rules()
        if rules:
            self.doc.set_page_labels(rules)
        stamp = f"D:{year + 1}0301000000Z"
        self.doc.set_metadata({"title": title, "author": author, "creator": "mage-gym synth",
                               "producer": "mage-gym synth", "creationDate": stamp, "modDate": stamp})
        self.doc.subset_fonts()
        data = self.doc.tobytes(garbage=4, deflate=True, no_new_id=True)
        self.doc.close()
        return data
