"""The layout parser's routing: simple pages skip the model, the rest go to it in batches.

Why these tests: the simple-page rule (:mod:`mage_gym.graph.parsers.simple`)
decides which pages the layout model never sees, so each of its clauses is
pinned on a page built to pass or fail it; and a page with a picture, a
drawing or a table must still reach the model, batched or not, with the same
result either way.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import pymupdf  # noqa: E402

from mage_gym.graph.parsers import get_parser  # noqa: E402
from mage_gym.graph.parsers import layout as layout_mod  # noqa: E402
from mage_gym.graph.parsers.fast import DocStats  # noqa: E402
from mage_gym.graph.parsers.simple import simple_page  # noqa: E402
from mage_gym.graph.sources import open_source  # noqa: E402

BODY = DocStats(body_size=11.0, heading_sizes=[], repeated=set())
SENTENCE = "The balance of the account stood at four hundred dollars at the end of the year."


def _page(draw) -> "pymupdf.Document":
    doc = pymupdf.open()
    draw(doc.new_page())  # A4: 595 x 842 pt
    return doc


def _simple(draw, stats: DocStats = BODY):
    doc = _page(draw)
    try:
        return simple_page(doc.load_page(0), stats)
    finally:
        doc.close()


def _lines(page, ys, size: float = 11) -> None:
    for y in ys:
        page.insert_text((72, y), SENTENCE, fontsize=size)


def _image(page) -> None:
    pix = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 40, 30), False)
    pix.clear_with(120)
    page.insert_image(pymupdf.Rect(72, 300, 372, 525), pixmap=pix)


# --- the rule -------------------------------------------------------------------------


def test_blank_page_is_simple_and_empty():
    out = _simple(lambda p: None)
    assert out is not None and out.elements == [] and not out.header_text and not out.footer_text


def test_one_line_is_simple_wherever_it_stands():
    """Mid-page and inside either margin band: a lone worded line of body text is content, not furniture."""
    for y in (40, 400, 830):
        out = _simple(lambda p, y=y: _lines(p, [y]))
        assert out is not None, y
        assert [(e.type, e.text) for e in out.elements] == [("paragraph", SENTENCE)], y


def test_two_blocks_send_the_page_to_the_model():
    """Lines set apart by a gap, or a heading over a line, are regions to group: the model's call."""
    assert _simple(lambda p: _lines(p, [150, 210])) is None
    assert _simple(lambda p: (p.insert_text((72, 130), "Results", fontsize=18), _lines(p, [160]))) is None


def test_one_block_of_many_lines_is_simple():
    """One run of text in one font (a page-long paragraph): nothing for the model to separate."""
    out = _simple(lambda p: _lines(p, [150 + 13 * i for i in range(12)]))
    assert out is not None and len(out.elements) == 1 and out.elements[0].type == "paragraph"


def test_a_drawing_or_an_image_sends_the_page_to_the_model():
    assert _simple(lambda p: (_lines(p, [400]), p.draw_rect(pymupdf.Rect(72, 420, 300, 500)))) is None
    assert _simple(lambda p: (_lines(p, [200]), _image(p))) is None


def test_cells_set_apart_on_a_line_send_the_page_to_the_model():
    """Spans far apart on one line are table cells or columns: the model's call."""
    def row(p):
        for x, word in ((72, "Revenue"), (300, "1,204"), (450, "1,377")):
            p.insert_text((x, 400), word, fontsize=11)
    assert _simple(row) is None


def test_furniture_sends_the_page_to_the_model():
    """A running header above a body line, or fine print alone at the foot of a page: margins are the model's call."""
    assert _simple(lambda p: (p.insert_text((72, 30), "Annual Report 2023", fontsize=11), _lines(p, [400]))) is None
    assert _simple(lambda p: p.insert_text((72, 830), "Printed by the county press office", fontsize=6)) is None


# --- the model's pages: routing and batching ---------------------------------------------


def _model_pages_pdf(path: Path) -> Path:
    """Pages the model must see (a ruled table, a picture with a caption, a heading over a bar chart),
    with a simple one-line page between them."""
    doc = pymupdf.open()
    page = doc.new_page()
    page.insert_text((72, 80), "Quarterly results", fontsize=18)
    for r in range(4):
        for c in range(3):
            rect = pymupdf.Rect(72 + 150 * c, 120 + 24 * r, 222 + 150 * c, 144 + 24 * r)
            page.draw_rect(rect, color=(0, 0, 0), width=0.7)
            page.insert_text((rect.x0 + 4, rect.y1 - 7), "Item" if c == 0 else f"{(r + 1) * (c + 2) * 113:,}",
                             fontsize=10)
    _lines(page, [260, 274, 288])
    doc.new_page().insert_text((72, 400), SENTENCE, fontsize=11)  # simple
    page = doc.new_page()
    _image(page)
    page.insert_text((72, 545), "Figure 2: The plant at night.", fontsize=10)
    _lines(page, [600, 614])
    page = doc.new_page()
    page.insert_text((72, 80), "Sales by region", fontsize=16)
    for i, h in enumerate((120, 80, 160, 60)):
        page.draw_rect(pymupdf.Rect(100 + 60 * i, 400 - h, 140 + 60 * i, 400), color=(0, 0, 0), fill=(0.3, 0.4, 0.8))
        page.insert_text((105 + 60 * i, 415), f"{h}", fontsize=9)
    page.draw_line((90, 400), (350, 400))
    _lines(page, [460, 474])
    doc.save(path)
    doc.close()
    return path


@pytest.fixture(scope="module")
def routed(tmp_path_factory):
    """The test PDF parsed with 3-page batches (pages sent to the model recorded) and with 1-page batches."""
    pdf = _model_pages_pdf(tmp_path_factory.mktemp("routing") / "mixed.pdf")
    calls: list[list[int]] = []
    real = layout_mod._run_layout_model

    def recording(doc, pages):
        calls.append(list(pages))
        return real(doc, pages)

    layout_mod._run_layout_model = recording
    try:
        batched = get_parser("layout", batch_pages=3, ocr=False).parse(open_source(pdf))
        batch_calls = list(calls)
        one_by_one = get_parser("layout", batch_pages=1, ocr=False).parse(open_source(pdf))
    finally:
        layout_mod._run_layout_model = real
    return {"pdf": pdf, "batched": batched, "calls": batch_calls, "one_by_one": one_by_one}


def test_pages_with_tables_pictures_and_drawings_go_to_the_model(routed):
    assert routed["calls"] == [[0, 2, 3]]  # one batch; the simple page 1 never reaches the model
    assert [e.text for e in routed["batched"].pages[1].elements] == [SENTENCE]
    pages = routed["batched"].pages
    assert any(e.type == "table" for e in pages[0].elements)
    assert any(e.type in ("figure", "chart") for e in pages[2].elements)


def test_batched_model_pages_equal_one_by_one(routed):
    assert routed["batched"].pages == routed["one_by_one"].pages


def test_model_pages_unchanged_by_the_simple_page_route(routed):
    """Where the model runs, its output is the same with the simple-page route on or off."""
    everything = get_parser("layout", plain_pages_without_model=False, ocr=False).parse(
        open_source(routed["pdf"]), pages=[0, 2, 3])
    assert everything.pages == [routed["batched"].pages[i] for i in (0, 2, 3)]


def test_a_batch_whose_records_do_not_match_its_pages_is_refused():
    recs = [{"page_number": 1}, {"page_number": 3}]
    assert layout_mod._records_by_page([0, 2], recs) == {0: recs[0], 2: recs[1]}
    with pytest.raises(ValueError):
        layout_mod._records_by_page([0, 1], recs)
    with pytest.raises(ValueError):
        layout_mod._records_by_page([0], recs)
