"""Parsers on PDFs crafted here (known structure), bad input, OCR, and a few real pages."""
from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import pymupdf
import pytest
from PIL import Image, ImageDraw

from mage_gym.graph.errors import CorruptDocumentError, EncryptedDocumentError, PageLimitWarning
from mage_gym.graph.parsers import get_parser
from mage_gym.graph.parsers.base import select_pages
from mage_gym.graph.parsers.geometry import join_lines, xy_cut_order
from mage_gym.graph.parsers.ocr import OcrLine, group_lines
from mage_gym.graph.parsers.tables import text_grid_tables
from mage_gym.graph.schema import ParsedDocument, ParsedPage, bbox_iou
from mage_gym.graph.sources import open_source

PARSERS = ["fast", "layout"]
LOREM = (
    "The quarterly results show steady growth across all regions, driven by strong demand for "
    "our core products and careful cost control. Management expects the trend to continue "
    "into the next fiscal year, although currency movements remain a risk to margins."
)
IMAGE_RECT = (72.0, 415.0, 312.0, 575.0)


def _png(w: int = 240, h: int = 160) -> bytes:
    im = Image.new("RGB", (w, h), (230, 240, 255))
    d = ImageDraw.Draw(im)
    d.ellipse((20, 20, 120, 120), fill=(200, 60, 60))
    d.rectangle((140, 40, 220, 140), fill=(60, 160, 60))
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def build_report_pdf(path: Path, n_pages: int = 3) -> Path:
    """A small report: running header/footer, title, headings, paragraphs, a bullet
    list, a ruled 3x4 table, an embedded picture with caption (page 0), and a vector
    bar chart with numeric axis labels (later pages)."""
    doc = pymupdf.open()
    for i in range(n_pages):
        page = doc.new_page(width=612, height=792)
        page.insert_text((72, 40), "ACME Corporation Annual Report 2024", fontsize=8, fontname="helv")
        page.insert_text((290, 765), f"Page {i + 1}", fontsize=8, fontname="helv")
        y = 80.0
        if i == 0:
            page.insert_text((72, y + 22), "Annual Report 2024", fontsize=24, fontname="hebo")
            y += 50
        page.insert_text((72, y + 14), "Introduction" if i == 0 else f"Section {i + 1} Overview", fontsize=15, fontname="hebo")
        y += 28
        page.insert_textbox(pymupdf.Rect(72, y, 540, y + 70), LOREM, fontsize=10, fontname="helv")
        y += 85
        if i == 0:
            for k, item in enumerate(["Revenue grew by twelve percent", "Operating costs fell slightly", "Three new plants opened"]):
                page.insert_text((80, y + 12 + 16 * k), "\u2022", fontsize=10, fontname="helv")
                page.insert_text((94, y + 12 + 16 * k), item, fontsize=10, fontname="helv")
            y += 70
            cols = [72, 222, 372, 522]
            rows = [y + 20 * k for k in range(5)]
            for x in cols:
                page.draw_line((x, rows[0]), (x, rows[-1]))
            for yy in rows:
                page.draw_line((cols[0], yy), (cols[-1], yy))
            cells = [["Region", "2023", "2024"], ["North", "120", "135"], ["South", "98", "110"], ["West", "77", "91"]]
            for ri, row in enumerate(cells):
                for ci, txt in enumerate(row):
                    page.insert_text((cols[ci] + 6, rows[ri] + 14), txt, fontsize=10, fontname="helv")
            page.insert_image(pymupdf.Rect(*IMAGE_RECT), stream=_png())
            page.insert_text((72, IMAGE_RECT[3] + 16), "Figure 1: Plant locations by region", fontsize=9, fontname="helv")
            page.insert_textbox(pymupdf.Rect(72, 620, 540, 690), LOREM, fontsize=10, fontname="helv")
        else:
            x0, yb = 100.0, y + 200
            page.draw_line((x0, y), (x0, yb))
            page.draw_line((x0, yb), (x0 + 300, yb))
            for k, v in enumerate([0, 10, 20, 30]):
                page.insert_text((x0 - 22, yb - 60 * k + 3), str(v), fontsize=8, fontname="helv")
                page.draw_line((x0 - 4, yb - 60 * k), (x0, yb - 60 * k))
            for k, hgt in enumerate([120, 150, 90, 170]):
                page.draw_rect(pymupdf.Rect(x0 + 20 + 70 * k, yb - hgt, x0 + 70 + 70 * k, yb), color=None, fill=(0.2, 0.4, 0.8))
                page.insert_text((x0 + 30 + 70 * k, yb + 14), f"Q{k + 1}", fontsize=8, fontname="helv")
            page.insert_text((72, yb + 34), f"Figure {i + 1}: Sales per quarter", fontsize=9, fontname="helv")
            page.insert_textbox(pymupdf.Rect(72, yb + 55, 540, yb + 125), LOREM, fontsize=10, fontname="helv")
    doc.save(path)
    return path


@pytest.fixture(scope="module")
def report_pdf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_report_pdf(tmp_path_factory.mktemp("pdf") / "report.pdf")


@pytest.fixture(scope="module")
def parsed(report_pdf: Path) -> dict[str, ParsedDocument]:
    src = open_source(report_pdf)
    return {name: get_parser(name).parse(src) for name in PARSERS}


def _types(page) -> list[str]:
    return [e.type for e in page.elements]


@pytest.mark.parametrize("name", PARSERS)
def test_structure_of_crafted_report(parsed: dict[str, ParsedDocument], name: str) -> None:
    doc = parsed[name]
    assert doc.parser == name and [p.index for p in doc.pages] == [0, 1, 2]
    p0 = doc.pages[0]
    titles = {e.text: e.heading_level for e in p0.elements if e.type == "title"}
    assert "Annual Report 2024" in titles and "Introduction" in titles
    assert titles["Annual Report 2024"] < titles["Introduction"]  # bigger font = higher level
    assert any(e.type == "paragraph" and "quarterly results" in e.text for e in p0.elements)
    lists = [e for e in p0.elements if e.type == "list"]
    assert len(lists) == 1, "consecutive bullet items merge into one list"
    assert all(item in lists[0].text for item in ("twelve percent", "fell slightly", "new plants"))
    tables = [e for e in p0.elements if e.type == "table"]
    assert len(tables) == 1 and "North" in tables[0].text and "135" in tables[0].text
    assert tables[0].table_markdown and "North" in tables[0].table_markdown
    pictures = [e for e in p0.elements if e.type in ("figure", "chart")]
    assert any(bbox_iou(e.bbox, IMAGE_RECT) > 0.7 for e in pictures)
    assert any(e.type == "caption" and e.text.startswith("Figure 1") for e in p0.elements)
    charts = [e for e in doc.pages[1].elements if e.type == "chart"]
    assert len(charts) == 1 and "10" in charts[0].text and "Q2" in charts[0].text


@pytest.mark.parametrize("name", PARSERS)
def test_headers_and_footers_are_attributes_not_elements(parsed: dict[str, ParsedDocument], name: str) -> None:
    for page in parsed[name].pages:
        assert "ACME Corporation" in page.header_text
        assert f"Page {page.index + 1}" in page.footer_text
        for e in page.elements:
            assert "ACME Corporation" not in e.text and not e.text.startswith("Page ")


@pytest.mark.parametrize("name", PARSERS)
def test_boxes_inside_page_and_reading_order(parsed: dict[str, ParsedDocument], name: str) -> None:
    for page in parsed[name].pages:
        assert page.elements and not page.image_only
        for e in page.elements:
            x0, y0, x1, y1 = e.bbox
            assert 0 <= x0 <= x1 <= page.width and 0 <= y0 <= y1 <= page.height
            assert not e.ocr
    order = _types(parsed[name].pages[0])
    assert order.index("title") < order.index("paragraph") < order.index("list") < order.index("table")


@pytest.mark.parametrize("name", PARSERS)
def test_page_selection_and_truncation(report_pdf: Path, name: str) -> None:
    parser = get_parser(name)
    src = open_source(report_pdf)
    only = parser.parse(src, pages=[2])
    assert [p.index for p in only.pages] == [2] and only.warnings == []
    with pytest.warns(PageLimitWarning):
        cut = parser.parse(src, max_pages=2)
    assert [p.index for p in cut.pages] == [0, 1] and any("truncated" in w for w in cut.warnings)
    with pytest.raises(IndexError):
        parser.parse(src, pages=[7])


def test_select_pages_rules() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert select_pages(5, None, None) == ([0, 1, 2, 3, 4], [])
        assert select_pages(5, [3, 1, 1], 10) == ([1, 3], [])
        # a worker share beyond the limit is dropped silently only if it starts later
    with pytest.warns(PageLimitWarning):
        assert select_pages(5, [0, 4], 2)[0] == [0]
    with pytest.warns(PageLimitWarning):
        assert select_pages(5, None, 3)[0] == [0, 1, 2]


def test_unknown_parser_name() -> None:
    with pytest.raises(ValueError):
        get_parser("nope")


@pytest.mark.parametrize("name", PARSERS)
def test_bad_input_raises_typed_errors(tmp_path: Path, report_pdf: Path, name: str) -> None:
    doc = pymupdf.open(report_pdf)
    locked = tmp_path / "locked.pdf"
    doc.save(locked, encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="pw", owner_pw="owner")
    with pytest.raises(EncryptedDocumentError):
        get_parser(name).parse(open_source(locked, validate=False))
    data = report_pdf.read_bytes()
    cut = tmp_path / "cut.pdf"
    cut.write_bytes(data[:300])
    with pytest.raises(CorruptDocumentError):
        get_parser(name).parse(open_source(cut, validate=False))


@pytest.mark.parametrize("name", PARSERS)
def test_blank_page_is_empty_not_an_error(tmp_path: Path, name: str) -> None:
    doc = pymupdf.open()
    doc.new_page()
    page = doc.new_page()
    page.insert_text((72, 100), "Results", fontsize=16, fontname="hebo")
    page.insert_textbox(pymupdf.Rect(72, 120, 540, 200), LOREM, fontsize=11)
    p = tmp_path / "blank.pdf"
    doc.save(p)
    out = get_parser(name).parse(open_source(p))
    assert out.pages[0].elements == [] and not out.pages[0].image_only
    assert any("quarterly results" in e.text for e in out.pages[1].elements)


@pytest.mark.parametrize("name", PARSERS)
def test_absurd_page_size_parses(tmp_path: Path, name: str) -> None:
    doc = pymupdf.open()
    page = doc.new_page(width=20000, height=400)
    page.insert_text((100, 100), "A very wide banner page with a little text.", fontsize=12)
    p = tmp_path / "wide.pdf"
    doc.save(p)
    out = get_parser(name).parse(open_source(p))
    page0 = out.pages[0]
    assert page0.width == 20000 and any("banner" in e.text for e in page0.elements)
    if name == "layout":
        assert any("fast parser" in w for w in page0.warnings)


def _scanned_pdf(tmp_path: Path) -> Path:
    """A page whose text exists only as pixels (a scan)."""
    src = pymupdf.open()
    page = src.new_page(width=612, height=792)
    page.insert_text((72, 110), "Quarterly Revenue Report", fontsize=26, fontname="hebo")
    page.insert_textbox(pymupdf.Rect(72, 150, 540, 260), LOREM, fontsize=13, fontname="helv")
    png = page.get_pixmap(dpi=110).tobytes("png")
    out = pymupdf.open()
    scan = out.new_page(width=612, height=792)
    scan.insert_image(scan.rect, stream=png)
    p = tmp_path / "scan.pdf"
    out.save(p)
    return p


@pytest.fixture(scope="module")
def scanned_pdf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _scanned_pdf(tmp_path_factory.mktemp("scan"))


@pytest.mark.parametrize("name", PARSERS)
def test_image_only_pdf_page_goes_through_ocr(scanned_pdf: Path, name: str) -> None:
    out = get_parser(name).parse(open_source(scanned_pdf))
    page = out.pages[0]
    assert page.image_only and page.elements and all(e.ocr for e in page.elements)
    text = " ".join(e.text for e in page.elements)
    assert "Revenue" in text and "quarterly" in text.lower()
    title = [e for e in page.elements if e.type == "title"]
    assert title and "Revenue" in title[0].text
    body = [e for e in page.elements if e.type == "paragraph"]
    assert len(body) == 1, "OCR lines of one paragraph are grouped into one element"
    assert body[0].bbox[1] > title[0].bbox[3] - 1
    # every line of the paragraph is there (RapidOCR may drop some spaces, so count letters)
    letters = sum(c.isalpha() for c in body[0].text)
    assert letters >= 0.9 * sum(c.isalpha() for c in LOREM)


def test_ocr_results_are_cached_by_pixels(tmp_path: Path, monkeypatch) -> None:
    """A second OCR of the same pixels comes from the disk cache with the same lines; a broken
    entry is recomputed; other pixels miss; MAGE_GYM_OCR_CACHE=0 turns the cache off."""
    import numpy as np
    from PIL import Image, ImageDraw

    from mage_gym.graph.parsers import ocr, ocr_cache

    monkeypatch.setenv("MAGE_GYM_CACHE", str(tmp_path))
    img = Image.new("RGB", (420, 90), "white")
    ImageDraw.Draw(img).text((10, 30), "Cached revenue 2021", fill="black", font_size=28)
    rgb = np.asarray(img)
    first_pages, first_cached = ocr.OCR_STATS["pages"], ocr.OCR_STATS["cached"]
    a = ocr.ocr_array(rgb, 2.0)
    b = ocr.ocr_array(rgb, 2.0)
    assert a and a == b and "revenue" in " ".join(ln.text for ln in a).lower()
    assert ocr.OCR_STATS["pages"] == first_pages + 1 and ocr.OCR_STATS["cached"] == first_cached + 1
    assert a[0].bbox[2] <= 210  # page units = array pixels / scale, also for cached lines
    key = ocr_cache.image_key(rgb, ocr.engine_id())
    (ocr_cache.cache_dir() / key[:2] / f"{key}.json").write_text("{not json")
    assert ocr.ocr_array(rgb, 2.0) == a and ocr.OCR_STATS["pages"] == first_pages + 2
    assert ocr_cache.image_key(rgb[:, :-1].copy(), ocr.engine_id()) != key
    monkeypatch.setenv("MAGE_GYM_OCR_CACHE", "0")
    ocr.ocr_array(rgb, 2.0)
    assert ocr.OCR_STATS["pages"] == first_pages + 3


def test_ocr_can_be_disabled(scanned_pdf: Path) -> None:
    out = get_parser("fast", ocr=False).parse(open_source(scanned_pdf))
    assert not out.pages[0].image_only and all(e.type in ("figure", "chart") for e in out.pages[0].elements)


# --- pure helpers (no PDFs) --------------------------------------------------------


def test_group_lines_builds_blocks_titles_and_margins() -> None:
    lines = [
        OcrLine((50, 5, 200, 15), "Company confidential", 0.9),  # top band -> header
        OcrLine((50, 40, 400, 70), "Big Slide Title", 0.99),  # tall -> title
        OcrLine((50, 100, 500, 112), "First paragraph line one continues", 0.9),
        OcrLine((50, 114, 480, 126), "and the second line of it", 0.9),
        OcrLine((50, 160, 500, 172), "A second paragraph after a gap", 0.9),
        OcrLine((60, 200, 300, 212), "\u2022 bullet one", 0.9),
        OcrLine((60, 214, 300, 226), "\u2022 bullet two", 0.9),
        OcrLine((280, 385, 320, 395), "12", 0.9),  # page number in bottom band
    ]
    els, header, footer = group_lines(lines, 600, 400)
    assert header == ["Company confidential"] and footer == ["12"]
    assert [e.type for e in els] == ["title", "paragraph", "paragraph", "list"]
    assert els[1].text == "First paragraph line one continues and the second line of it"
    assert els[3].text.count("bullet") == 2 and all(e.ocr for e in els)


def test_group_lines_joins_word_fragments_of_a_row() -> None:
    lines = [OcrLine((10, 100, 60, 120), "fuel", 0.9), OcrLine((80, 100, 130, 120), "into", 0.9),
             OcrLine((150, 100, 220, 120), "engine", 0.9)]
    els, _, _ = group_lines(lines, 600, 400)
    assert len(els) == 1 and els[0].text == "fuel into engine"


def test_text_grid_tables_finds_unruled_table_not_prose() -> None:
    rows = [["Item", "2023", "2024"], ["Sales", "1,200", "1,350"], ["Costs", "800", "820"], ["Profit", "400", "530"]]
    lines = [((60 + 150 * c, 100 + 20 * r, 100 + 150 * c, 112 + 20 * r), t) for r, row in enumerate(rows) for c, t in enumerate(row)]
    prose = [((60, 300 + 14 * k, 540, 312 + 14 * k), "this is a long running line of ordinary prose text here") for k in range(4)]
    tables = text_grid_tables(lines + prose, 600)
    assert len(tables) == 1 and len(tables[0].members) == 12
    assert "| Sales | 1,200 | 1,350 |" in tables[0].markdown


def test_xy_cut_reads_columns_before_rows() -> None:
    boxes = {"title": (50, 20, 550, 40), "L1": (50, 60, 290, 100), "L2": (50, 110, 290, 150),
             "R1": (310, 60, 550, 120), "R2": (310, 130, 550, 150), "foot": (50, 170, 550, 190)}
    assert xy_cut_order(list(boxes), lambda k: boxes[k]) == ["title", "L1", "L2", "R1", "R2", "foot"]


def test_join_lines_glues_lone_bullets() -> None:
    assert join_lines(["\u2022", "first", "\u2022", "second"], "\n") == "\u2022 first\n\u2022 second"


# --- real documents ------------------------------------------------------------------


@pytest.mark.real_data
@pytest.mark.parametrize("name", PARSERS)
def test_real_report_pages(data_root: Path, name: str) -> None:
    src = open_source(data_root / "mmlongbench-dev" / "documents" / "PH_2016.06.08_Economy-Final.pdf")
    doc = get_parser(name).parse(src, pages=[4, 18])
    chart_page, table_page = doc.pages
    assert "chart" in _types(chart_page) and "table" in _types(table_page)
    assert "title" in _types(table_page) and "paragraph" in _types(table_page)
    for page in doc.pages:
        assert "www.pewresearch.org" in page.footer_text
        assert all(e.text.strip() != "www.pewresearch.org" for e in page.elements)
        for e in page.elements:
            assert 0 <= e.bbox[0] <= e.bbox[2] <= page.width and 0 <= e.bbox[1] <= e.bbox[3] <= page.height


@pytest.mark.real_data
@pytest.mark.parametrize("name", PARSERS)
def test_real_filing_tables(data_root: Path, name: str) -> None:
    src = open_source(data_root / "financebench-dev" / "pdfs" / "PEPSICO_2023_8K_dated-2023-05-05.pdf")
    page = get_parser(name).parse(src, pages=[2]).pages[0]
    tables = [e for e in page.elements if e.type == "table"]
    assert len(tables) >= 2 and any("1,125,448,378" in t.text for t in tables)
    assert any(e.type == "paragraph" and "Annual Meeting" in e.text for e in page.elements)


@pytest.mark.real_data
@pytest.mark.parametrize("name, folder, page_no", [("fast", "4151", 62), ("layout", "4127", 2)])
def test_real_longdocurl_png_is_ocred(data_root: Path, name: str, folder: str, page_no: int) -> None:
    """A Letter page saved as a 72-dpi PNG: OCR'd, grouped into blocks, boxes in pixels."""
    src = open_source(data_root / "longdocurl-sample" / "pdf_pngs" / "4000-4999" / folder)
    page = get_parser(name).parse(src, pages=[page_no]).pages[0]
    w, h = Image.open(src.page_files[page_no]).size
    assert page.image_only and (page.width, page.height) == (w, h)
    assert len(page.elements) >= 2 and all(e.ocr for e in page.elements)
    words = sum(len(e.text.split()) for e in page.elements)
    assert words > 40 and len(page.elements) < words / 3, "lines are grouped into blocks"
    for e in page.elements:
        assert 0 <= e.bbox[0] <= e.bbox[2] <= w and 0 <= e.bbox[1] <= e.bbox[3] <= h
        assert not page.footer_text or e.text.strip() != page.footer_text.strip()
    if page_no == 62:  # "5 Declaration", two text columns, "Table 5.1", page number 47 at the bottom
        assert "title" in _types(page) and "table" in _types(page) and "47" in page.footer_text


def test_merge_list_items_merges_short_runs_only() -> None:
    from mage_gym.graph.parsers.geometry import merge_list_items
    from mage_gym.graph.schema import ParsedElement

    short = [ParsedElement("list", (50, 100 + 14 * k, 300, 111 + 14 * k), f"\u2022 item {k}") for k in range(3)]
    long = [ParsedElement("list", (50, 200 + 40 * k, 500, 236 + 40 * k), "ref line one\nref line two\nref line three")
            for k in range(3)]
    para = ParsedElement("paragraph", (50, 340, 500, 380), "A paragraph.")
    out = merge_list_items(short + [para] + long)
    assert [e.type for e in out] == ["list", "paragraph", "list", "list", "list"]
    assert out[0].text == "\u2022 item 0\n\u2022 item 1\n\u2022 item 2" and out[0].bbox == (50, 100, 300, 139)


@pytest.mark.real_data
@pytest.mark.parametrize("name, pages, chunk", [("fast", range(0, 49), [2, 3]), ("layout", range(0, 16), [13, 14, 15])])
def test_real_page_chunks_parse_like_the_whole_document(data_root: Path, name: str, pages: range,
                                                        chunk: list[int]) -> None:
    """A parallel build parses page chunks; a page must not depend on which chunk it came in.

    Font statistics (body size, heading sizes) are the document's, not the
    chunk's: on this paper, chunk-local statistics gave other heading levels.
    """
    src = open_source(data_root / "mmlongbench-dev" / "documents" / "2312.09390v1.pdf")
    parser = get_parser(name)
    whole = parser.parse(src, pages=list(pages))
    part = parser.parse(src, pages=chunk)

    def view(page: ParsedPage) -> list[tuple]:
        return [(e.type, e.heading_level, e.text, tuple(round(v, 2) for v in e.bbox)) for e in page.elements]

    for k, pno in enumerate(chunk):
        assert view(part.pages[k]) == view(whole.pages[list(pages).index(pno)]), f"page {pno}"
    assert any(e.type == "title" for pno in chunk for e in whole.pages[list(pages).index(pno)].elements)


def _line(x0: float, y0: float, x1: float, text: str, size: float = 10.0, bold: bool = False) -> "Line":
    from mage_gym.graph.parsers.fast import Line

    return Line((x0, y0, x1, y0 + size), text, size, bold, len(text))


def test_join_blocks_rejoins_hanging_indents_and_section_numbers() -> None:
    from mage_gym.graph.parsers.fast import Block, _join_blocks

    full = "x" * 80
    blocks = [
        Block([_line(108, 100, 114, "2", size=12)]),  # section number set apart from its heading
        Block([_line(127, 100, 211, "RELATED WORK", size=10.2)]),
        Block([_line(108, 130, 504, "Clark, Lee, and Krist" + full)]),  # reference entry, first line alone
        Block([_line(118, 141, 504, "Toutanova. BoolQ" + full), _line(118, 152, 300, "In NAACL, 2019.")]),
        Block([_line(108, 163, 504, "A finished sentence" + full + ".")]),  # sentence end: a new block follows
        Block([_line(108, 174, 504, "Next paragraph" + full)]),
        Block([_line(130, 185, 300, "EVIDENCE Q: QUESTION"), _line(130, 196, 280, "The answer")]),  # indented
    ]
    out = _join_blocks(blocks)
    texts = [b.text for b in out]
    assert texts[0] == "2 RELATED WORK" and out[0].lines[0].size == 12
    assert texts[1].startswith("Clark") and texts[1].endswith("In NAACL, 2019.") and len(out[1].lines) == 3
    assert texts[2].startswith("A finished") and texts[3].startswith("Next paragraph")
    assert texts[4].startswith("EVIDENCE") and len(out) == 5


def test_join_blocks_keeps_table_cells_and_lists_apart() -> None:
    from mage_gym.graph.parsers.fast import Block, _join_blocks

    cells = [Block([_line(100, 100 + 11 * i, 160, f"{i},234")]) for i in range(4)]  # narrow: never "full" lines
    assert len(_join_blocks(cells)) == 4
    items = [Block([_line(108, 100, 504, "\u2022 first item " + "y" * 80)]),
             Block([_line(108, 111, 504, "\u2022 second item " + "y" * 80)])]
    assert len(_join_blocks(items)) == 2


def test_document_stats_are_computed_once_per_document_version(tmp_path: Path, monkeypatch) -> None:
    """Chunks of one document share its statistics; a changed file gets new ones."""
    import shutil

    from mage_gym.graph.parsers import fast

    path = tmp_path / "report.pdf"
    build_report_pdf(path)
    calls: list[list[int]] = []
    real = fast.document_stats
    monkeypatch.setattr(fast, "document_stats", lambda doc, scope, **kw: calls.append(scope) or real(doc, scope, **kw))
    parser = get_parser("fast")
    n = pymupdf.open(path).page_count
    first = parser.parse(open_source(path), pages=[0])
    parser.parse(open_source(path), pages=[n - 1])
    assert calls == [list(range(n))] and parser.stats is None  # stats belong to a parse call only
    parser.parse(open_source(path), pages=[0], max_pages=1)  # another scope: other statistics
    assert len(calls) == 2 and calls[-1] == [0]
    other = tmp_path / "other.pdf"
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "A different document", fontsize=30)
    doc.save(other)
    shutil.copy(other, path)  # same path, new bytes
    again = parser.parse(open_source(path), pages=[0])
    assert len(calls) == 3 and again.pages[0].elements != first.pages[0].elements


def test_cluster_rects_matches_pymupdf_cluster_drawings() -> None:
    """Our numpy clustering returns exactly what PyMuPDF's Page.cluster_drawings returns."""
    import random

    from mage_gym.graph.parsers.geometry import cluster_rects

    rng = random.Random(3)
    doc = pymupdf.open()
    page = doc.new_page(width=612, height=792)
    for _ in range(80):  # bars, axis lines and strays; some touch, some do not, some leave the page
        x, y = rng.uniform(-20, 600), rng.uniform(-20, 780)
        w, h = rng.choice([(rng.uniform(1, 15), rng.uniform(1, 15)), (rng.uniform(10, 60), 0.5), (0.5, rng.uniform(10, 60))])
        page.draw_rect(pymupdf.Rect(x, y, x + w, y + h), color=(0, 0, 0), width=0.5)
    paths = page.get_drawings()
    want = [tuple(r) for r in page.cluster_drawings(drawings=paths)]
    got = cluster_rects([tuple(p["rect"]) for p in paths], page.rect.width, page.rect.height)
    assert len(want) > 5 and len(got) == len(want)
    for a, b in zip(got, want):
        assert a == pytest.approx(b, abs=1e-4)


def test_native_paths_equal_get_drawings() -> None:
    """The fast parser reads plain get_cdrawings tuples and converts only find_tables' paths: same as get_drawings."""
    from mage_gym.graph.parsers.fast import _is_straight, _native_paths, _rects_within

    doc = pymupdf.open()
    page = doc.new_page(width=612, height=792)
    page.draw_line((50, 100), (300, 100), color=(0, 0, 0))
    page.draw_line((50, 100), (120, 180), color=(0, 0, 0))
    page.draw_rect(pymupdf.Rect(60, 200, 200, 260), color=(0, 0, 0), fill=(0.5, 0.5, 0.5))
    page.draw_bezier((300, 300), (350, 250), (400, 350), (450, 300), color=(0, 0, 0))
    page.draw_quad(pymupdf.Rect(400, 500, 500, 560).quad, color=(0, 0, 0))
    shape = page.new_shape()
    shape.draw_polyline([(50, 600), (150, 600), (150, 700)])
    shape.finish(color=(0, 0, 0), closePath=True)
    shape.commit()
    plain, native = page.get_cdrawings(), page.get_drawings()
    assert _native_paths(plain) == native
    assert [_is_straight(p) for p in plain] == [_is_straight(p) for p in native]
    rects = np.asarray([p["rect"] for p in plain], np.float64)
    inside = _rects_within(rects, (40.0, 90.0, 310.0, 270.0))
    assert inside.tolist() == [pymupdf.Rect(p["rect"]) in pymupdf.Rect(39, 89, 311, 271) for p in native]
    assert inside[:3].all() and not inside[3:].any()
