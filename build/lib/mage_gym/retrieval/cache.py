"""Per-graph index cache shared by the retrievers.

Why a custom cache: an index must be built once per document graph and reused
at every reset and every SearchEvidence of every episode on that document, but
it must not keep a graph (and its index) alive after the environment dropped
it. :class:`EvidenceGraph` is an ``eq=True`` dataclass, hence unhashable, so a
``WeakKeyDictionary`` cannot hold it; we key on ``id(graph)`` and keep a weak
reference beside the entry to detect a recycled id. A small LRU bound caps
memory when an environment cycles through many documents.
"""
from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Callable, Generic, TypeVar

from mage_gym.graph.graph import EvidenceGraph

T = TypeVar("T")

_LIVE: "weakref.WeakSet[GraphIndexCache]" = weakref.WeakSet()
_FLOOR = 1  # no cache of this process holds fewer graphs than this (see reserve_graphs)


def reserve_graphs(n: int) -> None:
    """Let every per-graph cache of this process hold at least ``n`` graphs, now and when created later.

    Why: a training env cycles through a corpus of ``n`` document graphs it
    keeps in memory; caches of their indexes (retrievers, graph index, page
    views) holding fewer would rebuild an index at almost every reset. Only
    raises bounds; a cache is a pure function of its graph, so results do not
    change.
    """
    global _FLOOR
    _FLOOR = max(_FLOOR, int(n))
    for cache in list(_LIVE):
        cache.max_graphs = max(cache.max_graphs, _FLOOR)


class GraphIndexCache(Generic[T]):
    """``get(graph, build)`` returns ``build(graph)`` once per live graph object.

    Entries die with their graph (weakref callback) or when more than
    ``max_graphs`` graphs were indexed since (least recently used first).
    """

    def __init__(self, max_graphs: int = 8) -> None:
        if max_graphs < 1:
            raise ValueError(f"max_graphs must be >= 1, got {max_graphs}")
        self.max_graphs = max(max_graphs, _FLOOR)
        self._entries: OrderedDict[int, tuple[weakref.ref, T]] = OrderedDict()
        self._lock = threading.Lock()
        self._dead: list[weakref.ref] = []
        _LIVE.add(self)

    def __getstate__(self) -> dict:
        """Pickle the settings only: indexes are rebuilt in the receiving process.

        Why: environments (and the retrievers they hold) are sent to rollout
        worker processes; locks and weak references cannot travel, and graphs
        arrive there as new objects anyway.
        """
        return {"max_graphs": self.max_graphs}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["max_graphs"])  # type: ignore[misc]

    def __len__(self) -> int:
        with self._lock:
            self._purge()
            return len(self._entries)

    def peek(self, graph: EvidenceGraph) -> T | None:
        """The cached index of ``graph`` without building it (None when absent)."""
        entry = self._entries.get(id(graph))
        if entry is not None and entry[0]() is graph:
            return entry[1]
        return None

    def get(self, graph: EvidenceGraph, build: Callable[[EvidenceGraph], T]) -> T:
        key = id(graph)
        with self._lock:
            self._purge()
            entry = self._entries.get(key)
            if entry is not None and entry[0]() is graph:
                self._entries.move_to_end(key)
                return entry[1]
        value = build(graph)  # outside the lock: builds can be slow (models)
        with self._lock:
            self._entries[key] = (weakref.ref(graph, self._dead.append), value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_graphs:
                self._entries.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._dead.clear()

    def _purge(self) -> None:
        """Drop entries whose graph was collected.

        The weakref callback only appends to ``_dead`` (atomic, no lock): a
        callback can fire from garbage collection at any point, even inside
        this class while the lock is held, so it must never take the lock.
        """
        while self._dead:
            dead = self._dead.pop()
            for key, (ref, _) in list(self._entries.items()):
                if ref is dead:
                    del self._entries[key]
