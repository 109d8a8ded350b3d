"""Gold mapping onto graph nodes, on the hand-made toy graph."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from mage_gym.data.episode import Episode, Region
from mage_gym.data.gold import GoldStats, resolve_gold, resolve_gold_detailed
from mage_gym.testing import make_toy_graph

N_PAGES, PER_PAGE = 6, 4


@pytest.fixture(scope="module")
def graph():
    return make_toy_graph(n_pages=N_PAGES, elements_per_page=PER_PAGE)


def el(page: int, j: int) -> int:
    """Node index of element j of a page in the toy graph (pages first, then elements in order)."""
    return N_PAGES + page * PER_PAGE + j


def ep(**kw) -> Episode:
    base = dict(episode_id="e", benchmark="mmlongbench", doc_id="toy", source="<toy>", question="q", answer="a",
                answer_format="Str")
    base.update(kw)
    return Episode(**base)


def row(j: int) -> tuple[float, float]:
    return j / PER_PAGE + 0.01, (j + 1) / PER_PAGE - 0.01


def test_unanswerable_has_no_gold(graph) -> None:
    g = resolve_gold(ep(answerable=False, answer_format="None", evidence_pages=(1,),
                        evidence_regions=(Region(1, (0, 0, 1, 0.5)),)), graph)
    assert g.level == "none" and g.items == () and g.gold_nodes.size == 0


def test_page_level_items(graph) -> None:
    g = resolve_gold(ep(evidence_pages=(3, 1)), graph)
    assert g.level == "page" and g.items == ((1,), (3,)) and g.item_is_page == (True, True)
    assert g.pages == (1, 3) and g.item_pages == (1, 3)
    assert g.gold_nodes.dtype == np.int32 and g.gold_nodes.tolist() == [1, 3]


def test_region_to_elements(graph) -> None:
    y0, _ = row(1)
    _, y1 = row(2)
    spans_two = Region(2, (0.05, y0 - 0.005, 0.95, y1 + 0.005), "Table")
    inside_one = Region(4, (0.3, row(3)[0] + 0.05, 0.6, row(3)[0] + 0.1), "Pure-text (Plain-text)")
    g, stats = resolve_gold_detailed(ep(evidence_pages=(2, 4), evidence_regions=(spans_two, inside_one)), graph)
    assert g.level == "element"
    assert g.items == ((el(2, 1), el(2, 2)), (el(4, 3),))  # region over 2 elements; region inside 1
    assert g.item_is_page == (False, False) and g.item_pages == (2, 4)
    assert stats.region_items == 2 and stats.page_items == 0
    assert set(g.gold_nodes.tolist()) == {el(2, 1), el(2, 2), el(4, 3)}


def test_region_without_overlap_falls_back_to_page(graph) -> None:
    margin = Region(2, (0.92, 0.3, 0.99, 0.6))  # right margin: no element there
    whole = Region(3, (0.0, 0.0, 1.0, 0.95))  # a box around the whole page is the page
    g, stats = resolve_gold_detailed(ep(evidence_pages=(2, 3), evidence_regions=(margin, whole)), graph)
    assert g.items == ((2,), (3,)) and g.item_is_page == (True, True) and g.level == "page"
    assert stats.region_page_fallback == 1 and stats.region_whole_page == 1


def test_gold_page_without_region_stays_page_level(graph) -> None:
    reg = Region(1, (0.1, row(0)[0], 0.9, row(0)[1]))
    g = resolve_gold(ep(evidence_pages=(1, 5), evidence_regions=(reg,)), graph)
    assert g.items == ((el(1, 0),), (5,)) and g.item_is_page == (False, True) and g.level == "element"


def test_page_window_and_graph_bounds_respected(graph) -> None:
    regs = (Region(0, (0.1, row(1)[0], 0.9, row(1)[1])), Region(3, (0.1, row(1)[0], 0.9, row(1)[1])))
    g, stats = resolve_gold_detailed(
        ep(benchmark="longdocurl", evidence_pages=(0, 3, 4), evidence_regions=regs, page_window=(2, 4)), graph)
    assert g.pages == (3, 4) and g.items == ((el(3, 1),), (4,))
    assert stats.dropped_pages == 1 and stats.dropped_regions == 1
    beyond = resolve_gold(ep(evidence_pages=(2, 40)), graph)  # page 40 is past a (truncated) graph
    assert beyond.items == ((2,),)


def test_financebench_snippets(graph) -> None:
    page3 = graph.elements_of_page(3)
    snippet = page3[2].text + " and some surrounding words"
    whole_page = "\n".join(e.text for e in page3)
    e = ep(benchmark="financebench", evidence_pages=(3, 5), evidence_text=(snippet, whole_page, "zebra quartz"),
           extra={"evidence_text_pages": [3, 3, 5]})
    g, stats = resolve_gold_detailed(e, graph)
    assert stats.text_items == 1 and stats.text_whole_page == 1 and stats.text_page_fallback == 1
    assert set(g.items) == {(el(3, 2),), (3,), (5,)}
    # without the page list the snippet is matched against every gold page
    e2 = ep(benchmark="financebench", evidence_pages=(1, 3), evidence_text=(snippet,))
    assert resolve_gold(e2, graph).items == ((1,), (el(3, 2),))


def test_snippet_inside_a_long_element_matches_it() -> None:
    g0 = make_toy_graph(n_pages=2, elements_per_page=3)
    long_text = "net revenue increased to 4,120 million driven by higher volume in the americas and europe"
    els = [replace(x, text=long_text) if (x.page, x.index) == (1, 1) else x for x in g0.elements]
    g = replace(g0, elements=els)
    e = ep(benchmark="financebench", evidence_pages=(1,), evidence_text=("revenue increased to 4,120 million",),
           extra={"evidence_text_pages": [1]})
    assert resolve_gold(e, g).items == ((2 + 3 + 1,),)


def test_synth_regions_need_iou_and_compatible_type(graph) -> None:
    target = graph.elements_of_page(2)[2]  # type from the toy's cycle
    exact = Region(2, target.bbox, target.type)
    wrong_family = Region(2, target.bbox, "table" if target.type != "table" else "paragraph")
    shifted = Region(2, (target.bbox[0], target.bbox[1] + 0.12, target.bbox[2], target.bbox[3] + 0.12), target.type)
    g, stats = resolve_gold_detailed(ep(benchmark="synth", evidence_pages=(2,), evidence_regions=(exact,)), graph)
    assert g.items == ((el(2, 2),),) and stats.region_items == 1
    for reg in (wrong_family, shifted):
        g2 = resolve_gold(ep(benchmark="synth", evidence_pages=(2,), evidence_regions=(reg,)), graph)
        assert g2.items == ((2,),) and g2.level == "page"


def test_gold_node_ids(graph) -> None:
    ids = (graph.elements_of_page(1)[3].node_id, "toy:p9:e9")
    g, stats = resolve_gold_detailed(ep(benchmark="synth", evidence_pages=(1,), gold_node_ids=ids), graph)
    assert g.items == ((el(1, 3),),) and stats.node_id_items == 1 and stats.node_ids_missing == 1


def test_duplicate_fallbacks_merge_and_stats_add(graph) -> None:
    regs = (Region(2, (0.92, 0.1, 0.99, 0.2)), Region(2, (0.92, 0.5, 0.99, 0.6)))
    g, s = resolve_gold_detailed(ep(evidence_pages=(2,), evidence_regions=regs), graph)
    assert g.items == ((2,),)
    total = GoldStats()
    total += s
    total += s
    assert total.region_page_fallback == 4
