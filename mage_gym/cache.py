"""The package's one in-memory cache type: bounded, owner-keyed, thread-safe, counted, listed.

Why one type: indexes, question relevance, search scores, unions and open
documents are all pure memos of something the process already holds (a graph,
an episode's relevance, a content key). One class gives them the same rules:

- **Owner-keyed.** An entry belongs to an *owner* object (a graph, an episode's
  relevance, a scores array) plus an optional hashable ``key``. The owner is held
  weakly, so an entry never keeps it alive, and dies with it. Graphs are
  unhashable ``eq`` dataclasses, so entries are keyed by ``id(owner)`` and a weak
  reference beside the entry detects a recycled id (a new object at the address
  of a dead one never sees the dead one's entry). A cache built with
  ``owned=False`` has no owners: entries are keyed by ``key`` alone (unions by
  content hash, documents by path).
- **Bounded.** At most ``max_entries`` entries; the least recently used goes
  first. A cache of per-graph data (``per_graph=True``) never holds fewer than
  the floor :func:`reserve_graphs` sets (a training env cycling through ``n``
  graphs would otherwise rebuild an index at almost every reset).
- **Thread-safe, builds outside the lock.** A build can be slow (a model
  encoding pages); two threads missing the same entry may both build it, and
  the first stored wins, so every caller of a key gets the same object.
- **Counted and listed.** Each cache has a name and counts hits and misses;
  :func:`cache_stats` lists every live cache of the process (nothing hidden).
- **Picklable as settings.** Environments and retrievers travel to worker
  processes; a cache arrives there empty (locks and weak references cannot
  travel, and graphs arrive as new objects anyway).

Values must be pure functions of (owner, key): a hit or a miss never changes a
result, only its cost. Anything whose identity is part of ``key`` must be held
by the value (its id then cannot be reused while the entry lives).
"""
from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any, Callable, Generic, Hashable, TypeVar

V = TypeVar("V")

_LIVE: "weakref.WeakSet[Cache[Any]]" = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()
_GRAPH_FLOOR = 1  # no per-graph cache of this process holds fewer entries than this (see reserve_graphs)


@dataclass(frozen=True)
class CacheStats:
    """One cache's name, size, bound and counters (see :func:`cache_stats`)."""

    name: str
    size: int
    max_entries: int
    hits: int
    misses: int
    owned: bool
    per_graph: bool

    @property
    def hit_rate(self) -> float | None:
        calls = self.hits + self.misses
        return self.hits / calls if calls else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "hit_rate": self.hit_rate}


class _OwnerRef(weakref.ref):
    """A weak reference to an entry's owner that knows the entry's key (a dead owner's entry is found in O(1))."""

    __slots__ = ("key",)

    def __init__(self, owner: Any, callback: Callable[[Any], Any], *, key: tuple[int | None, Hashable]) -> None:
        super().__init__(owner, callback)
        self.key = key


class Cache(Generic[V]):
    """``get(owner, key, build)`` returns ``build()`` once per live (owner, key) while the entry stays cached.

    ``name``: how :func:`cache_stats` lists it (``layer.what``, e.g.
    ``env.question_relevance``). ``max_entries``: the LRU bound. ``owned``:
    entries belong to a weakly held owner (else ``owner`` must be None and
    ``key`` says it all). ``per_graph``: owners are graphs, one entry each
    (``key`` None): the bound follows :func:`reserve_graphs`. ``on_evict``:
    called with a value that leaves the cache (evicted, its owner died,
    discarded or cleared), outside the lock (an open document closes there).
    """

    def __init__(self, name: str, max_entries: int, *, owned: bool = True, per_graph: bool = False,
                 on_evict: Callable[[V], Any] | None = None) -> None:
        if int(max_entries) < 1:
            raise ValueError(f"cache {name!r}: max_entries must be >= 1, got {max_entries}")
        if per_graph and not owned:
            raise ValueError(f"cache {name!r}: a per-graph cache is owned by its graphs")
        self.name = str(name)
        self.owned = bool(owned)
        self.per_graph = bool(per_graph)
        self.on_evict = on_evict
        self.max_entries = max(int(max_entries), _GRAPH_FLOOR) if per_graph else int(max_entries)
        self.hits = 0
        self.misses = 0
        # (id(owner) or None, key) -> (weak ref to the owner or None, value)
        self._entries: OrderedDict[tuple[int | None, Hashable], tuple[_OwnerRef | None, V]] = OrderedDict()
        self._lock = threading.Lock()
        # Weak-reference callbacks only append here (atomic, no lock): garbage collection can run them at any
        # point, even inside this class while the lock is held, so they must never take it.
        self._dead: list[_OwnerRef] = []
        with _LIVE_LOCK:
            _LIVE.add(self)

    # --- pickling: settings only ------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        return {"name": self.name, "max_entries": self.max_entries, "owned": self.owned,
                "per_graph": self.per_graph, "on_evict": self.on_evict}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def __repr__(self) -> str:
        s = self.stats()
        return (f"Cache({s.name!r}, {s.size}/{s.max_entries} entries, {s.hits} hits, {s.misses} misses"
                f"{'' if s.owned else ', key-only'})")

    # --- lookups ----------------------------------------------------------------------

    def _full_key(self, owner: Any, key: Hashable) -> tuple[int | None, Hashable]:
        if self.owned:
            if owner is not None:
                return (id(owner), key)
            raise TypeError(f"cache {self.name!r} is owner-keyed: pass the owner object, not None")
        if owner is None:
            return (None, key)
        raise TypeError(f"cache {self.name!r} is key-only: pass None as the owner")

    def _live(self, entry: tuple[_OwnerRef | None, V] | None, owner: Any) -> bool:
        return entry is not None and (entry[0] is None or entry[0]() is owner)

    def get(self, owner: Any, key: Hashable, build: Callable[[], V]) -> V:
        """The cached value of (``owner``, ``key``), or ``build()`` stored (the first stored wins a race)."""
        full = self._full_key(owner, key)
        with self._lock:  # the hit path is inlined: some caches are read at every env step
            evicted = self._purge() if self._dead else None
            entry = self._entries.get(full)
            hit = entry is not None and (entry[0] is None or entry[0]() is owner)
            if hit:
                self._entries.move_to_end(full)
                self.hits += 1
            else:
                self.misses += 1
        if evicted:
            self._evicted(evicted)
        if hit:
            return entry[1]  # type: ignore[index]
        built = build()  # outside the lock: builds can be slow (models, page encodings)
        ref = self._ref(owner, full) if self.owned else None
        with self._lock:
            have = self._entries.get(full)
            if self._live(have, owner):  # another thread stored it first: every caller gets that one object
                self._entries.move_to_end(full)
                value, evicted = have[1], [built]  # type: ignore[index]
            else:
                self._entries[full] = (ref, built)
                value, evicted = built, self._trim()
        if evicted:
            self._evicted(evicted)
        return value

    def peek(self, owner: Any, key: Hashable = None) -> V | None:
        """The cached value without building it or touching the order or the counters (None when absent)."""
        full = self._full_key(owner, key)
        with self._lock:
            entry = self._entries.get(full)
            return entry[1] if self._live(entry, owner) else None  # type: ignore[index]

    def discard(self, owner: Any, key: Hashable = None) -> None:
        """Drop one entry (e.g. a closed document), calling ``on_evict`` on its value."""
        full = self._full_key(owner, key)
        with self._lock:
            entry = self._entries.pop(full, None)
        if entry is not None:
            self._evicted([entry[1]])

    def discard_owner(self, owner: Any) -> int:
        """Drop every entry of ``owner`` (any key), calling ``on_evict`` on their values; how many went."""
        if not self.owned:
            return 0
        with self._lock:
            gone = [k for k, (ref, _) in self._entries.items() if k[0] == id(owner) and ref is not None
                    and ref() is owner]
            values = [self._entries.pop(k)[1] for k in gone]
        self._evicted(values)
        return len(values)

    def purge_dead(self) -> int:
        """Drop now the entries whose owner died (otherwise they go at this cache's next use); how many."""
        with self._lock:
            values = self._purge() if self._dead else []
        self._evicted(values)
        return len(values)

    # --- bounds, counters, housekeeping -----------------------------------------------

    def reserve(self, n: int) -> None:
        """Raise the bound to at least ``n`` entries (never lowers it)."""
        self.max_entries = max(self.max_entries, int(n))

    def clear(self) -> None:
        """Drop every entry (counters stay: they describe the cache's whole life)."""
        with self._lock:
            values = [v for _, v in self._entries.values()]
            self._entries.clear()
            self._dead.clear()
        self._evicted(values)

    def __len__(self) -> int:
        with self._lock:
            evicted = self._purge()
            n = len(self._entries)
        self._evicted(evicted)
        return n

    def stats(self) -> CacheStats:
        n = len(self)
        return CacheStats(name=self.name, size=n, max_entries=self.max_entries, hits=self.hits,
                          misses=self.misses, owned=self.owned, per_graph=self.per_graph)

    def _ref(self, owner: Any, full: tuple[int | None, Hashable]) -> _OwnerRef:
        try:
            return _OwnerRef(owner, self._dead.append, key=full)
        except TypeError:
            raise TypeError(f"cache {self.name!r}: an owner of type {type(owner).__name__} cannot be held weakly; "
                            "use a key-only cache (owned=False)") from None

    def _purge(self) -> list[V]:
        """Drop the entries whose owner was collected (lock held); their values, for ``on_evict``."""
        out = []
        while self._dead:
            ref = self._dead.pop()
            entry = self._entries.get(ref.key)
            if entry is not None and entry[0] is ref:
                del self._entries[ref.key]
                out.append(entry[1])
        return out

    def _trim(self) -> list[V]:
        """Evict the least recently used entries over the bound (lock held); their values."""
        out = self._purge() if self._dead else []
        while len(self._entries) > self.max_entries:
            out.append(self._entries.popitem(last=False)[1][1])
        return out

    def _evicted(self, values: list[V]) -> None:
        if self.on_evict is not None:
            for v in values:
                self.on_evict(v)


def reserve_graphs(n: int) -> None:
    """Let every per-graph cache of this process hold at least ``n`` graphs, now and when created later.

    Why: a training env cycles through a corpus of ``n`` document graphs it
    keeps in memory; caches of their indexes (retrievers, the env's graph
    index) holding fewer would rebuild an index at almost every reset. Only
    raises bounds; results do not change.
    """
    global _GRAPH_FLOOR
    _GRAPH_FLOOR = max(_GRAPH_FLOOR, int(n))
    for cache in _live_caches():
        if cache.per_graph:
            cache.reserve(_GRAPH_FLOOR)


def release_owner(owner: Any) -> int:
    """Drop ``owner``'s entries from every cache of this process; how many went.

    Why: a service that evicts an idle document must free what was derived
    from its graph too (indexes, node tables, rendered-page memos), or the
    per-graph caches keep the graph alive until their own LRU gets to it.
    Entries owned by objects derived from ``owner`` (its index) die with them:
    their owners are held weakly.
    """
    return sum(cache.discard_owner(owner) for cache in _live_caches())


def purge_dead() -> int:
    """Drop, in every cache of this process, the entries whose owner died; how many.

    Why: a dead owner's entry normally goes at its cache's next use. After
    :func:`release_owner`, objects that lived only through the released
    entries die (some in reference cycles, after a collection), and the
    entries they own may hold the released owner's data: a caller that needs
    the memory back at once collects and purges until nothing more dies.
    """
    return sum(cache.purge_dead() for cache in _live_caches())


def _live_caches() -> list[Cache[Any]]:
    with _LIVE_LOCK:
        return list(_LIVE)


def cache_stats() -> list[CacheStats]:
    """Every live cache of this process, by name: size, bound, hits and misses.

    Several caches may share a name (each retriever object has its own index
    cache); they are listed one by one.
    """
    return sorted((c.stats() for c in _live_caches()), key=lambda s: (s.name, -s.size))


__all__ = ["Cache", "CacheStats", "cache_stats", "purge_dead", "release_owner", "reserve_graphs"]
