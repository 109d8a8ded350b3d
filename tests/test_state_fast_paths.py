"""The step loop's precomputed and incremental helpers give exactly what their plain definitions give.

Each fast path (issue 13, perf_env) replaces a from-scratch computation; these
tests compare the two bit for bit on random play over a mid-sized synthetic
document, so a speed-up can never change an observation, a mask or a slot.
"""
from __future__ import annotations

import numpy as np
import pytest

from mage_gym.data.episode import Episode
from mage_gym.env import EnvEpisode, MageRAGEnv
from mage_gym.env import candidates as C
from mage_gym.testing import hash_query_fn, make_large_graph
from mage_gym.env.actions import action_mask, check_operation, decode_action
from mage_gym.env.observation import question_features
from mage_gym.env.search import _node_search
from mage_gym.env.state import (
    ACTIVATED, DYN_LINKER, OPENED, EvidenceState, _aux, _page_distances, log_distance_table, mask_code,
)
from mage_gym.env.relevance import search_page_scores

QF = hash_query_fn(32)
GRAPH = make_large_graph(40, 6, dim=32, seed=1)
QUESTIONS = ["revenue growth in asia", "operating margin and profit", "audit committee members"]
EPISODES = [EnvEpisode(Episode(episode_id=f"q{i}", benchmark="synth", doc_id=GRAPH.doc_id, source="<synthetic>",
                               question=q, answer="x", answer_format="Str", evidence_pages=(i * 7,)), GRAPH)
            for i, q in enumerate(QUESTIONS)]


def _env(**kw) -> MageRAGEnv:
    return MageRAGEnv(episodes=EPISODES, query_fn=QF, budget={"k": 3, "m": 3, "M": 12, "T": 6, "B": 6}, K=24, **kw)


def _random_play(seed: int, steps: int = 150, prune_bias: float = 0.3):
    """Yield the env after every step of a random masked policy that prunes often (prunes are the tricky path)."""
    env = _env()
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    layout = env.layout
    for _ in range(steps):
        mask = env.action_masks()
        prunes = np.flatnonzero(layout.block(mask, 5)) + 1 + layout.row(5) * layout.K
        if len(prunes) and rng.random() < prune_bias:
            a = int(rng.choice(prunes))
        else:
            a = int(rng.choice(np.flatnonzero(mask)))
        _, _, term, trunc, _ = env.step(a)
        yield env
        if term or trunc:
            env.reset()


def _linker_from_scratch(state: EvidenceState) -> np.ndarray:
    """DYN_LINKER as activate defines it: per node, the float32 max of 1 - rank / n over working-set neighbours."""
    gi, n = state.gi, len(state.rank_of)
    out = np.zeros(gi.n_nodes, dtype=np.float32)
    for v in np.flatnonzero((state.node_state == ACTIVATED) | (state.node_state == OPENED)):
        nb = gi.nbr[gi.nbr_ptr[v]: gi.nbr_ptr[v + 1]]
        out[nb] = np.maximum(out[nb], np.float32(1.0 - state.rank_of[v] / n))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_incremental_tables_equal_their_definitions_exactly(seed: int) -> None:
    """Frontier, unvisited flags, mask codes, page distances and linker values after every step of random play."""
    for env in _random_play(seed):
        s = env.state
        gi = s.gi
        s.check_invariants()
        assert np.array_equal(s.code, mask_code(s.node_state, gi.node_page, gi.n_pages))
        want = log_distance_table(gi.n_pages)[_page_distances(gi.n_pages, s.node_state)]
        assert np.array_equal(s.page_dist, want)
        assert np.array_equal(s.dyn[:, DYN_LINKER], _linker_from_scratch(s))  # exact, not allclose


def test_page_offsets_slice_the_scaled_distance_to_every_page() -> None:
    env = _env()
    env.reset(seed=0)
    aux = _aux(env.state.gi)
    lut = log_distance_table(aux.n_pages)
    pages = np.arange(aux.n_pages)
    for u in (0, 1, aux.n_pages // 2, aux.n_pages - 1):
        assert np.array_equal(aux.page_offsets(u), lut[np.abs(pages - u)])


def test_log_distance_table_is_monotone() -> None:
    """The state keeps distances scaled, which is only sound because the scale never decreases."""
    for n_pages in (1, 2, 7, 500):
        lut = log_distance_table(n_pages)
        assert np.all(np.diff(lut) >= 0) and lut[-1] == 1.0 and lut[0] == 0.0


@pytest.mark.parametrize("scan0", [1, 3, 4096])
def test_frontier_scan_in_chunks_equals_one_nonzero(monkeypatch, scan0: int) -> None:
    monkeypatch.setattr(C, "_SCAN0", scan0)
    for env in _random_play(3, steps=60):
        s = env.state
        slots, n = C.fill_slots(s, env.rel.order, env.K)
        w = s.working[: env.K]
        frontier = env.rel.order[np.flatnonzero(s.frontier_ranked)][: env.K - len(w)]
        want = np.full(env.K, -1, dtype=np.intp)
        want[: len(w)] = w
        want[len(w): len(w) + len(frontier)] = frontier
        assert np.array_equal(slots, want) and n == len(w) + len(frontier)


def test_mask_from_codes_marks_exactly_the_valid_actions() -> None:
    for env in _random_play(4, steps=60):
        s = env.state
        if s.stopped:  # after the end only Stop stays marked (by design, see action_mask)
            continue
        slots = env.slots
        mask = action_mask(s, slots)
        for a in range(len(mask)):
            op, slot = decode_action(a, env.K)
            node = -1 if slot < 0 else int(slots[slot])
            assert mask[a] == (check_operation(s, op, node) is None), (a, op, node)


def test_slot_search_is_cached_per_relevance_and_node() -> None:
    env = _env()
    env.reset(seed=0)
    gi, rel, retriever = env.state.gi, env.rel, env.retrieval.retriever
    node = int(env.slots[0])
    first = _node_search(retriever, gi, rel, node)
    assert _node_search(retriever, gi, rel, node) is first
    query, scores = env.retrieval.search(gi, rel, node, None, False)
    assert query is first.query
    got = scores()
    assert got is scores() and np.array_equal(got, search_page_scores(gi, retriever, query))
    other = env.retrieval.relevance(gi.graph, "a different question entirely")
    assert _node_search(retriever, gi, other, node) is not first


def test_observations_are_fresh_and_question_vectors_shared_read_only() -> None:
    env = _env()
    obs, _ = env.reset(seed=0)
    kept = {k: v.copy() for k, v in obs.items()}
    for k in obs:  # a caller scribbling on what it was handed changes nothing in the env
        obs[k][...] = 0.5
    assert not np.shares_memory(obs["budget"], obs["progress"])
    obs2 = env._observation()
    for k in kept:
        assert np.array_equal(obs2[k], kept[k])
    q = question_features(env.rel)
    assert q is question_features(env.rel) and not q.flags.writeable
    mask = env.action_masks()
    mask[:] = False
    assert env.action_masks().any()
