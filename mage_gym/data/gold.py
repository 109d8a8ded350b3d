"""Gold evidence resolved onto graph nodes (filled in by the episodes issue).

``GoldEvidence`` is what the reward and end-of-episode metrics consume; it is
computed from an Episode and its graph, and never shown to a policy.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class GoldEvidence:
    """Gold items of one episode, as graph node indices.

    ``items`` is a list of gold *items*; each item is a tuple of node indices
    any of which covers it (an element region may be split into several
    parsed elements; a page-level item is the page node). ``level`` says how
    precise the gold is: "element", "page", or "none" (unanswerable / no gold).
    """

    items: tuple[tuple[int, ...], ...] = ()
    pages: tuple[int, ...] = ()  # gold page numbers (0-based)
    item_pages: tuple[int, ...] = ()  # page of each item
    item_is_page: tuple[bool, ...] = ()  # True where the item is page-level
    level: str = "none"
    gold_nodes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))  # union of items
