"""The coverage rule at its edges, by hand: gold outside the graph, items without nodes, two items on one page.

A three-page graph of two elements a page (pages 0-2 are nodes 0-2, page
p's elements are nodes 3 + 2p and 4 + 2p). Gold is written as raw
GoldEvidence so that malformed parts (a node or page past the end, a level
of "none" with items) reach :func:`~mage_gym.coverage.cover` as they would
from an older graph.
"""
from __future__ import annotations

import numpy as np
import pytest

from mage_gym.coverage import cover, state_masks
from mage_gym.data.gold import GoldEvidence
from mage_gym.testing import make_toy_graph

N_PAGES, N_NODES = 3, 9


@pytest.fixture()
def node_page() -> np.ndarray:
    return make_toy_graph(n_pages=N_PAGES, elements_per_page=2, dim=16).node_page


def _gold(items, item_pages, is_page, pages, level="element") -> GoldEvidence:
    return GoldEvidence(items=tuple(tuple(i) for i in items), pages=tuple(pages), item_pages=tuple(item_pages),
                        item_is_page=tuple(is_page), level=level,
                        gold_nodes=np.array(sorted({n for it in items for n in it}), dtype=np.int64))


def _masks(opened=(), pages=()) -> tuple[np.ndarray, np.ndarray]:
    o = np.zeros(N_NODES, dtype=bool)
    o[list(opened)] = True
    p = np.zeros(N_PAGES, dtype=bool)
    p[list(pages)] = True
    return o, p


def test_no_gold_gives_empty_bool_arrays(node_page) -> None:
    for g in (GoldEvidence(), _gold([(3,)], [0], [False], [0], level="none")):
        c = cover(g, *_masks(opened=(3,), pages=(0,)), node_page)
        assert c.items.dtype == bool and c.page_covered.dtype == bool and c.page_covered.tolist() == []
        assert c.support is None and c.page_recall is None and c.all_covered is None and c.pages == ()
    assert cover(GoldEvidence(), *_masks(), node_page).items.tolist() == []


def test_an_item_outside_the_graph_is_skipped_and_the_next_one_still_counted(node_page) -> None:
    g = _gold([(3,), (5,), (7,)], [0, N_PAGES, 2], [False, False, False], [0, 2])  # item 2's page is past the end
    c = cover(g, *_masks(opened=(3, 7)), node_page)
    assert c.item_counted.tolist() == [True, False, True] and c.items.tolist() == [True, False, True]
    assert c.items.dtype == bool and c.support == 1.0 and c.page_recall == 1.0


def test_items_whose_pages_all_lie_outside_leave_no_pages(node_page) -> None:
    g = _gold([(5,)], [N_PAGES], [False], [N_PAGES])
    c = cover(g, *_masks(opened=(5,)), node_page)
    assert c.pages == () and c.page_covered.tolist() == [] and c.page_by_any_element.tolist() == []
    assert c.page_recall is None and c.support is None


def test_nodes_outside_the_graph_cover_nothing(node_page) -> None:
    last = N_NODES - 1  # node -1 would wrap to it
    g = _gold([(-1,), (N_NODES,), (3, N_NODES)], [2, 0, 0], [False, False, False], [0, 2])
    c = cover(g, *_masks(opened=(last, 3)), node_page)
    assert c.items.tolist() == [False, False, True]  # the third item has one real node, opened
    empty_item = _gold([(N_NODES + 5,)], [1], [False], [1])
    c = cover(empty_item, *_masks(opened=(5, 6)), node_page)  # page 1's elements are opened, not the gold one
    assert c.items.tolist() == [False] and c.page_covered.tolist() == [False]


def test_two_element_items_on_one_page_either_opened_covers_the_page(node_page) -> None:
    g = _gold([(3,), (4,)], [0, 0], [False, False], [0])
    c = cover(g, *_masks(opened=(3,)), node_page)
    assert c.items.tolist() == [True, False] and c.page_covered.tolist() == [True] and c.support == 0.5


def test_state_masks_return_bool_masks_whatever_the_whole_text_array(node_page) -> None:
    st = np.array([1, 1, 0, 2, 0, 0, 0, 0, 0], dtype=np.int8)
    opened, pages = state_masks(st, N_PAGES, visual=False, whole_text=np.array([0, 1, 1]))
    assert pages.dtype == bool and pages.tolist() == [False, True, False] and opened.nonzero()[0].tolist() == [3]
    with pytest.raises(ValueError, match=r"^text mode: pass whole_text=mage_gym.render.whole_text_pages\(graph, "
                                         r"render_config\)$"):
        state_masks(st, N_PAGES, visual=False)
