"""The gold-box matching rule and the MMDocIR gold loader used by experiments/quality/parser_quality.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mage_gym.graph.parsers.quality import (
    best_overlap_type,
    Tally,
    evidence_category,
    load_gold_boxes,
    match_gold,
    rescale_bbox,
)

GOLD = (100.0, 100.0, 300.0, 200.0)


def test_single_tight_element_matches() -> None:
    ok, iou = match_gold(GOLD, [(102, 101, 298, 199)])
    assert ok and iou > 0.95


def test_split_region_matches_through_the_union() -> None:
    halves = [(100, 100, 300, 148), (100, 152, 300, 200)]
    assert match_gold(GOLD, halves)[0]
    assert not match_gold(GOLD, halves[:1])[0]  # half the region: IoU 0.48


def test_elements_spilling_outside_do_not_count() -> None:
    # a whole-page element contains the gold box but lies mostly outside it
    ok, iou = match_gold(GOLD, [(0, 0, 600, 800)])
    assert not ok and iou == 0.0
    # 79% inside: excluded; 81% inside: included
    assert match_gold(GOLD, [(100, 100, 300, 200 + 0.27 * 100)])[1] == 0.0
    assert match_gold(GOLD, [(100, 100, 300, 200 + 0.23 * 100)])[0]


def test_union_spans_all_inside_members() -> None:
    # two small members at opposite corners: union (150..299, 120..199) has IoU 0.589
    ok, iou = match_gold(GOLD, [(150, 120, 250, 140), (290, 190, 299, 199)])
    assert ok and iou == pytest.approx(149 * 79 / 20000)
    assert not match_gold(GOLD, [(150, 120, 250, 140)])[0]


def test_no_elements() -> None:
    assert match_gold(GOLD, []) == (False, 0.0)


def test_rescale_and_categories() -> None:
    assert rescale_bbox((10, 20, 30, 40), (612, 792), (1224, 1584)) == (20, 40, 60, 80)
    assert evidence_category(["Table"]) == "table"
    assert evidence_category(["Generalized-text (Layout)"]) == "layout"
    assert evidence_category(["Pure-text (Plain-text)", "Chart"]) == "mixed"
    assert evidence_category([]) == "none"


def test_load_gold_boxes_dedups_and_parses_types(tmp_path: Path) -> None:
    rec = {
        "doc_name": "a.pdf",
        "questions": [
            {"type": "['Table']", "layout_mapping": [{"page": 2, "page_size": [612, 792], "bbox": [10, 10, 100, 50]}]},
            {"type": "['Table']", "layout_mapping": [{"page": 2, "page_size": [612, 792], "bbox": [10, 10, 100, 50]}]},
            {"type": "['Chart']", "layout_mapping": [{"page": 3, "page_size": [612, 792], "bbox": [0, 0, 50, 50]},
                                                     {"page": 3, "page_size": [612, 792], "bbox": [5, 5, 5, 50]}]},
            {"type": "['Figure']", "layout_mapping": [{"page": 3, "page_size": [612, 792], "bbox": [0, 0, 50, 50]}]},
        ],
    }
    p = tmp_path / "gold.jsonl"
    p.write_text(json.dumps(rec) + "\n\n")
    boxes = load_gold_boxes(p)["a.pdf"]
    assert len(boxes) == 2  # duplicate dropped, degenerate box dropped
    by_page = {b.page: b for b in boxes}
    assert by_page[2].category == "table" and by_page[3].category == "mixed"
    assert by_page[2].types == ("table",) and by_page[3].types == ("chart", "figure")
    assert by_page[2].rescaled(1224, 1584) == (20, 20, 200, 100)


def test_best_overlap_type_names_the_most_overlapping_element() -> None:
    gold = (100.0, 100.0, 300.0, 300.0)
    elements = [((90.0, 90.0, 310.0, 310.0), "figure"), ((100.0, 100.0, 300.0, 200.0), "chart"),
                ((0.0, 0.0, 50.0, 50.0), "table")]
    assert best_overlap_type(gold, elements) == "figure"  # IoU 0.83 beats 0.5
    assert best_overlap_type(gold, elements[1:]) == "chart"
    assert best_overlap_type(gold, elements[2:]) is None  # no overlap
    assert best_overlap_type(gold, [((100.0, 100.0, 300.0, 140.0), "chart")]) is None  # IoU 0.2 < 0.3


def test_tally() -> None:
    t = Tally()
    t.add(True, 0.8)
    t.add(False, 0.2)
    assert t.as_dict() == {"boxes": 2, "matched": 1, "match_rate": 0.5, "mean_iou": 0.5}


@pytest.mark.real_data
def test_real_gold_file_loads(data_root: Path) -> None:
    gold = load_gold_boxes(data_root / "mmlongbench-dev" / "mmdocir_layout.jsonl")
    assert len(gold) >= 30
    boxes = [b for bs in gold.values() for b in bs]
    assert len(boxes) > 300
    cats = {b.category for b in boxes}
    assert {"text", "table", "chart", "figure"} <= cats
    assert all(b.bbox[0] < b.bbox[2] and b.bbox[1] < b.bbox[3] and b.page >= 0 for b in boxes)
