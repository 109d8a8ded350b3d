"""Rule-based parser from PyMuPDF's text dictionary: no model, ~10-25 ms a page.

Why it exists: the layout model costs ~0.3 s a page; a corpus sweep, a test
or a quick look needs a parser two orders of magnitude cheaper that still
yields typed, paragraph-sized regions. Every rule is stated where it lives:

- blocks: PyMuPDF's text blocks, split where font size/weight changes or a
  gap opens, and re-joined where PyMuPDF cut one region: a section number
  beside its heading, and a first line set apart by a hanging indent (the
  previous line runs to the column edge without ending a sentence).
- body font size: the character-weighted most common span size of the
  document (:func:`document_stats`: up to 64 pages spread over it, so a page
  parses the same in any build chunk); a block is a *title* when short (<= 3 lines, <= 25 words) and either
  >= 1.15x the body size, or bold at body size and <= 15 words. Levels rank the
  distinct heading sizes (largest = 1); bold body-size headings come last.
- *list*: a block whose first line starts with a bullet glyph or an
  enumerator (``1.``, ``a)``, ``(iv)``); runs of short items merge into one
  list (:func:`~mage_gym.graph.parsers.geometry.merge_list_items`).
- *caption*: starts with Figure/Fig./Table/Chart/Exhibit + a number.
- *footnote*: in the lower 30% of the page, <= 0.85x body size.
- *header/footer*: blocks of <= 2 lines and <= 8 words (or a page number)
  wholly inside the top/bottom 7.5% band, or
  whose digit-masked text repeats on >= half of the sampled pages (>= 3) in the
  top/bottom 15%; they go to ``ParsedPage.header_text/footer_text``.
- *table*: "text grids" (:mod:`.tables`: >= 3 rows of >= 3 separated short
  cells), and clusters of only straight strokes/boxes (rules, cell shading)
  whose text forms a grid of >= 2 rows x 2 cells, else in which
  ``find_tables`` restricted to that cluster finds a grid (multi-line cells).
  Page-wide ``find_tables`` is off by default (``tables=True``): it costs
  0.1-0.7 s on real pages.
- *figure/chart*: placed images and clusters of vector drawings (>= 1% of
  the page, not a thin rule, not a text box background). A region is a
  *chart* when it holds >= 3 numeric text labels (axis ticks, values) or is a
  vector cluster of >= 20 paths with >= 2 numeric labels; otherwise a figure.
  Text inside a visual region, and short labels just outside it (axis ticks,
  legends), become the region's text and extend its box.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from mage_gym.graph.parsers.base import MIN_IMAGE_COVER, Parser, failed_page
from mage_gym.graph.parsers.tables import text_grid_tables
from mage_gym.graph.parsers.geometry import (
    MARGIN_BAND,
    REPEAT_BAND,
    area,
    band_of,
    clip_box,
    cluster_rects,
    inside_fraction,
    intersection,
    is_page_number,
    looks_like_chart,
    merge_list_items,
    move_to_margins,
    normalise_repeat_key,
    only_content,
    repeated_margin_keys,
    union,
    xy_cut_order,
)
from mage_gym.graph.patterns import BULLET_ONLY_RE, CAPTION_RE, LIST_ITEM_RE
from mage_gym.graph.schema import BBox, ParsedElement, ParsedPage

if TYPE_CHECKING:  # pragma: no cover
    import pymupdf

NUMERIC_RE = re.compile(r"^[\s$€£(+\-\u2212]*\d[\d.,]*\s*[%)kKmMbB]?\s*$")
FOOTNOTE_START_RE = re.compile(r"^\s*(\d{1,3}|[*\u2020\u2021\u00a7]|[\u00b9\u00b2\u00b3\u2070-\u2079]+)")


@dataclass
class Line:
    bbox: BBox
    text: str
    size: float
    bold: bool
    n_chars: int
    #: (bbox, text) pieces split where spans are far apart: table cells on one line
    segments: list[tuple[BBox, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.segments:
            self.segments = [(self.bbox, self.text)]


@dataclass
class Block:
    lines: list[Line]
    bbox: BBox = (0.0, 0.0, 0.0, 0.0)

    def __post_init__(self) -> None:
        self.bbox = union([l.bbox for l in self.lines])

    @property
    def text(self) -> str:
        return " ".join(l.text for l in self.lines).strip()

    @property
    def size(self) -> float:
        n = sum(l.n_chars for l in self.lines) or 1
        return sum(l.size * l.n_chars for l in self.lines) / n

    @property
    def bold(self) -> bool:
        n = sum(l.n_chars for l in self.lines) or 1
        return sum(l.n_chars for l in self.lines if l.bold) / n > 0.6


@dataclass
class RawPage:
    """What pass 1 extracts from a page; pass 2 classifies with document statistics."""

    index: int
    width: float
    height: float
    blocks: list[Block]
    visuals: list[tuple[BBox, str, int]] = field(default_factory=list)  # (bbox, "image"/"vector", n_paths)
    tables: list[tuple[BBox, str]] = field(default_factory=list)  # (bbox, markdown)
    n_chars: int = 0
    image_cover: float = 0.0  # largest image's share of the page
    warnings: list[str] = field(default_factory=list)


def _text_flags() -> int:
    import pymupdf

    # no image payloads in the dict (they are the slow part); keep ligatures/whitespace
    return pymupdf.TEXT_PRESERVE_LIGATURES | pymupdf.TEXT_PRESERVE_WHITESPACE | pymupdf.TEXT_MEDIABOX_CLIP


def text_blocks(page: "pymupdf.Page") -> list[Block]:
    """The text blocks of a page (lines split into blocks, bullets attached): pass 1's text part."""
    d = page.get_text("dict", flags=_text_flags())
    blocks: list[Block] = []
    for b in d.get("blocks", ()):
        if b.get("type") != 0:
            continue
        lines = _glue_bullet_lines(_lines_of_block(b))
        if lines:
            blocks.extend(_split_block(lines))
    return _attach_bullets(_join_blocks(blocks))


SECTION_NUMBER_RE = re.compile(r"^(\d{1,2}(\.\d{1,2}){0,3}\.?|[A-Z]\.?|[IVX]{1,4}\.)$")
SENTENCE_END_RE = re.compile(r"[.!?:;]['\")\]]?$")


def _join_blocks(blocks: list[Block]) -> list[Block]:
    """Join blocks MuPDF split inside one region; consecutive pairs only.

    * A section number set apart from its heading on the same line ("2",
      "RELATED WORK") becomes one line ("2 RELATED WORK").
    * A block whose last line runs to the column's right edge without ending
      a sentence continues in the next block when that one starts just below
      at nearly the same left edge (hanging indents: reference entries,
      numbered paragraphs). MuPDF makes the first line its own block there,
      which halved entries and doubled the elements to embed.
    """
    out: list[Block] = []
    for b in blocks:
        joined = _joined(out[-1], b) if out else None
        if joined is not None:
            out[-1] = joined
        else:
            out.append(b)
    return out


def _joined(a: Block, b: Block) -> Block | None:
    """``a`` and ``b`` as one block when :func:`_join_blocks`'s rules say so, else None."""
    if _section_number_then_heading(a, b):
        first = b.lines[0]
        # the number's size is the heading's true size (small caps lower the text's mean)
        head = Line(union([a.bbox, first.bbox]), f"{a.text} {first.text}", max(a.size, first.size),
                    first.bold, a.lines[0].n_chars + first.n_chars)
        return Block([head, *b.lines[1:]])
    if _continues(a, b):
        return Block([*a.lines, *b.lines])
    return None


def _section_number_then_heading(a: Block, b: Block) -> bool:
    if len(a.lines) != 1 or not SECTION_NUMBER_RE.match(a.text):
        return False
    first = b.lines[0]
    h = min(a.bbox[3] - a.bbox[1], first.bbox[3] - first.bbox[1])
    overlap = min(a.bbox[3], first.bbox[3]) - max(a.bbox[1], first.bbox[1])
    gap = first.bbox[0] - a.bbox[2]
    return h > 0 and overlap >= 0.6 * h and 0 <= gap <= 3 * max(first.size, 1.0) and \
        abs(a.size - first.size) <= 0.25 * max(a.size, first.size, 1.0)


def _continues(a: Block, b: Block) -> bool:
    last, first = a.lines[-1], b.lines[0]
    size = max(last.size, 1.0)
    if abs(last.size - first.size) > 0.15 * size or last.bold != first.bold or LIST_ITEM_RE.match(first.text):
        return False
    line_h = max(last.bbox[3] - last.bbox[1], 1.0)
    if not -0.2 * line_h <= first.bbox[1] - last.bbox[3] <= 0.6 * line_h:
        return False  # not the next line
    right = max(a.bbox[2], b.bbox[2])
    full = last.bbox[2] >= right - 1.5 * size and last.bbox[2] - last.bbox[0] >= 15 * size
    b_full = len(b.lines) == 1 or first.bbox[2] >= right - 1.5 * size  # an indented, narrower block is its own
    return full and b_full and abs(first.bbox[0] - a.bbox[0]) <= 1.5 * size and not SENTENCE_END_RE.search(last.text)


def _lines_of_block(block: dict[str, Any]) -> list[Line]:
    out: list[Line] = []
    for ln in block.get("lines", ()):
        spans = [s for s in ln.get("spans", ()) if s.get("text", "").strip()]
        if not spans:
            continue
        text = "".join(s["text"] for s in ln["spans"]).strip()
        text = " ".join(text.split())
        n = sum(len(s["text"].strip()) for s in spans)
        size = sum(s["size"] * len(s["text"].strip()) for s in spans) / max(n, 1)
        bold_chars = sum(len(s["text"].strip()) for s in spans if (s["flags"] & 16) or "bold" in s["font"].lower() or "black" in s["font"].lower() or "heavy" in s["font"].lower())
        segments: list[tuple[BBox, str]] = []
        for sp in spans:
            sb = tuple(sp["bbox"])
            if segments and sb[0] - segments[-1][0][2] <= 1.2 * sp["size"]:
                pb, pt = segments[-1]
                segments[-1] = ((pb[0], min(pb[1], sb[1]), max(pb[2], sb[2]), max(pb[3], sb[3])), pt + sp["text"])
            else:
                segments.append((sb, sp["text"]))
        segments = [(b, " ".join(t.split())) for b, t in segments if t.strip()]
        text = " ".join(t for _, t in segments)  # a space where spans sit apart (table cells, labels)
        out.append(Line(tuple(ln["bbox"]), text, float(size), bold_chars / max(n, 1) > 0.6, n, segments))
    return out


def _glue_bullet_lines(lines: list[Line]) -> list[Line]:
    """A bullet glyph drawn as its own line joins the text line on its right."""
    if not any(BULLET_ONLY_RE.match(l.text) for l in lines):
        return lines
    rest = [l for l in lines if not BULLET_ONLY_RE.match(l.text)]
    for m in (l for l in lines if BULLET_ONLY_RE.match(l.text)):
        best, dist = None, 1e9
        for i, l in enumerate(rest):
            overlap = min(m.bbox[3], l.bbox[3]) - max(m.bbox[1], l.bbox[1])
            dx = l.bbox[0] - m.bbox[2]
            if overlap > 0 and -2 <= dx < 40 and dx < dist:
                best, dist = i, dx
        if best is None:
            rest.append(m)
        else:
            l = rest[best]
            rest[best] = Line(union([l.bbox, m.bbox]), "\u2022 " + l.text, l.size, l.bold, l.n_chars)
    return sorted(rest, key=lambda l: (round(l.bbox[1]), l.bbox[0]))


def _split_block(lines: list[Line]) -> list[Block]:
    """Split a PyMuPDF block where the font size/weight changes or a big gap opens.

    PyMuPDF often glues a heading to the paragraph under it; the split puts
    them back into separate regions.
    """
    groups: list[list[Line]] = []
    for ln in lines:
        if groups:
            prev = groups[-1][-1]
            h = max(prev.bbox[3] - prev.bbox[1], 1.0)
            size_jump = abs(ln.size - prev.size) > 0.15 * max(prev.size, 1.0)
            weight_jump = ln.bold != prev.bold and (len(prev.text) < 80 or len(ln.text) < 80) and \
                not (ln.bbox[1] < prev.bbox[3] - 0.3 * h)  # same baseline: inline bold, no split
            gap = ln.bbox[1] - prev.bbox[3] > 1.2 * h
            new_item = bool(LIST_ITEM_RE.match(ln.text)) and ln.bbox[1] >= prev.bbox[3] - 0.3 * h
            if not (size_jump or weight_jump or gap or new_item):
                groups[-1].append(ln)
                continue
        groups.append([ln])
    return [Block(g) for g in groups]


def _attach_bullets(blocks: list[Block]) -> list[Block]:
    """A lone bullet glyph (its own block) is prefixed to the text on its right."""
    markers = [b for b in blocks if BULLET_ONLY_RE.match(b.text)]
    if not markers:
        return blocks
    rest = [b for b in blocks if not BULLET_ONLY_RE.match(b.text)]
    for m in markers:
        my0, my1 = m.bbox[1], m.bbox[3]
        best, dist = None, 1e9
        for b in rest:
            first = b.lines[0]
            overlap = min(my1, first.bbox[3]) - max(my0, first.bbox[1])
            dx = first.bbox[0] - m.bbox[2]
            if overlap > 0 and -2 <= dx < 40 and dx < dist:
                best, dist = b, dx
        if best is not None:
            f = best.lines[0]
            best.lines[0] = Line(union([f.bbox, m.bbox]), "\u2022 " + f.text, f.size, f.bold, f.n_chars)
            best.bbox = union([best.bbox, m.bbox])
    return rest


def _is_straight(item: dict[str, Any]) -> int:
    """Number of horizontal/vertical strokes (or rectangles) in a drawing path (either path form)."""
    n = 0
    for it in item.get("items", ()):
        op = it[0]
        if op == "re":
            n += 1
        elif op == "l":
            p, q = it[1], it[2]
            if abs(p[0] - q[0]) < 1.0 or abs(p[1] - q[1]) < 1.0:
                n += 1
    return n


_PATH_KEYS = ("closePath", "fill", "color", "width", "lineCap", "lineJoin", "dashes",
              "stroke_opacity", "fill_opacity", "even_odd")


def _native_paths(paths: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``get_cdrawings`` paths in ``get_drawings``' form (Point / Rect / Quad objects, all keys).

    Why: ``get_drawings`` builds those objects for every path of a page,
    while only the few paths handed to ``find_tables`` need them. Reading
    plain paths, a 49-page paper parses in 0.96 instead of 1.23 CPU-s.
    """
    import pymupdf

    out = []
    for p in paths:
        q = dict(p, rect=pymupdf.Rect(p["rect"]))
        items = []
        for it in p["items"]:
            if it[0] == "re":
                items.append(("re", pymupdf.Rect(it[1]).normalize(), *it[2:]))
            elif it[0] == "qu":
                items.append(("qu", pymupdf.Quad(it[1])))
            else:
                items.append((it[0], *(pymupdf.Point(v) for v in it[1:])))
        q["items"] = items
        if q.get("type") in ("f", "s"):
            for k in _PATH_KEYS:
                q.setdefault(k, None)
        out.append(q)
    return out


class FastParser(Parser):
    """Rule-based regions from the text layer; see the module docstring for the rules."""

    name = "fast"

    def __init__(self, tables: bool = False, grid_tables: bool = True, min_table_strokes: int = 6,
                 max_paths: int = 5000, ruled_tables: bool = True, **cfg: Any) -> None:
        super().__init__(**cfg)
        self.tables = tables
        self.grid_tables = grid_tables
        self.min_table_strokes = min_table_strokes
        self.max_paths = max_paths
        self.ruled_tables = ruled_tables
        #: text blocks read by :meth:`document_stats`, by (file, page), each used once by pass 1
        self._sampled: dict[tuple[str, int], list[Block]] = {}

    # pass 1 ----------------------------------------------------------------------

    def extract(self, page: "pymupdf.Page", blocks: list[Block] | None = None) -> RawPage:
        """Pass 1 of a page; ``blocks`` are its :func:`text_blocks` when already read."""
        W, H = page.rect.width, page.rect.height
        raw = RawPage(page.number, W, H, text_blocks(page) if blocks is None else blocks)
        blocks = raw.blocks
        page_area = max(W * H, 1.0)
        raw.n_chars = sum(l.n_chars for b in blocks for l in b.lines)
        text_present = raw.n_chars > 20

        for info in page.get_image_info():
            bb = clip_box(tuple(info["bbox"]), W, H)
            raw.image_cover = max(raw.image_cover, area(bb) / page_area)
            if area(bb) < 0.01 * page_area or min(bb[2] - bb[0], bb[3] - bb[1]) < 0.03 * min(W, H):
                continue
            if area(bb) > 0.8 * page_area and text_present:
                continue  # full-page background under real text
            raw.visuals.append((bb, "image", 0))

        paths = page.get_cdrawings()  # plain tuples: get_drawings' objects cost more than the paths
        if len(paths) > self.max_paths:
            raw.warnings.append(f"{len(paths)} vector paths: drawing clusters skipped")
            paths = []
        straight = [_is_straight(p) for p in paths]
        all_straight = np.asarray([s == len(p["items"]) > 0 for s, p in zip(straight, paths)], bool)
        strokes = sum(straight)
        if paths:
            rects = np.asarray([p["rect"] for p in paths], np.float64).reshape(-1, 4)
            for r in cluster_rects(rects, W, H):
                bb = clip_box(r, W, H)
                w, h = bb[2] - bb[0], bb[3] - bb[1]
                if area(bb) < 0.01 * page_area or w < 0.05 * W or h < 0.04 * H:
                    continue
                if area(bb) > 0.85 * page_area:
                    continue  # page frame / background
                inside = np.flatnonzero(_rects_within(rects, bb))
                members = [paths[i] for i in inside]
                n_straight = int(all_straight[inside].sum())
                inner_all = [(b, l) for b in blocks for l in b.lines if inside_fraction(l.bbox, bb) > 0.8]
                inner = [seg for b, l in inner_all if not _prose_block(b) for seg in l.segments]
                if members and n_straight >= 0.8 * len(members):
                    # only rules and boxes: a ruled table if the text inside forms a grid
                    grids = text_grid_tables(inner, W, min_rows=2, min_cells=2)
                    if grids and sum(area(g.bbox) for g in grids) >= 0.4 * area(bb):
                        for g in grids:
                            raw.tables.append((g.bbox, g.markdown))
                        continue
                    if inner and len(members) >= 6 and self.ruled_tables:
                        ruled = _ruled_tables_in(page, bb, _native_paths(members))  # cells with multi-line text
                        if ruled:
                            raw.tables.extend(ruled)
                            continue
                prose = sum(1 for _, l in inner_all if len(l.text.split()) >= 7)
                if len(members) < 6 or prose >= 2:
                    continue  # a banner, frame or shaded box: its text stays ordinary text
                raw.visuals.append((bb, "vector", len(members)))

        if self.tables and strokes >= self.min_table_strokes:
            try:
                found = page.find_tables(use_layout=False)
                for t in found.tables:
                    bb = clip_box(tuple(t.bbox), W, H)
                    if t.row_count < 2 or t.col_count < 2:
                        continue
                    try:
                        md = t.to_markdown(clean=False)
                    except Exception:  # noqa: BLE001
                        md = ""
                    raw.tables.append((bb, md))
            except Exception as exc:  # noqa: BLE001
                raw.warnings.append(f"find_tables failed: {exc}")
        if self.grid_tables:
            # prose blocks (>= 3 lines, most of >= 5 words) never hold table cells; leaving them
            # out stops a text column beside a table from joining the table's rows
            free = [l for b in blocks if not _prose_block(b) for l in b.lines
                    if not any(inside_fraction(l.bbox, t[0]) > 0.6 for t in raw.tables)]
            for gt in text_grid_tables([seg for l in free for seg in l.segments], W):
                # numbers inside a chart or picture form a grid too: the visual wins there
                if any(inside_fraction(gt.bbox, v[0]) > 0.6 and (v[1] == "image" or v[2] >= 20)
                       and area(gt.bbox) < 0.5 * area(v[0]) for v in raw.visuals):
                    continue
                raw.tables.append((gt.bbox, gt.markdown))
        return raw

    # pass 2 ----------------------------------------------------------------------

    def parse_pdf_pages(self, doc: "pymupdf.Document", page_numbers: list[int]) -> list[ParsedPage]:
        from mage_gym.graph.parsers.base import MIN_IMAGE_COVER, MIN_TEXT_CHARS, is_absurd

        raws: dict[int, RawPage] = {}
        done: dict[int, ParsedPage] = {}
        for pno in page_numbers:
            try:
                page = doc.load_page(pno)
                raw = self.extract(page, self._sampled.pop((doc.name, pno), None))
                # same rule as base.needs_ocr, from the text we already extracted
                if self.ocr_enabled and raw.n_chars < MIN_TEXT_CHARS and raw.image_cover >= MIN_IMAGE_COVER:
                    done[pno] = self.parse_image_only_pdf_page(page)
                    continue
                if is_absurd(raw.width, raw.height):
                    raw.warnings.append(f"absurd page size {raw.width:.0f}x{raw.height:.0f} pt")
                raws[pno] = raw
            except Exception as exc:  # noqa: BLE001 - isolate one page
                done[pno] = failed_page(doc, pno, exc)
            finally:
                self.pages_done(1)  # pass 1 is the page's cost; pass 2 takes about a millisecond
        stats = self.stats if isinstance(self.stats, DocStats) else DocStats.from_raw(list(raws.values()))
        for pno, raw in raws.items():
            try:
                done[pno] = classify(raw, stats)
            except Exception as exc:  # noqa: BLE001
                done[pno] = failed_page(doc, pno, exc)
        return [done[p] for p in page_numbers]

    def parse_text_page(self, page: "pymupdf.Page") -> ParsedPage:
        raw = self.extract(page)
        return classify(raw, DocStats.from_raw([raw]))

    def document_stats(self, doc: "pymupdf.Document", scope: list[int]) -> "DocStats":
        sampled: dict[int, list[Block]] = {}
        stats = document_stats(doc, scope, blocks_out=sampled)
        self._sampled = {(doc.name, pno): blocks for pno, blocks in sampled.items()}  # not read twice
        return stats


@dataclass
class DocStats:
    body_size: float
    heading_sizes: list[float]
    repeated: set[str]

    @classmethod
    def from_raw(cls, raws: list[RawPage]) -> "DocStats":
        sizes: Counter[float] = Counter()
        for r in raws:
            for b in r.blocks:
                for l in b.lines:
                    sizes[round(l.size * 2) / 2] += l.n_chars
        body = sizes.most_common(1)[0][0] if sizes else 10.0
        cand: set[float] = set()
        for r in raws:
            for b in r.blocks:
                if _title_shape(b) and b.size >= 1.15 * body:
                    cand.add(round(b.size))
        repeated = repeated_margin_keys(
            [[(l.bbox, l.text) for b in r.blocks for l in b.lines] for r in raws], [r.height for r in raws]
        )
        return cls(body, sorted(cand, reverse=True)[:5], repeated)

    def heading_level(self, size: float) -> int:
        s = round(size)
        if s in self.heading_sizes:
            return self.heading_sizes.index(s) + 1
        return len(self.heading_sizes) + 1


#: pages read for :func:`document_stats` (evenly spread); enough for stable font-size statistics
STATS_SAMPLE_PAGES = 64


def sample_evenly(scope: list[int], k: int) -> list[int]:
    """``k`` pages of ``scope`` spread evenly (all of them when there are at most ``k``)."""
    if len(scope) <= k:
        return list(scope)
    step = len(scope) / k
    return sorted({scope[int(i * step)] for i in range(k)})


def document_stats(doc: "pymupdf.Document", scope: list[int], sample: int = STATS_SAMPLE_PAGES,
                   blocks_out: dict[int, list[Block]] | None = None) -> DocStats:
    """Font statistics (body size, heading sizes, repeated margin lines) of a whole document.

    Read from the text of up to ``sample`` pages spread over ``scope``: a
    text-only pass costs about 3 ms a page, so the statistics stay
    independent of how the build splits the document into chunks. Pages
    that fail to load are skipped. ``blocks_out`` receives each sampled
    page's text blocks, so a parser need not read them again.
    """
    raws: list[RawPage] = []
    for pno in sample_evenly(scope, sample):
        try:
            page = doc.load_page(pno)
            raws.append(RawPage(pno, page.rect.width, page.rect.height, text_blocks(page)))
        except Exception:  # noqa: BLE001 - the page's own parse reports the failure
            continue
        if blocks_out is not None:
            blocks_out[pno] = raws[-1].blocks
    return DocStats.from_raw(raws)


def _title_shape(b: Block) -> bool:
    words = len(b.text.split())
    return len(b.lines) <= 3 and 0 < words <= 25 and any(c.isalpha() for c in b.text)


def _margin_kind(b: Block, r: RawPage, stats: DocStats) -> str | None:
    text = b.text
    where = band_of(b.bbox, r.height, MARGIN_BAND)
    if where and len(b.lines) <= 2 and (len(text.split()) <= 8 or is_page_number(text)):
        return where
    wide = band_of(b.bbox, r.height, REPEAT_BAND)
    if wide and (normalise_repeat_key(text) in stats.repeated or
                 all(normalise_repeat_key(l.text) in stats.repeated for l in b.lines)):
        return wide
    if wide and is_page_number(text) and band_of(b.bbox, r.height, 0.12):
        return wide
    return None


def classify(r: RawPage, stats: DocStats, has_content: bool = False) -> ParsedPage:
    """Pass 2: typed elements in reading order for one page.

    ``has_content`` says the page holds elements found elsewhere (the layout
    parser classifies text its model left out this way), so margin-like lines
    here are margins even when they are all this call sees.
    """
    body = stats.body_size
    header: list[str] = []
    footer: list[str] = []
    elements: list[ParsedElement] = []

    # visual regions: merge overlapping ones, drop those that are text-box backgrounds or tables
    tables = [(bb, md) for bb, md in r.tables]
    visuals: list[list[Any]] = []
    for bb, kind, n in sorted(r.visuals, key=lambda v: -area(v[0])):
        if any(intersection(bb, t[0]) > 0.5 * area(bb) for t in tables):
            continue
        for v in visuals:
            if intersection(bb, v[0]) > 0.3 * min(area(bb), area(v[0])):
                v[0] = union([v[0], bb])
                v[2] += n
                v[3] = v[3] or kind == "vector"
                break
        else:
            visuals.append([bb, kind, n, kind == "vector"])
    kept_visuals: list[list[Any]] = []
    for v in visuals:
        inside = [b for b in r.blocks if inside_fraction(b.bbox, v[0]) > 0.6]
        prose = sum(1 for b in inside for l in b.lines if len(l.text.split()) >= 7)
        text_area = sum(area(l.bbox) for b in inside for l in b.lines)
        if v[1] == "vector" and v[2] < 20 and (prose >= 2 or text_area > 0.25 * area(v[0])):
            continue  # a shaded text box, not a graphic
        if v[1] == "image" and prose >= 4 and text_area > 0.35 * area(v[0]):
            continue  # an image behind a text column
        kept_visuals.append(v)
    _grow_visuals_over_labels(kept_visuals, r.blocks, body, tables)

    absorbed: dict[int, list[Block]] = {i: [] for i in range(len(tables) + len(kept_visuals))}
    texts: list[Block] = []
    margins: list[tuple[str, Block]] = []
    for b in r.blocks:
        kind = _margin_kind(b, r, stats)
        if kind is not None:
            margins.append((kind, b))
            continue
        owner = None
        for i, (bb, _md) in enumerate(tables):
            if inside_fraction(b.bbox, bb) > 0.6:
                owner = i
                break
        if owner is None and _label_like(b, body):
            for j, v in enumerate(kept_visuals):
                if inside_fraction(b.bbox, v[0]) > 0.6:
                    owner = len(tables) + j
                    break
        if owner is not None:
            absorbed[owner].append(b)
        else:
            texts.append(b)

    # a page-sized image is content the text layer does not hold (a scan under a stamped case number):
    # margin lines over it stay furniture
    content = bool(tables or kept_visuals or any(b.text for b in texts)) or has_content \
        or r.image_cover >= MIN_IMAGE_COVER
    # fine print (a print shop's slug on a blank page) stays furniture: the footnote threshold again
    kept = only_content([m for m in margins if m[1].size > 0.85 * body], lambda m: m[1].text, content)
    texts.extend(b for _, b in kept)
    for kind, b in margins:
        if not any(b is k for _, k in kept):
            (header if kind == "header" else footer).append(b.text)

    for i, (bb, md) in enumerate(tables):
        inner = absorbed[i]
        text = " ".join(b.text for b in inner)
        elements.append(ParsedElement("table", bb, text or md, table_markdown=md or None))
    for j, v in enumerate(kept_visuals):
        inner = absorbed[len(tables) + j]
        labels = [l.text for b in inner for l in b.lines]
        chart = looks_like_chart(labels, v[2])
        elements.append(ParsedElement("chart" if chart else "figure", tuple(v[0]), " ".join(labels)))

    for b in texts:
        text = b.text
        if not text:
            continue
        if CAPTION_RE.match(text) and len(b.lines) <= 6:
            elements.append(ParsedElement("caption", b.bbox, text))
        elif LIST_ITEM_RE.match(b.lines[0].text) and not (len(b.lines) == 1 and NUMERIC_RE.match(text)):
            elements.append(ParsedElement("list", b.bbox, "\n".join(l.text for l in b.lines)))
        elif _title_shape(b) and not text.endswith((".", ",", ";")) and (
            b.size >= 1.15 * body or (b.bold and b.size >= 0.95 * body and len(text.split()) <= 15 and len(b.lines) <= 2)
        ):
            elements.append(ParsedElement("title", b.bbox, text, heading_level=stats.heading_level(b.size)))
        elif b.size <= 0.85 * body and b.bbox[1] >= 0.7 * r.height and FOOTNOTE_START_RE.match(text):
            elements.append(ParsedElement("footnote", b.bbox, text))
        else:
            elements.append(ParsedElement("paragraph", b.bbox, text))

    elements = [ParsedElement(e.type, clip_box(e.bbox, r.width, r.height), e.text, e.table_markdown, e.heading_level, e.ocr)
                for e in elements]
    ordered = xy_cut_order(elements, lambda e: e.bbox, min_gap_x=max(6.0, 0.012 * r.width), min_gap_y=2.0)
    ordered = merge_list_items(ordered)
    page = ParsedPage(index=r.index, width=r.width, height=r.height, elements=ordered, warnings=list(r.warnings))
    move_to_margins(page, header, footer)
    return page


def _cells_markdown(rows: list[list[Any]]) -> str:
    """Markdown from ``Table.extract()`` (``to_markdown`` costs ~80 ms for header guessing)."""
    clean = [["" if c is None else " ".join(str(c).split()).replace("|", "/") for c in r] for r in rows]
    if not clean:
        return ""
    ncol = max(len(r) for r in clean)
    lines = ["| " + " | ".join(r + [""] * (ncol - len(r))) + " |" for r in clean]
    return "\n".join([lines[0], "|" + "---|" * ncol] + lines[1:])


def _ruled_tables_in(page: "pymupdf.Page", bb: BBox, paths: list | None = None) -> list[tuple[BBox, str]]:
    """``find_tables`` restricted to one cluster of ruling lines.

    ``paths`` are the cluster's own vector paths: handing them over spares
    ``find_tables`` from re-extracting and cleaning every path of the page on
    each call (on 40 clusters of a 49-page paper: 0.34 s instead of 1.83 s,
    the same tables).
    """
    try:
        found = page.find_tables(clip=bb, use_layout=False, paths=paths)
    except Exception:  # noqa: BLE001
        return []
    out = []
    for t in found.tables:
        if t.row_count >= 2 and t.col_count >= 2:
            try:
                md = _cells_markdown(t.extract())
            except Exception:  # noqa: BLE001
                md = ""
            out.append((clip_box(tuple(t.bbox), page.rect.width, page.rect.height), md))
    return out


def _prose_block(b: Block) -> bool:
    long = sum(1 for l in b.lines if len(l.text.split()) >= 5)
    return len(b.lines) >= 3 and long > len(b.lines) / 2


def _rects_within(rects: np.ndarray, box: BBox, tol: float = 1.0) -> np.ndarray:
    """Which of an [n, 4] array of rects lie inside ``box`` (a mask; works for zero-area lines too)."""
    return ((rects[:, 0] >= box[0] - tol) & (rects[:, 1] >= box[1] - tol)
            & (rects[:, 2] <= box[2] + tol) & (rects[:, 3] <= box[3] + tol))


def _label_like(b: Block, body: float) -> bool:
    """Text that belongs to a picture: short lines (<= 6 words), not a big title or a caption.

    Sentences and slide titles printed over a background image stay text
    elements; tick labels, legends and diagram labels join the visual.
    """
    return (all(len(l.text.split()) <= 6 for l in b.lines) and b.size < 1.3 * body
            and not CAPTION_RE.match(b.text))


def _box_gap(a: BBox, b: BBox) -> float:
    """Distance between two boxes (0 when they touch or overlap)."""
    dx = max(0.0, max(a[0], b[0]) - min(a[2], b[2]))
    dy = max(0.0, max(a[1], b[1]) - min(a[3], b[3]))
    return max(dx, dy)


def _grow_visuals_over_labels(visuals: list[list[Any]], blocks: list[Block], body: float,
                              tables: list[tuple[BBox, str]]) -> None:
    """Extend each visual region over the short labels drawn just outside it.

    Axis ticks, legends and category names of a chart usually sit outside
    the cluster of vector paths (or the raster image); they belong to the
    chart, both for its text and for its box. A label is a block of <= 12 words
    with <= 5 words per line, not a caption, within 2.5x the body font size.
    """
    pad = 2.5 * body
    for v in visuals:
        for _ in range(2):
            grown = False
            for b in blocks:
                if inside_fraction(b.bbox, v[0]) > 0.6 or len(b.text.split()) > 12 or \
                        any(len(l.text.split()) > 5 for l in b.lines):
                    continue
                if CAPTION_RE.match(b.text) or any(inside_fraction(b.bbox, t[0]) > 0.6 for t in tables):
                    continue
                if _box_gap(b.bbox, v[0]) <= pad:
                    v[0] = union([v[0], b.bbox])
                    grown = True
            if not grown:
                break


