"""Item-level support: one evidence measure for page images and opened elements, and the generous page rule.

A page image covers every gold item on it; an opened element covers the items it holds; an element summary
covers nothing. Page-level items (pages whose gold is not placed on elements) are left out of item support,
and a gold page recalled only because *some* element of it was opened is counted apart.
"""
from __future__ import annotations

import numpy as np
import pytest

from mage_gym import reward as R
from mage_gym.coverage import cover
from mage_gym.data.gold import GoldEvidence
from mage_gym.render import render
from mage_gym.testing import make_toy_graph

ACT, OPEN = 1, 2


@pytest.fixture(scope="module")
def graph():
    return make_toy_graph(n_pages=4, elements_per_page=4, dim=16)


def _gold(graph, element_items=(), page_items=()) -> GoldEvidence:
    items, item_pages, is_page = [], [], []
    for ids in element_items:
        items.append(tuple(graph.index_of[n] for n in ids))
        item_pages.append(graph.page_of(ids[0]))
        is_page.append(False)
    for p in page_items:
        items.append((p,))
        item_pages.append(p)
        is_page.append(True)
    nodes = np.array(sorted({n for it in items for n in it}), dtype=np.int32)
    return GoldEvidence(items=tuple(items), pages=tuple(sorted(set(item_pages))), item_pages=tuple(item_pages),
                        item_is_page=tuple(is_page), level="element" if element_items else "page", gold_nodes=nodes)


def _metrics(graph, gold, states: dict[str, int], mode: str) -> dict:
    st = np.zeros(graph.n_nodes, dtype=np.int8)
    for nid, v in states.items():
        st[graph.index_of[nid]] = v
    rendered = render(graph, st, mode)
    opened, whole = R.rendered_masks(graph, rendered)
    return R.episode_metrics(graph, gold, rendered, cover(gold, opened, whole, graph.node_page), opened)


def test_a_page_image_covers_its_items_and_an_opened_element_only_the_items_it_holds(graph) -> None:
    g = _gold(graph, element_items=[("toy:p0:e1",), ("toy:p1:e2",), ("toy:p1:e3",)], page_items=[3])
    image = _metrics(graph, g, {"toy:p0": ACT}, "visual")
    assert image["item_support"] == pytest.approx(1 / 3)  # p0's one item; the page-level item on p3 is left out
    elements = _metrics(graph, g, {"toy:p0": ACT, "toy:p1": ACT, "toy:p0:e1": OPEN, "toy:p1:e2": OPEN,
                                   "toy:p1:e3": ACT}, "elements")
    assert elements["item_support"] == pytest.approx(2 / 3)  # e3 as a summary covers nothing
    assert _metrics(graph, g, {"toy:p0": ACT, "toy:p0:e0": OPEN}, "elements")["item_support"] == 0.0
    # support counts the page-level item too; item support does not move when it is covered
    both = _metrics(graph, g, {"toy:p0": ACT, "toy:p3": ACT}, "visual")
    assert both["item_support"] == pytest.approx(1 / 3)


def test_questions_with_page_gold_only_have_no_item_support(graph) -> None:
    g = _gold(graph, page_items=[1, 2])
    m = _metrics(graph, g, {"toy:p1": ACT, "toy:p2": ACT}, "visual")
    assert m["item_support"] is None and m["evidence_page_recall"] == 1.0
    unanswerable = GoldEvidence()
    assert _metrics(graph, unanswerable, {"toy:p1": ACT}, "visual")["item_support"] is None


def test_pages_recalled_through_any_opened_element_are_counted_apart(graph) -> None:
    g = _gold(graph, element_items=[("toy:p0:e1",)], page_items=[1, 2])
    # elements mode: p1 is "recalled" through a non-gold-bearing element (page-level gold: unknown which bears
    # it); p0 has element gold, so its wrong element recalls nothing; p2's page summary is no recall
    m = _metrics(graph, g, {"toy:p0": ACT, "toy:p1": ACT, "toy:p2": ACT, "toy:p0:e0": OPEN, "toy:p1:e3": OPEN},
                 "elements")
    assert m["evidence_page_recall"] == pytest.approx(1 / 3) and m["gold_pages_by_any_element"] == 1
    # a page sent whole is not counted by that rule, whatever else is opened on it
    v = _metrics(graph, g, {"toy:p1": ACT, "toy:p1:e3": OPEN}, "visual")
    assert v["gold_pages_by_any_element"] == 0 and v["evidence_page_recall"] == pytest.approx(1 / 3)
    # opening the gold element itself on a page with element gold is the gold rule, not the generous one
    gold_el = _metrics(graph, g, {"toy:p0": ACT, "toy:p0:e1": OPEN}, "elements")
    assert gold_el["gold_pages_by_any_element"] == 0 and gold_el["evidence_page_recall"] == pytest.approx(1 / 3)
