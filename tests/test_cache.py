"""The one cache type (mage_gym.cache): LRU order, owners held weakly, recycled ids, key-only mode, stats,
pickling as settings, the per-graph floor, races, and the registry behind ``cache_stats()``."""
from __future__ import annotations

import gc
import importlib
import pickle
import threading
import weakref

import pytest

from mage_gym import cache as cache_mod
from mage_gym.cache import Cache, CacheStats, cache_stats, reserve_graphs
from mage_gym.testing import make_toy_graph


class Owner:
    """A weakly referable owner (like a graph index or an episode's relevance)."""


class _Counter:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, value: object = None):
        def build() -> object:
            self.calls += 1
            return value if value is not None else self.calls
        return build


def test_lru_evicts_the_least_recently_used_entry_first() -> None:
    c: Cache[str] = Cache("test.lru", 2)
    a, b, d = Owner(), Owner(), Owner()
    c.get(a, None, lambda: "a")
    c.get(b, None, lambda: "b")
    assert c.get(a, None, lambda: "a2") == "a"  # a is now the most recent
    c.get(d, None, lambda: "d")  # evicts b, not a
    assert c.peek(b) is None and c.peek(a) == "a" and c.peek(d) == "d" and len(c) == 2
    assert c.get(b, None, lambda: "b2") == "b2"  # rebuilt after eviction; evicts a (peek does not touch order)
    assert c.peek(a) is None


def test_keys_under_one_owner_are_separate_entries() -> None:
    c: Cache[str] = Cache("test.keys", 4)
    o = Owner()
    assert c.get(o, "x", lambda: "X") == "X" and c.get(o, "y", lambda: "Y") == "Y"
    assert c.get(o, "x", lambda: "other") == "X" and len(c) == 2


def test_an_entry_dies_with_its_owner_and_never_keeps_it_alive() -> None:
    evicted: list[object] = []
    c: Cache[list[int]] = Cache("test.dead", 8, on_evict=evicted.append)
    o = Owner()
    value = [1, 2, 3]
    c.get(o, "k", lambda: value)
    ref = weakref.ref(o)
    del o
    gc.collect()
    assert ref() is None  # the cache held its owner weakly
    assert len(c) == 0 and evicted == [value]


def test_a_recycled_id_never_sees_the_dead_owners_entry() -> None:
    """Even before the dead owner's entry is purged: the weak reference beside the entry must match the owner."""
    c: Cache[str] = Cache("test.recycled", 8)

    class Sink(list):
        def append(self, _: object) -> None:  # drop death notices: the stale entry stays in the table
            pass

    c._dead = Sink()
    a = Owner()
    c.get(a, None, lambda: "dead owner's value")
    old = (id(a), None)
    del a
    gc.collect()
    b = Owner()
    # What the allocator does when it hands the dead owner's address to b, done here for sure: the stale
    # entry (its weak reference dead) now sits under b's id.
    c._entries[(id(b), None)] = c._entries.pop(old)
    assert c._entries[(id(b), None)][1] == "dead owner's value"  # the stale entry is there, under b's id ...
    assert c.peek(b) is None  # ... and is not b's
    assert c.get(b, None, lambda: "b's value") == "b's value"


def test_key_only_mode_keys_by_value_and_refuses_owners() -> None:
    c: Cache[int] = Cache("test.keyonly", 2, owned=False)
    build = _Counter()
    assert c.get(None, ("doc", 1), build()) == 1 and c.get(None, ("doc", 1), build()) == 1
    assert c.get(None, ("doc", 2), build()) == 2 and build.calls == 2
    with pytest.raises(TypeError, match="key-only"):
        c.get(Owner(), "k", build())
    owned: Cache[int] = Cache("test.owned", 2)
    with pytest.raises(TypeError, match="owner-keyed"):
        owned.get(None, "k", build())
    with pytest.raises(TypeError, match="held weakly"):
        owned.get(object(), "k", build())  # a plain object() cannot be weakly referenced


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="max_entries"):
        Cache("test.bad", 0)
    with pytest.raises(ValueError, match="per-graph"):
        Cache("test.bad", 2, owned=False, per_graph=True)


def test_stats_count_hits_and_misses_and_the_registry_lists_every_live_cache() -> None:
    c: Cache[int] = Cache("test.stats.unique_name", 3)
    o = Owner()
    c.get(o, 1, lambda: 1)
    c.get(o, 1, lambda: 1)
    c.get(o, 2, lambda: 2)
    c.peek(o, 1)  # peeking counts nothing
    s = c.stats()
    assert s == CacheStats(name="test.stats.unique_name", size=2, max_entries=3, hits=1, misses=2, owned=True,
                           per_graph=False)
    assert s.hit_rate == pytest.approx(1 / 3) and s.to_dict()["hit_rate"] == pytest.approx(1 / 3)
    listed = [x for x in cache_stats() if x.name == "test.stats.unique_name"]
    assert listed == [s]
    c.clear()
    assert len(c) == 0 and c.stats().hits == 1  # counters describe the cache's whole life
    del c
    gc.collect()
    assert not [x for x in cache_stats() if x.name == "test.stats.unique_name"]  # dead caches leave the list


def test_the_package_caches_are_listed_by_name() -> None:
    for module in ("mage_gym.env", "mage_gym.graph.union", "mage_gym.graph.images"):
        importlib.import_module(module)  # creates their caches

    names = {s.name for s in cache_stats()}
    assert {"env.graph_index", "env.question_relevance", "env.search_scores", "env.initial_templates",
            "env.node_tables", "env.node_searches", "env.search_orders", "graph.union.unions",
            "graph.union.digests", "graph.images.open_pdfs"} <= names


def test_pickles_as_settings_only() -> None:
    c: Cache[int] = Cache("test.pickle", 5, per_graph=True)
    g = make_toy_graph()
    c.get(g, None, lambda: 7)
    c.get(g, None, lambda: 7)
    clone = pickle.loads(pickle.dumps(c))
    assert (clone.name, clone.max_entries, clone.owned, clone.per_graph) == ("test.pickle", c.max_entries, True, True)
    assert len(clone) == 0 and clone.hits == clone.misses == 0
    assert clone.get(g, None, lambda: 8) == 8  # usable, and listed like any other
    assert any(s.name == "test.pickle" and s.size == 1 for s in cache_stats())


def test_reserve_graphs_raises_per_graph_caches_only_now_and_later(monkeypatch: pytest.MonkeyPatch) -> None:
    # this test's floor and bounds do not leak into the package's own caches or later tests
    monkeypatch.setattr(cache_mod, "_GRAPH_FLOOR", 1)
    monkeypatch.setattr(cache_mod, "_LIVE", weakref.WeakSet())
    per_graph: Cache[int] = Cache("test.floor.graphs", 2, per_graph=True)
    other: Cache[int] = Cache("test.floor.other", 2)
    reserve_graphs(6)
    assert per_graph.max_entries == 6 and other.max_entries == 2
    assert Cache("test.floor.later", 2, per_graph=True).max_entries == 6
    reserve_graphs(3)  # only ever raises
    assert per_graph.max_entries == 6
    other.reserve(4)
    other.reserve(1)
    assert other.max_entries == 4
    graphs = [make_toy_graph(doc_id=f"d{i}", n_pages=2) for i in range(6)]
    for i, g in enumerate(graphs):
        per_graph.get(g, None, lambda i=i: i)
    assert len(per_graph) == 6  # the floor holds every graph


def test_builds_run_outside_the_lock_and_the_first_stored_wins() -> None:
    evicted: list[object] = []
    c: Cache[object] = Cache("test.race", 4, on_evict=evicted.append)
    o = Owner()
    inside = threading.Event()
    release = threading.Event()
    results: list[object] = []

    def slow_build() -> object:
        inside.set()
        release.wait(5)
        return "slow"

    t = threading.Thread(target=lambda: results.append(c.get(o, "k", slow_build)))
    t.start()
    assert inside.wait(5)
    # the lock is free while the slow build runs: another thread gets through and stores its own value first
    assert c.get(o, "k", lambda: "fast") == "fast"
    release.set()
    t.join(5)
    assert results == ["fast"]  # the slow builder gets the stored object, and its own value is dropped
    assert evicted == ["slow"] and c.stats().misses == 2


def test_on_evict_sees_every_value_that_leaves() -> None:
    gone: list[str] = []
    c: Cache[str] = Cache("test.evict", 1, owned=False, on_evict=gone.append)
    c.get(None, 1, lambda: "one")
    c.get(None, 2, lambda: "two")  # evicts "one"
    c.discard(None, 2)
    c.get(None, 3, lambda: "three")
    c.clear()
    assert gone == ["one", "two", "three"]


def test_derived_data_hangs_on_the_graph_index_and_is_not_pickled() -> None:
    from mage_gym.env.graph_index import build_graph_index

    gi = build_graph_index(make_toy_graph())
    calls: list[int] = []
    first = gi.derived("test.thing", lambda g: calls.append(1) or [g.n_nodes])
    assert gi.derived("test.thing", lambda g: ["rebuilt"]) is first and calls == [1]
    clone = pickle.loads(pickle.dumps(gi))
    assert clone.memo == {} and gi.memo and clone.n_nodes == gi.n_nodes


def test_release_owner_drops_its_entries_in_every_cache_and_frees_what_they_held() -> None:
    """What a service evicting an idle document relies on: values that hold their owner (an index holds its
    graph) no longer keep it alive once released."""
    evicted: list[object] = []
    first: Cache[object] = Cache("test.release_a", 8, on_evict=evicted.append)
    second: Cache[object] = Cache("test.release_b", 8)
    owner, other = Owner(), Owner()
    first.get(owner, "x", lambda: ["holds", owner])
    first.get(owner, "y", lambda: ["holds", owner])
    second.get(owner, None, lambda: ["holds", owner])
    first.get(other, "x", lambda: "kept")
    ref = weakref.ref(owner)
    assert cache_mod.release_owner(owner) == 3
    assert len(evicted) == 2 and first.peek(other, "x") == "kept" and len(second) == 0
    evicted.clear()
    del owner
    gc.collect()
    assert ref() is None
