"""render_page / render_region for PDF and image-folder sources, with size caps."""
from __future__ import annotations

from pathlib import Path

import pymupdf
import pytest
from PIL import Image

from mage_gym.graph import images
from mage_gym.graph.errors import UnsupportedSourceError
from mage_gym.graph.images import render_page, render_region
from mage_gym.graph.sources import open_source


@pytest.fixture()
def pdf_source(tmp_path: Path):
    doc = pymupdf.open()
    page = doc.new_page(width=600, height=800)
    # a red square in the top-left quarter, blue in the bottom-right
    page.draw_rect(pymupdf.Rect(0, 0, 300, 400), color=None, fill=(1, 0, 0))
    page.draw_rect(pymupdf.Rect(300, 400, 600, 800), color=None, fill=(0, 0, 1))
    doc.new_page(width=20000, height=200)  # absurdly wide page (beyond PDF's 14,400 limit)
    p = tmp_path / "doc.pdf"
    doc.save(p)
    yield open_source(p)
    images.clear_cache()


@pytest.fixture()
def image_source(tmp_path: Path):
    folder = tmp_path / "pages"
    folder.mkdir()
    im = Image.new("RGB", (300, 400), (255, 255, 255))
    im.paste((0, 255, 0), (150, 200, 300, 400))  # green bottom-right quarter
    im.save(folder / "d_0.png")
    Image.new("RGB", (100, 50), (0, 0, 0)).save(folder / "d_1.png")
    return open_source(folder)


def test_render_pdf_page_scales_with_dpi(pdf_source) -> None:
    assert render_page(pdf_source, 0, dpi=72).size == (600, 800)
    assert render_page(pdf_source, 0, dpi=144).size == (1200, 1600)
    small = render_page(pdf_source, 0, dpi=144, max_side=400)
    assert max(small.size) == 400 and small.mode == "RGB"


def test_render_region_pdf_crops_the_right_place(pdf_source) -> None:
    crop = render_region(pdf_source, 0, (0.5, 0.5, 1.0, 1.0), dpi=72, pad=0.0)
    assert crop.size == (300, 400)
    r, g, b = crop.getpixel((150, 200))
    assert b > 200 and r < 50  # blue quarter
    padded = render_region(pdf_source, 0, (0.5, 0.5, 1.0, 1.0), dpi=72, pad=0.05)
    assert padded.size[0] > crop.size[0]
    tiny = render_region(pdf_source, 0, (0.3, 0.3, 0.3, 0.3), dpi=72, pad=0.0)
    assert tiny.size[0] >= 1 and tiny.size[1] >= 1


def test_absurd_page_is_capped(pdf_source) -> None:
    im = render_page(pdf_source, 1, dpi=288)
    assert im.size[0] * im.size[1] <= images.MAX_RENDER_PIXELS
    assert im.size[0] > im.size[1]


def test_image_source_pages_and_regions(image_source) -> None:
    assert render_page(image_source, 0, dpi=72).size == (300, 400)  # 1 px == 1 pt
    assert render_page(image_source, 0, dpi=144).size == (600, 800)
    assert render_page(image_source, 0, dpi=72, max_side=100).size == (75, 100)
    crop = render_region(image_source, 0, (0.5, 0.5, 1.0, 1.0), dpi=72, pad=0.0)
    assert crop.size == (150, 200) and crop.getpixel((75, 100)) == (0, 255, 0)
    assert render_page(image_source, 1).size == (100, 50)


def test_out_of_range_page(pdf_source, image_source) -> None:
    with pytest.raises(IndexError):
        render_page(pdf_source, 5)
    with pytest.raises(IndexError):
        render_page(image_source, 2)


def test_giant_source_image_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "big"
    folder.mkdir()
    Image.new("L", (400, 300)).save(folder / "b_0.png")
    monkeypatch.setattr(images, "MAX_SOURCE_PIXELS", 100_000)  # stand-in for a 20k x 20k scan
    with pytest.raises(UnsupportedSourceError):
        render_page(open_source(folder), 0)


@pytest.mark.real_data
def test_real_longdocurl_png(data_root: Path) -> None:
    src = open_source(data_root / "longdocurl-sample" / "pdf_pngs" / "4000-4999" / "4151")
    page = render_page(src, 3, dpi=72)
    crop = render_region(src, 3, (0.1, 0.1, 0.5, 0.3), dpi=144)
    assert page.size == Image.open(src.page_files[3]).size
    assert abs(crop.size[0] - round(0.42 * page.size[0] * 2)) <= 4
