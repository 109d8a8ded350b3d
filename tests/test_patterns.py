"""The shared text patterns: one meaning each, and the named differences between their variants."""
from __future__ import annotations

import pytest

from mage_gym.graph import patterns as P


@pytest.mark.parametrize("line", ["\u2022 Revenue grew", "\uf0b7 Symbol-font bullet", "- dash item", "1. First",
                                  "(iv) roman", "a) letter", "12)", "\u00bb arrow read by OCR"])
def test_list_item_starts(line):
    assert P.LIST_ITEM_RE.match(line)


@pytest.mark.parametrize("line", ["1.5 million units", "-5% decline", "Revenue grew", "*note", "2023 results"])
def test_list_item_rejects_numbers_and_prose(line):
    assert not P.LIST_ITEM_RE.match(line)


def test_bullet_only_excludes_the_em_dash_nil_cell():
    assert P.is_bullet_only(" \u2022 ") and P.is_bullet_only("-") and P.is_bullet_only("\u2013")
    assert not P.is_bullet_only("\u2014")  # a table's "nil" value, not a bullet
    assert not P.is_bullet_only("\u2022 text")


def test_caption_needs_a_number_caption_like_does_not():
    for text in ("Figure 3: Sales by year", "Table IV. Results", "Exhibit 2a"):
        assert P.CAPTION_RE.match(text) and P.CAPTION_LIKE_RE.match(text)
    for text in ("Figure: revenue", "Photo 1", "Chart A shows"):
        assert not P.CAPTION_RE.match(text) and P.CAPTION_LIKE_RE.match(text)
    for text in ("Tablets are popular among seniors.", "Revenue by region"):
        assert not P.CAPTION_RE.match(text) and not P.CAPTION_LIKE_RE.match(text)


def test_ocr_variants_differ_as_documented():
    # OCR: a lone marker is a speck, not an item; text layer: an item
    assert P.LIST_ITEM_RE.match("*") and not P.OCR_LIST_ITEM_RE.match("*")
    assert P.OCR_LIST_ITEM_RE.match("- item") and P.OCR_LIST_ITEM_RE.match("\u00bb item")
    # OCR: source attributions and number-less labels are captions; text layer: not
    assert P.OCR_CAPTION_RE.match("Source: company data") and not P.CAPTION_RE.match("Source: company data")
    assert P.OCR_CAPTION_RE.match("Figure: revenue") and not P.CAPTION_RE.match("Figure: revenue")
