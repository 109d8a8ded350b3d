"""Slot-limited reach: which missed gold pages the env's K slots show after <= 1 and <= 2 activations.

The chain graph below is built so every answer is known by construction:
six pages in reading order, one element on each, and one ``reference`` edge
from page 0's element to page 5's element. Entry page 0; relevance order =
node index (pages first), so the frontier order is fixed too.
"""
from __future__ import annotations

import numpy as np
import pytest

from mage_gym.bench.headroom import (ANY, SlotReach, aggregate_slot_reach, measure_episode, slot_activations,
                                         slot_reach)
from mage_gym.env import MageRAGEnv
from mage_gym.testing import hash_query_fn, toy_episodes
from mage_gym.env.actions import Op
from mage_gym.env.budget import Budget
from mage_gym.env.candidates import fill_slots
from mage_gym.env.graph_index import graph_index
from mage_gym.env.state import EvidenceState
from mage_gym.graph.graph import EvidenceGraph
from mage_gym.graph.schema import EDGE_KINDS, DocumentSource, Element, Page, element_id, page_id

N_PAGES = 6


def chain_graph() -> EvidenceGraph:
    """p0 - p1 - ... - p5 by reading order; e_i on p_i (containment); e0 -> e5 by reference."""
    doc = "chain"
    pages = [Page(node_id=page_id(doc, p), index=p, width=612.0, height=792.0, text=f"page {p}",
                  summary=f"page {p}", n_elements=1) for p in range(N_PAGES)]
    elements = [Element(node_id=element_id(doc, p, 0), page=p, index=0, type="paragraph", bbox=(0.1, 0.1, 0.9, 0.2),
                        text=f"item {p}", summary=f"item {p}", reading_order=p, section_path=())
                for p in range(N_PAGES)]
    edges = [(p, N_PAGES + p, "containment") for p in range(N_PAGES)]
    edges += [(p, p + 1, "reading_order") for p in range(N_PAGES - 1)]
    edges += [(N_PAGES + 0, N_PAGES + 5, "reference")]
    rng = np.random.default_rng(0)
    return EvidenceGraph(
        doc_id=doc, source=DocumentSource(kind="pdf", path="<chain>"), pages=pages, elements=elements,
        edge_src=np.asarray([e[0] for e in edges], dtype=np.int32),
        edge_dst=np.asarray([e[1] for e in edges], dtype=np.int32),
        edge_kind=np.asarray([EDGE_KINDS.index(e[2]) for e in edges], dtype=np.int8),
        edge_weight=np.ones(len(edges), dtype=np.float32), edge_label=[""] * len(edges),
        page_vectors=rng.normal(size=(N_PAGES, 8)).astype(np.float32),
        element_vectors=rng.normal(size=(N_PAGES, 8)).astype(np.float32),
        meta={"parser": "test", "version": "test"},
    )


def reset_state(budget: Budget | None = None) -> tuple[EvidenceState, np.ndarray]:
    """The state right after a reset with entry page 0 (as MageRAGEnv.reset does it) and the relevance order."""
    gi = graph_index(chain_graph())
    order = np.arange(gi.n_nodes, dtype=np.intp)
    state = EvidenceState.new(gi, budget or Budget(k=1), order.copy())
    state.activate(0)
    state.counters.free_acts += 1
    return state, order


def test_reach_levels_and_relations_known_by_construction() -> None:
    state, order = reset_state()
    r = slot_reach(state, order, K=64, missed_pages=[2, 3, 5], width=None, max_pairs=None)
    # p2: activate p1, then reading order shows it; p5: activate e0, then its reference shows e5;
    # p3: two reading-order steps (p1, p2). Nothing is in the slots at reset but p1 and e0.
    assert r.first == {2: 1, 5: 1, 3: 2}
    assert r.kinds == {2: {"reading_order"}, 5: {"reference"}, 3: {"reading_order"}}
    assert [r.reached(lv) for lv in (0, 1, 2)] == [0, 2, 3]
    assert r.reached(1, "reference") == 1 and r.reached(2, "reading_order") == 2 and r.reached(2, "semantic") == 0
    # frontier order at level 1: [p2, e0, e1] after p1 (p2 first), [p1, e5] after e0 (e5 second)
    assert r.rank == {2: 0, 5: 1, 3: 0}
    # chance: of the five non-entry pages, the slots show p1 at reset, p2 and p5 after one activation,
    # p3 and p4 (via p5) after two
    assert r.n_other == 5
    assert [r.covered(lv) for lv in (0, 1, 2)] == [1, 3, 5]
    assert r.covered(1, "reference") == 1 and r.covered(0, "reading_order") == 1


def test_the_k_cut_limits_reach_below_graph_reach() -> None:
    """With K=3 the working set crowds the frontier out: e5 ranks behind p1, and two activations fill the slots."""
    state, order = reset_state()
    r = slot_reach(state, order, K=3, missed_pages=[2, 3, 5], width=None, max_pairs=None)
    assert r.first == {2: 1}
    assert [r.reached(lv) for lv in (0, 1, 2)] == [0, 1, 1]


def test_caps_bound_the_two_step_search_and_are_recorded() -> None:
    state, order = reset_state()
    full = slot_reach(state, order, K=64, missed_pages=[3], width=None, max_pairs=None)
    assert full.reached(2) == 1 and not full.capped
    # width 1: only the first slot of each one-step state (the entry page: no valid activation) is tried
    narrow = slot_reach(state, order, K=64, missed_pages=[3], width=1, max_pairs=None)
    assert narrow.reached(2) == 0 and narrow.states[2] == 0 and narrow.width == 1
    none = slot_reach(state, order, K=64, missed_pages=[3], width=None, max_pairs=0)
    assert none.capped and none.states[2] == 0 and none.reached(2) == 0
    agg = aggregate_slot_reach([none])
    assert agg["slot_search"]["capped_episodes"] == 1 and agg["slot_search"]["max_pairs"] == 0


def test_the_state_is_left_unchanged_and_moves_follow_the_mask() -> None:
    state, order = reset_state(Budget(k=1, m=1, M=24, T=6, B=16))
    before = (state.node_state.copy(), list(state.working), state.counters.copy())
    slots, n = fill_slots(state, order, 64)
    moves = slot_activations(state, slots, n)
    # p0 is active (no ActivatePage on it or on e0's page); e0 can be activated, p1 too
    assert sorted((int(op), v) for op, v in moves) == sorted([(int(Op.ACTIVATE_PAGE), 1), (int(Op.ACTIVATE_NODE), 6)])
    r = slot_reach(state, order, K=64, missed_pages=[2, 3, 5], width=None, max_pairs=None)
    # m=1: the first activation closes the round, the next round allows the second one, as in the env
    assert r.first == {2: 1, 5: 1, 3: 2}
    assert np.array_equal(state.node_state, before[0]) and state.working == before[1]
    assert state.counters == before[2]
    state.check_invariants()


def test_aggregate_shares_and_chance() -> None:
    state, order = reset_state()
    r = slot_reach(state, order, K=64, missed_pages=[2, 3, 5], width=None, max_pairs=None)
    agg = aggregate_slot_reach([r])
    assert agg["slot_reach_0"][ANY] == 0.0
    assert agg["slot_reach_1"][ANY] == pytest.approx(2 / 3) and agg["slot_reach_1"]["reference"] == pytest.approx(1 / 3)
    assert agg["slot_reach_2"][ANY] == pytest.approx(1.0)
    assert agg["slot_reach_2"]["reading_order"] == pytest.approx(2 / 3)
    assert [agg[f"slot_chance_{lv}"][ANY] for lv in (0, 1, 2)] == pytest.approx([0.2, 0.6, 1.0])
    assert agg["slot_frontier_rank_0"] is None and agg["slot_frontier_rank_2"]["n"] == 3
    assert agg["slot_frontier_rank_1"] == {"median": 0.5, "mean": 0.5, "n": 2}  # p2 at rank 0, p5 at rank 1
    assert set(aggregate_slot_reach([r], ["reference"])["slot_reach_2"]) == {"reference", ANY}
    assert agg["slot_gold_share"]["0"] == 0.0  # at reset the frontier is p1 and e0: no missed gold
    assert 0.0 < agg["slot_gold_share"]["1"] <= 1.0


def test_slot_reach_on_toy_episodes_agrees_with_the_reset_slots() -> None:
    """Level 0 of the slot search is exactly the existing 'missed gold in the slots at reset' figure."""
    env = MageRAGEnv(episodes=toy_episodes(), query_fn=hash_query_fn(16), K=16, privileged=True, budget={"k": 1})
    kinds = ["reading_order", "layout", "section", "semantic"]
    rows = [h for h in (measure_episode(env, e, 0, 1, kinds, slot_width=8, slot_max_pairs=200)
                        for e in ("elem", "page", "region")) if h is not None]
    assert rows
    for h in rows:
        s = h.slot
        assert isinstance(s, SlotReach) and s.missed == h.missed
        assert s.reached(0) == h.in_slots
        assert s.reached(0) <= s.reached(1) <= s.reached(2) <= s.missed
        for lv in (0, 1, 2):
            assert all(s.reached(lv, k) <= s.reached(lv) for k in EDGE_KINDS)
            assert s.covered(lv) <= s.n_other
        assert sorted(s.ranks(0)) == sorted(h.frontier_ranks)
