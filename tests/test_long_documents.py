"""Long documents whose pages hold one line each: every line stays an element, with either parser.

The generated PDF is the case a corpus of long reports hits: one line a page
that repeats on every page but for its numbers, so the running-header rule
took each line for page furniture, and the layout model called it a page
header or footer wherever it stood.
"""
from __future__ import annotations

import pytest

from mage_gym.graph import build_graph
from mage_gym.graph.parsers import get_parser
from mage_gym.graph.parsers.geometry import only_content
from mage_gym.graph.sources import open_source
from mage_gym.testing import HashingEncoder

N_PAGES = 60


def _line(i: int) -> str:
    return f"Record {i + 1}: the balance of account {i + 1} is {(i * 37) % 1000} dollars."


def _make(path, n: int, moving: bool = True):
    import pymupdf

    doc = pymupdf.open()
    for i in range(n):
        y = 60 + (i * 97) % 700 if moving else 60  # moving lines visit both margin bands too
        doc.new_page().insert_text((72, y), _line(i), fontsize=11)
    doc.save(path)
    return path


@pytest.fixture(scope="module")
def long_pdfs(tmp_path_factory):
    """Lines at a height that moves page to page, or all at the top (where running headers stand)."""
    d = tmp_path_factory.mktemp("long")
    return {"moving": _make(d / "moving.pdf", N_PAGES), "fixed": _make(d / "fixed.pdf", N_PAGES, moving=False)}


# the layout parser on 60 fixed lines would run its model 60 times: its model path is tested on 6 pages below
@pytest.mark.parametrize("parser,kind", [("fast", "moving"), ("fast", "fixed"), ("layout", "moving")])
def test_each_page_keeps_its_one_line(long_pdfs, parser, kind):
    calls: list[int] = []
    doc = get_parser(parser).parse(open_source(long_pdfs[kind]), progress=calls.append)
    assert sum(calls) == N_PAGES  # what the build's progress bar counts
    texts = [[e.text for e in p.elements] for p in doc.pages]
    assert texts == [[_line(i)] for i in range(N_PAGES)]
    assert not any(p.header_text or p.footer_text for p in doc.pages)


@pytest.mark.parametrize("moving", [True, False])
def test_layout_model_path_keeps_the_line(tmp_path, moving):
    """With the model run on every page (no plain-page shortcut): its header/footer call is overruled."""
    pdf = _make(tmp_path / "few.pdf", 6, moving=moving)
    doc = get_parser("layout", plain_pages_without_model=False).parse(open_source(pdf))
    assert [[e.text for e in p.elements] for p in doc.pages] == [[_line(i)] for i in range(6)]


def test_layout_keeps_text_no_model_box_covers(tmp_path):
    """A text line outside every region the model returned becomes an element of its own."""
    import pymupdf

    pdf = _make(tmp_path / "one.pdf", 1)
    parser = get_parser("layout")
    doc = pymupdf.open(pdf)
    try:
        page = parser.convert(doc.load_page(0), {"boxes": []})
    finally:
        doc.close()
    assert [(e.type, e.text) for e in page.elements] == [("paragraph", _line(0))]


def test_graph_of_a_long_document(long_pdfs, tmp_path):
    g = build_graph(long_pdfs["fixed"], "fast", cache_dir=tmp_path, encoder=HashingEncoder())
    assert g.n_pages == N_PAGES and g.n_elements == N_PAGES
    assert all(len(g.elements_of_page(i)) == 1 for i in range(N_PAGES))


def test_only_content_spares_page_numbers_and_pages_with_content():
    margins = ["Annual report 2023", "12", "  ", "- 2 -", "41086.01500", "Page 3 of 10", "\u5e74\u5ea6\u62a5\u544a"]
    assert only_content(margins, str, page_has_content=False) == ["Annual report 2023", "\u5e74\u5ea6\u62a5\u544a"]
    assert only_content(margins, str, page_has_content=True) == []


def test_a_stamp_over_a_scanned_page_stays_furniture(tmp_path):
    """A page-sized picture is the page's content: a stamped case line over it stays a header."""
    import pymupdf

    stamp = "Case 2:18-cv-01234 Document 1 filed 09/13/18 Page {} of 3"
    pix = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 60, 80), False)
    pix.clear_with(200)
    doc = pymupdf.open()
    for i in range(3):
        page = doc.new_page()
        page.insert_image(page.rect, pixmap=pix)
        page.insert_text((72, 30), stamp.format(i + 1), fontsize=9)
    doc.save(tmp_path / "scan.pdf")
    parsed = get_parser("fast", ocr=False).parse(open_source(tmp_path / "scan.pdf"))
    assert all(stamp.format(i + 1) in p.header_text for i, p in enumerate(parsed.pages))
    assert not any(e.type != "figure" and "Case" in e.text for p in parsed.pages for e in p.elements)


def test_fine_print_on_a_blank_page_stays_furniture(tmp_path):
    """A print shop's slug, smaller than the body text, is no page content even where it is all there is."""
    import pymupdf

    slug = "VerDate 2004 Jkt 000000 PO 00000 Frm 0000{} Fmt 5904"
    doc = pymupdf.open()
    for i in range(3):
        page = doc.new_page()
        if i < 2:  # two pages of body text set the body size
            for k in range(12):
                page.insert_text((72, 100 + 20 * k), f"Body sentence {k} on page {i} reads like prose here.", fontsize=10)
        page.insert_text((72, 770), slug.format(i), fontsize=6)
    doc.save(tmp_path / "slug.pdf")
    blank = get_parser("fast", ocr=False).parse(open_source(tmp_path / "slug.pdf")).pages[2]
    assert blank.elements == [] and slug.format(2) in blank.footer_text
