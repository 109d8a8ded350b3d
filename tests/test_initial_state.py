"""Reset copies a cached start-of-episode template: the copy must equal a from-scratch build and stay independent.

Why these tests: the template (mage_gym.env.initial) replaces per-reset work
with a copy, so a shallow copy or a stale cache entry would silently leak one
episode's play into the next.
"""
from __future__ import annotations

import numpy as np

from mage_gym.data.episode import Episode
from mage_gym.env import EnvEpisode, MageRAGEnv
from mage_gym.testing import hash_query_fn, make_large_graph
from mage_gym.env.initial import build_initial_state, initial_state

QF = hash_query_fn(32)
GRAPH = make_large_graph(30, 5, dim=32, seed=2)
ARRAYS = ("node_state", "code", "rel_count", "frontier_ranked", "unvisited_ranked", "act_pos", "dyn", "page_dist")


def _episodes(window=None):
    return [EnvEpisode(Episode(episode_id=f"q{i}", benchmark="synth", doc_id=GRAPH.doc_id, source="<synthetic>",
                               question=q, answer="x", answer_format="Str", evidence_pages=(i * 5,),
                               page_window=window), GRAPH)
            for i, q in enumerate(["revenue in asia", "audit committee"])]


def _env(window=None) -> MageRAGEnv:
    return MageRAGEnv(episodes=_episodes(window), query_fn=QF, budget={"k": 3, "m": 3, "M": 12, "T": 6, "B": 6}, K=16)


def _assert_same(a, b) -> None:
    for name in ARRAYS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
        assert not np.shares_memory(x, y), name
    assert a.working == b.working and a.activation_order == b.activation_order
    assert a.counters == b.counters and a.n_unvisited_pages == b.n_unvisited_pages


def test_reset_state_equals_a_fresh_build_after_play():
    for window in (None, (4, 11)):
        env = _env(window)
        rng = np.random.default_rng(0)
        for episode in range(6):
            env.reset(options={"episode_id": f"q{episode % 2}"})
            fresh = build_initial_state(env.gi, env.budget, env.rel, window, env.budget.k)
            _assert_same(env.state, fresh)
            for _ in range(8):  # play, so the next reset of the same episode follows a mutated copy
                mask = env.action_masks()
                _, _, te, tr, _ = env.step(int(rng.choice(np.flatnonzero(mask))))
                if te or tr:
                    break


def test_initial_state_hands_out_independent_copies():
    env = _env()
    env.reset(options={"episode_id": "q0"})
    a = initial_state(env.gi, env.budget, env.rel, None, env.budget.k)
    a.activate(int(np.flatnonzero(a.node_state == 0)[0]))
    a.counters.steps += 5
    b = initial_state(env.gi, env.budget, env.rel, None, env.budget.k)
    _assert_same(b, build_initial_state(env.gi, env.budget, env.rel, None, env.budget.k))
