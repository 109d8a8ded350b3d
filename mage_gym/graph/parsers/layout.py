"""Default parser: PyMuPDF's built-in ONNX layout model via pymupdf4llm.

Why this model: it ships inside ``pymupdf_layout`` (no download), knows the
region classes we need (text, title, section-header, list-item, table,
picture, caption, formula, footnote, page-header, page-footer) and returns
them with a reading order; ~0.2-0.5 s a page on this CPU.

Mapping to :data:`~mage_gym.graph.schema.ELEMENT_TYPES`:
``title``/``section-header`` -> title (a ``title`` box is level 1; a section
header's level ranks its font size among the document's heading sizes, see
:meth:`LayoutParser._heading_level`), ``text`` -> paragraph,
runs of short ``list-item`` boxes -> one list (long items stay separate), ``table`` -> table (markdown from
the model's table grid, else from ``find_tables(use_layout=False)`` on the
same area), ``picture`` -> chart or figure (rule in
:func:`~mage_gym.graph.parsers.geometry.looks_like_chart`: numeric labels and
vector paths inside the box), ``caption``/``formula``/``footnote`` as is.
``page-header``/``page-footer`` are not elements: their text goes to
``ParsedPage.header_text``/``footer_text``.

Routing: pages without a text layer, and page images, go through RapidOCR
(:mod:`.ocr`). With ``image_ocr="layout"`` (default) the OCR lines are written
into the page as invisible text and the layout model boxes the page like any
other, so scans also get pictures, tables, titles and lists; lines no model
box covers are added as line-grouped blocks, so no OCR text is lost. (We do
not use pymupdf4llm's own OCR path: on the scanned dev decks it dropped whole
lines.) ``image_ocr="rapidocr"`` uses only the line grouping. Pages with an
absurd size, or on which the model fails, fall back to the fast parser with a
page warning. *Simple* pages (no image, no vector path, one plain run of text:
the rule is :func:`~mage_gym.graph.parsers.simple.simple_page`) skip the
model and are typed by the fast parser's rules (``plain_pages_without_model``,
on by default): a generated report of one line a page builds at the fast
parser's speed.

Batching: the model's pages of a parse call go to pymupdf4llm
``batch_pages`` at a time (one ``parse_document`` call each, which sets up the
document once and then runs the model page by page; its image network takes
one page render per run). A batch yields the same records as its pages one
by one (tests/test_layout_routing.py); a batch that fails is retried page by
page, and a page that still fails falls back to the fast parser.
"""
from __future__ import annotations

import contextlib
import io
import logging
import warnings
from typing import TYPE_CHECKING, Any

from mage_gym.graph.parsers.base import Parser, failed_page, is_absurd, needs_ocr
from mage_gym.graph.parsers.simple import simple_page
from mage_gym.graph.parsers.geometry import (
    clip_box, join_lines, looks_like_chart, merge_list_items, move_to_margins, only_content,
)
from mage_gym.graph.schema import ParsedElement, ParsedPage

if TYPE_CHECKING:  # pragma: no cover
    import pymupdf

log = logging.getLogger(__name__)

_SIMPLE = {"text": "paragraph", "caption": "caption", "formula": "formula", "footnote": "footnote"}
_MARGIN = {"page-header": "header", "page-footer": "footer"}


def _get(box: Any, key: str, default: Any = None) -> Any:
    return box.get(key, default) if isinstance(box, dict) else getattr(box, key, default)


def _join_spans(spans: Any) -> str:
    """Span texts of one line, with a space where the spans are visibly apart.

    The layout helper merges spans at one height into a line even across a gap
    (chart labels "2015" and "2008"); gluing them would corrupt numbers.
    """
    parts: list[str] = []
    prev_x1: float | None = None
    for s in spans:
        text = s.get("text", "")
        bbox = s.get("bbox")
        if parts and bbox is not None and prev_x1 is not None:
            gap = bbox[0] - prev_x1
            if gap > 0.2 * float(s.get("size", 10.0)) and not parts[-1].endswith(" ") and not text.startswith(" "):
                parts.append(" ")
        parts.append(text)
        if bbox is not None:
            prev_x1 = bbox[2]
    return "".join(parts).strip()


def _lines_text(textlines: Any, sep: str = " ") -> str:
    out = []
    for line in textlines or ():
        spans = line.get("spans", ()) if isinstance(line, dict) else line[1]
        t = _join_spans(spans)
        if t:
            out.append(" ".join(t.split()))
    return join_lines(out, sep)


def _run_layout_model(doc: "pymupdf.Document", pages: list[int]) -> list[Any]:
    """pymupdf4llm's layout pass over ``pages``; returns its per-page records.

    Uses ``parse_document`` (the function behind the public ``to_json``) to
    skip a JSON round trip, falling back to ``to_json`` if the helper moved.
    Library chatter on stdout is swallowed.
    """
    import pymupdf
    import pymupdf4llm

    kwargs: dict[str, Any] = dict(pages=pages, force_text=True, use_ocr=False)  # OCR is ours (see module doc)
    sink = io.StringIO()
    # pymupdf.message() writes to a stream captured at import time, not sys.stdout
    saved = getattr(pymupdf, "_g_out_message", None)
    if saved is not None:
        pymupdf._g_out_message = sink
    try:
        with contextlib.redirect_stdout(sink), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # numpy noise in the library's feature code
            try:
                from pymupdf4llm.helpers.document_layout import parse_document

                parsed = parse_document(doc, **kwargs)
                records = list(parsed.pages)
            except ImportError:  # pragma: no cover - layout helper relocated
                import json

                records = json.loads(pymupdf4llm.to_json(doc, **kwargs))["pages"]
    finally:
        if saved is not None:
            pymupdf._g_out_message = saved
    return records


def _records_by_page(pages: list[int], records: list[Any]) -> dict[int, Any]:
    """The model's records keyed by 0-based page number (pymupdf4llm numbers pages from 1, in page order).

    A batch whose records do not match its pages one to one raises, so the
    caller retries it page by page instead of pairing a page with another's boxes.
    """
    numbers = [_get(r, "page_number") for r in records]
    if len(records) != len(pages):
        raise ValueError(f"layout model returned {len(records)} records for {len(pages)} pages")
    if all(isinstance(n, int) for n in numbers):
        by_page = {n - 1: r for n, r in zip(numbers, records)}
        if set(by_page) != set(pages):
            raise ValueError(f"layout model returned pages {sorted(by_page)} for {sorted(pages)}")
        return {p: by_page[p] for p in pages}
    return dict(zip(sorted(pages), records))


class LayoutParser(Parser):
    """Regions from the layout model; see the module docstring for the mapping."""

    name = "layout"

    def __init__(self, batch_pages: int = 16, image_ocr: str = "layout", plain_pages_without_model: bool = True,
                 **cfg: Any) -> None:
        super().__init__(**cfg)
        if image_ocr not in ("rapidocr", "layout"):
            raise ValueError(f"image_ocr must be 'rapidocr' or 'layout', not {image_ocr!r}")
        self.batch_pages = max(1, int(batch_pages))
        self.image_ocr = image_ocr
        self.plain_pages_without_model = plain_pages_without_model
        self._fast: Any = None

    # --- routing ------------------------------------------------------------------

    def _fast_parser(self) -> Any:
        if self._fast is None:
            from mage_gym.graph.parsers.fast import FastParser

            self._fast = FastParser(ocr=self.ocr_enabled, ocr_dpi=self.ocr_dpi)
        return self._fast

    def parse_pdf_pages(self, doc: "pymupdf.Document", page_numbers: list[int]) -> list[ParsedPage]:
        done: dict[int, ParsedPage] = {}
        model_pages: list[int] = []
        for pno in page_numbers:
            try:
                page = doc.load_page(pno)
                if self.ocr_enabled and needs_ocr(page):
                    done[pno] = self.parse_image_only_pdf_page(page)
                elif is_absurd(page.rect.width, page.rect.height):
                    done[pno] = self.parse_absurd_page(page)
                elif self.plain_pages_without_model and (plain := simple_page(page, self.stats)) is not None:
                    done[pno] = plain
                else:
                    model_pages.append(pno)
                    continue
            except Exception as exc:  # noqa: BLE001 - isolate one bad page
                done[pno] = failed_page(doc, pno, exc)
            self.pages_done(1)
        for i in range(0, len(model_pages), self.batch_pages):
            batch = model_pages[i : i + self.batch_pages]
            try:
                for pno, rec in _records_by_page(batch, _run_layout_model(doc, batch)).items():
                    done[pno] = self.convert(doc.load_page(pno), rec)
            except Exception as exc:  # noqa: BLE001 - retry page by page, then fall back
                log.warning("layout batch %s failed (%s); retrying per page", batch, exc)
                for pno in batch:
                    done[pno] = self._one_page_with_fallback(doc, pno)
            self.pages_done(len(batch))
        return [done[p] for p in page_numbers]

    def _one_page_with_fallback(self, doc: "pymupdf.Document", pno: int) -> ParsedPage:
        try:
            (rec,) = _run_layout_model(doc, [pno])
            return self.convert(doc.load_page(pno), rec)
        except Exception as exc:  # noqa: BLE001
            try:
                page = self._fast_parser().parse_text_page(doc.load_page(pno))
                page.warnings.append(f"layout model failed ({exc.__class__.__name__}: {exc}); used fast parser")
                return page
            except Exception as exc2:  # noqa: BLE001
                return failed_page(doc, pno, exc2)

    def parse_text_page(self, page: "pymupdf.Page") -> ParsedPage:
        return self._one_page_with_fallback(page.parent, page.number)

    def parse_absurd_page(self, page: "pymupdf.Page") -> ParsedPage:
        out = self._fast_parser().parse_text_page(page)
        out.warnings.append(
            f"absurd page size {page.rect.width:.0f}x{page.rect.height:.0f} pt: parsed with the fast parser"
        )
        return out

    def parse_image_only_pdf_page(self, page: "pymupdf.Page") -> ParsedPage:
        from mage_gym.graph.parsers.ocr import page_from_lines, pdf_page_lines

        lines, warns = pdf_page_lines(page, self.ocr_dpi)
        if self.image_ocr == "rapidocr" or not lines:
            return page_from_lines(page.number, page.rect.width, page.rect.height, lines, warns)
        try:
            return self._layout_over_ocr(page.parent, page.number, lines, warns, scale=1.0)
        except Exception as exc:  # noqa: BLE001
            out = page_from_lines(page.number, page.rect.width, page.rect.height, lines, warns)
            out.warnings.append(f"layout over OCR failed ({exc.__class__.__name__}: {exc}); used line grouping")
            return out

    def parse_image_page(self, source: Any, index: int) -> ParsedPage:
        if self.image_ocr == "rapidocr" or not self.ocr_enabled:
            return super().parse_image_page(source, index)
        import pymupdf

        from mage_gym.graph.parsers.ocr import OcrLine, image_lines, page_from_lines

        path = source.page_files[index]
        lines, w_px, h_px, warns = image_lines(path)
        if not lines:
            return page_from_lines(index, w_px, h_px, lines, warns)
        img = pymupdf.open(path)
        try:
            doc = pymupdf.open("pdf", img.convert_to_pdf())
        finally:
            img.close()
        try:
            to_pt = doc.load_page(0).rect.width / w_px  # the wrapped page is in points, boxes come back in pixels
            lines_pt = [OcrLine(tuple(v * to_pt for v in l.bbox), l.text, l.score) for l in lines]  # type: ignore[misc]
            out = self._layout_over_ocr(doc, 0, lines_pt, warns, scale=1.0 / to_pt)
        except Exception as exc:  # noqa: BLE001
            out = page_from_lines(index, w_px, h_px, lines, warns)
            out.warnings.append(f"layout over OCR failed ({exc.__class__.__name__}: {exc}); used line grouping")
        finally:
            doc.close()
        out.index, out.width, out.height, out.image_only = index, float(w_px), float(h_px), True
        return out

    def _layout_over_ocr(self, doc: "pymupdf.Document", pno: int, lines: list[Any], warns: list[str],
                         scale: float) -> ParsedPage:
        """Box a scanned page with the layout model, using *our* OCR lines as its text.

        Why not pymupdf4llm's own OCR path: on the scanned dev decks it dropped
        whole lines and the spaces between words (27% of the characters on one
        slide). We write every OCR line into the page as invisible text, let the
        model box it, then add any line no model box covers as extra blocks.
        """
        from mage_gym.graph.parsers.ocr import OcrLine, group_lines

        page = doc.load_page(pno)
        _write_invisible_lines(page, lines)
        (rec,) = _run_layout_model(doc, [pno])
        out, margins = self._convert(doc.load_page(pno), rec, ocr=True, scale=scale)
        boxes = [tuple(float(_get(b, k)) * scale for k in ("x0", "y0", "x1", "y1")) for b in (_get(rec, "boxes") or ())]
        scaled = [OcrLine(tuple(v * scale for v in l.bbox), l.text, l.score) for l in lines]  # type: ignore[misc]
        missing = [l for l in scaled if not any(_inside_share(l.bbox, b) >= 0.5 for b in boxes)]
        if missing:
            extra, header, footer = group_lines(missing, out.width, out.height)
            out.elements.extend(extra)
            margins.extend([("header", None, t) for t in header] + [("footer", None, t) for t in footer])
        out = _finish(out, margins, ocr=True)
        out.image_only = True
        out.warnings.extend(warns)
        return out

    # --- conversion ---------------------------------------------------------------

    def document_stats(self, doc: "pymupdf.Document", scope: list[int]) -> Any:
        from mage_gym.graph.parsers.fast import document_stats

        return document_stats(doc, scope)

    def _heading_level(self, box: Any, textlines: Any, ocr: bool) -> int:
        """Level of a section header: its font size's rank among the document's heading sizes.

        Why not the model's ``header_level``: pymupdf4llm ranks font sizes
        within one call's pages, so levels changed with the build's page
        chunks. The document statistics (:meth:`document_stats`) do not; in a
        document with no heading sizes above the body text every section
        header is level 1. OCR pages (their text is ours, sized to the line
        boxes; the model sees one page at a time there) keep the model's level.
        """
        sizes = [(float(sp.get("size", 0.0)), len(sp.get("text", "").strip()))
                 for line in textlines or () for sp in (line.get("spans", ()) if isinstance(line, dict) else line[1])]
        n = sum(c for _, c in sizes)
        if ocr or n == 0 or self.stats is None:
            level = int(_get(box, "header_level", 0) or 0)
            return level if level > 0 else 2
        return self.stats.heading_level(sum(sz * c for sz, c in sizes) / n)

    def convert(self, page: "pymupdf.Page", rec: Any, ocr: bool = False, scale: float = 1.0) -> ParsedPage:
        """One pymupdf4llm page record -> :class:`ParsedPage` (boxes x ``scale``).

        On a text-layer page (not ``ocr``), text-layer lines that no model box
        covers are added as elements too (:meth:`_uncovered_text`).
        """
        out, margins = self._convert(page, rec, ocr, scale)
        if not ocr:
            extra = self._uncovered_text(page, _get(rec, "boxes") or (), has_content=bool(out.elements))
            out.elements.extend(extra.elements)
            margins.extend(("header", None, t) for t in ([extra.header_text] if extra.header_text else []))
            margins.extend(("footer", None, t) for t in ([extra.footer_text] if extra.footer_text else []))
        return _finish(out, margins, ocr)

    def _uncovered_text(self, page: "pymupdf.Page", boxes: Any, has_content: bool) -> ParsedPage:
        """Text-layer lines no model box covers, typed by the fast parser's rules.

        Why: the model boxes what it recognises and pymupdf4llm keeps only the
        text inside boxes, so a line it saw no region in was lost (a generated
        report's one line per page, labels beside a picture). A line counts as
        covered when it and a box (margins included) share half of the smaller
        of the two: the model's boxes hug the glyphs, while a text-layer line's
        box spans the font's full height.
        """
        from mage_gym.graph.parsers.fast import Block, DocStats, RawPage, classify, text_blocks

        rects = [(float(_get(b, "x0")), float(_get(b, "y0")), float(_get(b, "x1")), float(_get(b, "y1")))
                 for b in boxes]
        left: list[Block] = []
        for b in text_blocks(page):
            lines = [ln for ln in b.lines if not any(_overlap(ln.bbox, r) >= 0.5 for r in rects)]
            if lines:
                left.append(b if len(lines) == len(b.lines) else Block(lines))
        raw = RawPage(page.number, page.rect.width, page.rect.height, left)
        if not left:
            return ParsedPage(index=page.number, width=raw.width, height=raw.height)
        stats = self.stats if isinstance(self.stats, DocStats) else DocStats.from_raw([raw])
        return classify(raw, stats, has_content=has_content)

    def _convert(self, page: "pymupdf.Page", rec: Any, ocr: bool, scale: float,
                 ) -> tuple[ParsedPage, list[tuple[str, Any, str]]]:
        """The model's regions as elements, and its page-header/footer regions as (kind, box, text)."""
        W, H = page.rect.width * scale, page.rect.height * scale
        margins: list[tuple[str, Any, str]] = []
        elements: list[ParsedElement] = []
        warnings: list[str] = []
        paths: list[Any] | None = None
        found_tables: list[Any] = [None]  # find_tables result, computed once per page if needed
        for box in _get(rec, "boxes", ()) or ():
            cls = _get(box, "boxclass", "text")
            raw_bbox = (float(_get(box, "x0")), float(_get(box, "y0")), float(_get(box, "x1")), float(_get(box, "y1")))
            bbox = clip_box(tuple(v * scale for v in raw_bbox), W, H)
            textlines = _get(box, "textlines")
            if cls in _MARGIN:
                text = _lines_text(textlines)
                if text:
                    margins.append((_MARGIN[cls], bbox, text))
                continue
            if cls in ("title", "section-header"):
                level = 1 if cls == "title" else self._heading_level(box, textlines, ocr)
                text = _lines_text(textlines)
                if text:
                    elements.append(ParsedElement("title", bbox, text, heading_level=level, ocr=ocr))
            elif cls == "list-item":
                text = _lines_text(textlines, "\n")
                if text:
                    elements.append(ParsedElement("list", bbox, text, ocr=ocr))
            elif cls == "table":
                md, text = self._table_markdown(page, box, raw_bbox, found_tables)
                elements.append(ParsedElement("table", bbox, text, table_markdown=md or None, ocr=ocr))
            elif cls == "picture":
                labels = [t for t in _lines_text(textlines, "\n").split("\n") if t]
                if paths is None:
                    try:
                        paths = [tuple(p["rect"]) for p in page.get_cdrawings()]  # plain tuples: cheaper than get_drawings
                    except Exception:  # noqa: BLE001
                        paths = []
                n_paths = sum(1 for r in paths if _inside(r, raw_bbox))
                kind = "chart" if looks_like_chart(labels, n_paths) else "figure"
                elements.append(ParsedElement(kind, bbox, " ".join(labels), ocr=ocr))
            else:
                text = _lines_text(textlines)
                if text or cls == "formula":
                    elements.append(ParsedElement(_SIMPLE.get(cls, "paragraph"), bbox, text, ocr=ocr))
        out = ParsedPage(index=page.number, width=W, height=H, elements=merge_list_items(elements), warnings=warnings)
        return out, margins

    @staticmethod
    def _table_markdown(page: "pymupdf.Page", box: Any, raw_bbox: tuple, holder: list[Any]) -> tuple[str, str]:
        """(markdown, plain text) of a table box: the model's grid, else find_tables on the area."""
        tab = _get(box, "table") or {}
        md = (tab.get("markdown") if isinstance(tab, dict) else None) or ""
        extract = tab.get("extract") if isinstance(tab, dict) else None
        if not md and holder[0] is None:
            try:
                holder[0] = page.find_tables(use_layout=False).tables  # keep `page` alive while used
            except Exception:  # noqa: BLE001
                holder[0] = []
        if not md and holder[0]:
            best = max(holder[0], key=lambda t: _overlap(tuple(t.bbox), raw_bbox), default=None)
            if best is not None and _overlap(tuple(best.bbox), raw_bbox) > 0.5:
                try:
                    md = best.to_markdown(clean=False)
                    extract = extract or best.extract()
                except Exception:  # noqa: BLE001
                    md = ""
        if extract:
            text = " ".join(" ".join(str(c) for c in row if c) for row in extract if row)
        else:
            text = page.get_textbox(raw_bbox).strip() if md == "" else md
        return md, " ".join(text.split())


def _finish(out: ParsedPage, margins: list[tuple[str, Any, str]], ocr: bool) -> ParsedPage:
    """Page-header/footer text goes to the page's margins, unless it is all the page holds.

    A margin entry with a box (a model region) on a page with no element
    stays content as a paragraph (:func:`~mage_gym.graph.parsers.geometry.only_content`):
    the model also calls a page's single line a header or footer, wherever on
    the page it stands.
    """
    boxed = [m for m in margins if m[1] is not None]
    kept = only_content(boxed, lambda m: m[2], bool(out.elements))
    out.elements.extend(ParsedElement("paragraph", box, text, ocr=ocr) for _, box, text in kept)
    rest = [m for m in margins if not any(m is k for k in kept)]
    move_to_margins(out, [t for kind, _, t in rest if kind == "header"], [t for kind, _, t in rest if kind == "footer"])
    return out


def _inside(r: tuple, box: tuple) -> bool:
    return r[0] >= box[0] - 1 and r[1] >= box[1] - 1 and r[2] <= box[2] + 1 and r[3] <= box[3] + 1


def _overlap(a: tuple, b: tuple) -> float:
    """Intersection over the smaller area."""
    iw = min(a[2], b[2]) - max(a[0], b[0])
    ih = min(a[3], b[3]) - max(a[1], b[1])
    if iw <= 0 or ih <= 0:
        return 0.0
    small = min((a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1]))
    return iw * ih / small if small > 0 else 0.0


_OCR_FONT: Any = None


def _write_invisible_lines(page: "pymupdf.Page", lines: list[Any]) -> None:
    """Insert OCR lines as invisible text (render mode 3), each stretched to its box."""
    import pymupdf

    global _OCR_FONT
    if _OCR_FONT is None:
        _OCR_FONT = pymupdf.Font("cjk")  # Droid Sans Fallback: covers symbols and CJK
    for ln in lines:
        x0, y0, x1, y1 = ln.bbox
        w, h = x1 - x0, y1 - y0
        if w <= 0 or h <= 0 or not ln.text.strip():
            continue
        size = 0.8 * h
        length = _OCR_FONT.text_length(ln.text, size)
        if length <= 0:
            continue
        tw = pymupdf.TextWriter(page.rect)
        tw.append(pymupdf.Point(x0, y1 - 0.2 * h), ln.text, font=_OCR_FONT, fontsize=size)
        tw.write_text(page, render_mode=3, morph=(pymupdf.Point(x0, y1), pymupdf.Matrix(w / length, 1)))


def _inside_share(inner: tuple, outer: tuple) -> float:
    iw = min(inner[2], outer[2]) - max(inner[0], outer[0])
    ih = min(inner[3], outer[3]) - max(inner[1], outer[1])
    a = (inner[2] - inner[0]) * (inner[3] - inner[1])
    return iw * ih / a if iw > 0 and ih > 0 and a > 0 else 0.0
