"""Documents shared by the service's sessions: loaded once per process however many sessions play them, at most
``max_documents`` held, idle ones evicted with what was derived from them, and a typed refusal at the cap."""
from __future__ import annotations

import gc
import threading
import weakref

import pytest

from mage_gym.agent.service.documents import DocumentHolder
from mage_gym.agent.service.errors import DocumentCapacity
from service_helpers import toy_documents


def hold(pool, holder: DocumentHolder, episode_id: str):
    with pool.holding(holder):
        return pool.get(episode_id).graph


def test_one_copy_per_document_however_many_sessions_hold_it():
    pool, loaded = toy_documents(3, max_documents=3)
    holders = [DocumentHolder() for _ in range(8)]
    graphs = [hold(pool, h, f"doc0-q{i % 2}") for i, h in enumerate(holders)]
    assert loaded == ["<toy doc0>"] and all(g is graphs[0] for g in graphs)
    assert pool.stats()["held"] == 1
    for h in holders:
        pool.release(h)
    assert pool.stats() == {**pool.stats(), "held": 0, "idle": 1, "documents": 1}


def test_concurrent_first_loads_of_a_document_load_it_once():
    pool, loaded = toy_documents(1)
    barrier = threading.Barrier(6)
    seen: list = []

    def session() -> None:
        barrier.wait()
        seen.append(hold(pool, DocumentHolder(), "doc0-q0"))

    threads = [threading.Thread(target=session) for _ in range(6)]
    [t.start() for t in threads]
    [t.join(30) for t in threads]
    assert len(loaded) == 1 and len(seen) == 6 and all(g is seen[0] for g in seen)


def test_the_cap_evicts_idle_documents_first_and_refuses_when_all_are_held():
    pool, loaded = toy_documents(4, max_documents=2)
    a, b, c = DocumentHolder(), DocumentHolder(), DocumentHolder()
    hold(pool, a, "doc0-q0")
    hold(pool, b, "doc1-q0")
    with pytest.raises(DocumentCapacity, match="max_documents"):
        hold(pool, c, "doc2-q0")
    pool.release(a)  # doc0 idle: its slot can go
    hold(pool, c, "doc2-q0")
    assert pool.stats()["documents"] == 2 and pool.stats()["evictions"] == 1 and pool.stats()["refusals"] == 1
    pool.release(b)
    hold(pool, a, "doc0-q1")  # doc0 was evicted: loaded again, into doc1's slot (doc2 is held)
    assert loaded == ["<toy doc0>", "<toy doc1>", "<toy doc2>", "<toy doc0>"] and pool.stats()["evictions"] == 2


def test_idle_eviction_frees_the_graph_and_everything_derived_from_it():
    """A session's env, index and retrieval caches held the graph; after release and idle eviction it dies."""
    from mage_gym.agent.chat_env import MageChatEnv
    from mage_gym.bench.synthetic import hash_query_fn

    pool, loaded = toy_documents(2, max_documents=2, idle_s=3600)
    env = MageChatEnv(episodes=pool, dataset="mmlongbench", query_fn=hash_query_fn(16), K=16, retriever="bm25")
    holder = DocumentHolder()
    with pool.holding(holder):
        env.reset(options={"episode_id": "doc0-q0"})
    ref = weakref.ref(env.inner.get_wrapper_attr("graph"))
    env.step('<tool_call>{"name": "stop", "arguments": {}}</tool_call>')
    env.close()
    del env
    pool.release(holder)
    assert pool.evict_idle(idle_s=3600) == []  # not idle long enough
    gc.collect()
    cached = ref() is not None  # (not inside the assert: pytest would keep the graph in its rewrite's locals)
    assert cached  # still cached for the next session
    assert pool.evict_idle(idle_s=0) == ["<toy doc0>"]
    gc.collect()
    assert ref() is None and pool.stats()["documents"] == 0
