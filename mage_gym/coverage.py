"""The one coverage rule: when has the reader got a piece of gold evidence?

Why one module: page recall, oracle-reader support, ``evidence_all_covered``,
the shaping potential and the privileged oracle policy all ask the same
question; answered in several places they drifted apart (page recall once
counted a page whose only rendered node was an element *summary*, while
support did not). Every caller now goes through :func:`cover`.

The rule. The reader *gets* a page's content when it receives the whole page
(``visual`` mode: an activated page node is sent as an image; ``text`` mode:
as its whole text, see :mod:`mage_gym.render`) or full text from an element
of it (an opened element: its content, not its summary). An activated
element alone gives a summary, which covers nothing; so does a page text
clipped at the reader's limit or an empty one (an image-only page without
OCR text): the reader may not have received the evidence.

- A **gold page** is covered when the whole page is sent, or, when the page holds
  element-level gold (a region or snippet mapped to elements), when one of
  those gold elements is opened; a page with only page-level gold is also
  covered by any opened element on it.
- A **gold item** (see :class:`~mage_gym.data.gold.GoldEvidence`) is covered
  when its page image is sent or one of its own nodes is opened; a
  page-level item is covered exactly when its page is.
- Gold outside the graph (a page number past the document's end; gold
  resolution already drops such pages and counts them) is neither covered nor
  counted: a reader could never get it, so it would only lower every
  policy's figure alike.
- No gold (unanswerable questions, or gold that could not be placed on the
  graph): every evidence metric is ``None`` and is reported apart.

Consequences: ``all_covered`` is true exactly when support is 1, and then page
recall is 1 too.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np


class GoldLike(Protocol):
    """What the rule reads of the gold: :class:`~mage_gym.data.gold.GoldEvidence` and the privileged view fit."""

    items: Sequence[Sequence[int]]
    pages: Sequence[int]
    item_pages: Sequence[int]
    item_is_page: Sequence[bool]
    level: str


def share(mask: np.ndarray | Sequence[bool]) -> float:
    """Fraction of True in a non-empty bool array: ``float(np.mean(mask))`` without its dispatch overhead.

    Bit-identical to the mean: numpy sums bools exactly in float64 and divides once, as this does.
    """
    return int(np.count_nonzero(mask)) / len(mask)


@dataclass(frozen=True)
class Coverage:
    """Which gold the reader got. Arrays are bool; evidence figures are ``None`` without countable gold."""

    items: np.ndarray  # [n_items] item covered
    item_counted: np.ndarray  # [n_items] item inside the graph (counted in support / all_covered)
    pages: tuple[int, ...]  # gold pages inside the graph, ascending
    page_covered: np.ndarray  # [len(pages)] gold page covered
    #: [n_items] the item is element-level (a region or snippet mapped to its own nodes), not a whole page
    item_element: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    #: [len(pages)] covered only through the page-level-gold rule: the page holds no element-level gold, was not
    #: sent whole, and some other element of it was opened (which of its elements bears the gold is unknown)
    page_by_any_element: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    @property
    def known(self) -> bool:
        """There is gold a reader could get (answerable, placed on the graph, inside it)."""
        return bool(self.item_counted.any())

    @property
    def support(self) -> float | None:
        """Share of counted gold items covered (the oracle reader's support)."""
        return share(self.items[self.item_counted]) if self.known else None

    @property
    def all_covered(self) -> bool | None:
        return bool(self.items[self.item_counted].all()) if self.known else None

    @property
    def page_recall(self) -> float | None:
        return share(self.page_covered) if len(self.pages) else None

    @property
    def item_support(self) -> float | None:
        """Share of the counted element-level gold items covered (None without any): the evidence measure
        that reads the same for page images (which cover their items) and opened elements (which cover the
        items they hold), so policies in different render modes compare on it."""
        sel = self.item_counted & self.item_element if len(self.item_element) else self.item_element
        return share(self.items[sel]) if sel.any() else None

    @property
    def pages_by_any_element(self) -> int:
        """Gold pages counted as recalled through an opened element that may not bear the gold (see
        ``page_by_any_element``): page recall in ``elements`` mode is generous by this many pages."""
        return int(np.count_nonzero(self.page_by_any_element))


def cover(gold: GoldLike, opened: np.ndarray, page_images: np.ndarray, node_page: np.ndarray) -> Coverage:
    """Apply the rule (module docstring) to what the reader receives.

    ``opened``: bool [n_nodes], nodes sent with their full content;
    ``page_images``: bool [n_pages], pages sent whole (as images in
    ``visual`` mode, as their whole text in ``text`` mode);
    ``node_page``: int [n_nodes], each node's page.
    """
    n_items = len(gold.items)
    n_nodes, n_pages = len(opened), len(page_images)
    items = np.zeros(n_items, dtype=bool)
    counted = np.zeros(n_items, dtype=bool)
    pages = tuple(sorted({int(p) for p in gold.pages if 0 <= int(p) < n_pages}))
    if gold.level == "none" or n_items == 0:
        return Coverage(items, counted, (), np.zeros(0, dtype=bool))
    opened_on_page = np.zeros(n_pages, dtype=bool)
    opened_idx = np.asarray(opened).nonzero()[0]
    if len(opened_idx):
        opened_on_page[node_page[opened_idx]] = True
    has_element_gold = np.zeros(n_pages, dtype=bool)
    gold_element_opened = np.zeros(n_pages, dtype=bool)
    item_nodes: list[np.ndarray] = []
    for i, item in enumerate(gold.items):
        nodes = np.asarray(item, dtype=np.int64)
        nodes = nodes[(nodes >= 0) & (nodes < n_nodes)]
        item_nodes.append(nodes)
        p = int(gold.item_pages[i])
        if not gold.item_is_page[i] and 0 <= p < n_pages:
            has_element_gold[p] = True
            gold_element_opened[p] |= bool(opened[nodes].any()) if len(nodes) else False
    by_any_element = ~page_images.astype(bool) & ~has_element_gold & opened_on_page
    page_ok = page_images.astype(bool) | np.where(has_element_gold, gold_element_opened, opened_on_page)
    for i, nodes in enumerate(item_nodes):
        p = int(gold.item_pages[i])
        if not 0 <= p < n_pages:
            continue
        counted[i] = True
        if gold.item_is_page[i]:
            items[i] = page_ok[p]
        else:
            items[i] = bool(page_images[p]) or (bool(opened[nodes].any()) if len(nodes) else False)
    sel = list(pages)
    return Coverage(items, counted, pages, page_ok[sel] if pages else np.zeros(0, dtype=bool),
                    ~np.asarray(gold.item_is_page, dtype=bool).reshape(n_items),
                    by_any_element[sel] if pages else np.zeros(0, dtype=bool))


def state_masks(node_state: np.ndarray, n_pages: int, visual: bool,
                whole_text: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(opened, whole pages) that :func:`mage_gym.render.render` would send for a node-state table.

    Opened nodes are state 2. An activated page node (state 1) is sent whole
    as its image in ``visual`` mode; in ``text`` mode as its text when
    ``whole_text[page]`` (:func:`mage_gym.render.whole_text_pages`, required
    in ``text`` mode: which pages fit the reader's limit is the graph's).
    """
    st = np.asarray(node_state)
    opened = st == 2
    active = st[:n_pages] == 1
    if visual:
        return opened, active
    if whole_text is None:
        raise ValueError("text mode: pass whole_text=mage_gym.render.whole_text_pages(graph, render_config)")
    return opened, active & np.asarray(whole_text, dtype=bool)


__all__ = ["Coverage", "GoldLike", "cover", "share", "state_masks"]
