"""Question-aware observation columns: cue parsing, printed page labels, best element per page, linker
relevance and distance to the nearest active page (each checked against a brute-force definition)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from mage_gym.env import NODE_FEATURES, MageRAGEnv
from mage_gym.testing import hash_query_fn, toy_episodes
from mage_gym.env.graph_index import build_graph_index
from mage_gym.env.observation import active_page_distance
from mage_gym.env.question_cues import best_element_on_page, cued_types, page_mentions, question_columns
from mage_gym.env.state import ACTIVATED, OPENED
from mage_gym.testing import make_toy_graph

COL = {n: i for i, n in enumerate(NODE_FEATURES)}


@pytest.mark.parametrize("question, types", [
    ("Which chart shows revenue growth?", {"chart", "figure"}),
    ("What does the photo on the cover show?", {"figure", "chart"}),
    ("In Table 3, what is the total?", {"table"}),
    ("How many employees are in Europe?", {"list", "table"}),
    ("What is the paragraph about graphene?", set()),  # no word-internal matches ("paragraph", "graphene")
])
def test_cued_types(question: str, types: set[str]) -> None:
    assert cued_types(question) == frozenset(types)


def test_page_mentions() -> None:
    assert page_mentions("What is on page 12?") == ("12",)
    assert page_mentions("Compare pages 3-5 with p. 09 and slide 7") == ("3", "4", "5", "9", "7")
    assert page_mentions("pages 3 to 40") == ("3", "40")  # a wide range names its ends only
    assert page_mentions("What was the 2019 revenue?") == ()


def _labelled_graph():
    g = make_toy_graph(n_pages=6, elements_per_page=4)
    # printed labels start at 10: PDF index 2 prints "12"; page 5 prints nothing
    g.pages[:] = [replace(p, footer_text=f"Annual report | {p.index + 10}" if p.index < 5 else "")
                  for p in g.pages]
    return g


def test_question_columns_match_their_definitions() -> None:
    g = _labelled_graph()
    gi = build_graph_index(g)
    fused = np.random.default_rng(0).random(gi.n_nodes).astype(np.float32)
    cols = question_columns(gi, "What does the chart on page 12 show?", fused)
    types = [gi.node_type(i) for i in range(gi.n_nodes)]
    for i in range(gi.n_nodes):
        page = int(gi.node_page[i])
        on_page = list(gi.elements_of(page))
        assert cols[i, 0] == pytest.approx(max((fused[e] for e in on_page), default=0.0))
        want_type = any(types[e] in ("chart", "figure") for e in on_page) if i < gi.n_pages \
            else types[i] in ("chart", "figure")
        assert cols[i, 1] == float(want_type)
        assert cols[i, 2] == float(page == 2)  # the printed label, not PDF index 12 (there is none) nor 11
    none = question_columns(gi, "What is the margin on page 5?", fused)  # "5" is printed nowhere
    assert not none[:, 1:].any()


def test_best_element_on_page_with_empty_pages() -> None:
    g = make_toy_graph(n_pages=4, elements_per_page=3)
    gi = build_graph_index(g)
    fused = np.linspace(0, 1, gi.n_nodes, dtype=np.float32)
    best = best_element_on_page(gi, fused)
    assert best.tolist() == pytest.approx([max(fused[e] for e in gi.elements_of(p)) for p in range(gi.n_pages)])
    # a graph index whose page 1 holds no element: 0 there, other pages unchanged
    lo, hi = gi.page_lo.copy(), gi.page_hi.copy()
    hi[1] = lo[1]
    lo[2] = hi[1]  # page 2 takes page 1's elements: segments stay contiguous
    gi2 = replace(gi, page_lo=lo, page_hi=hi)
    best2 = best_element_on_page(gi2, fused)
    assert best2[1] == 0.0 and best2[2] == pytest.approx(fused[lo[2]:hi[2]].max())


def test_dynamic_columns_follow_the_state() -> None:
    """linker_rel and active_page_distance equal their definitions after every step of random play."""
    eps = toy_episodes(n_pages=8, elements_per_page=5)
    env = MageRAGEnv(episodes=eps, query_fn=hash_query_fn(16), K=16, budget={"k": 2, "m": 3, "M": 8, "T": 3, "B": 3})
    rng = np.random.default_rng(1)
    checked = 0
    for ep in range(6):
        obs, _ = env.reset(seed=ep)
        done = False
        while not done:
            st, gi = env.state, env.gi
            st.check_invariants()  # includes the incremental linker column
            assert env.observation_space.contains(obs)
            n = int(obs["slot_mask"].sum())
            slots = env.slots[:n]
            working = set(st.working)
            active_pages = [p for p in range(gi.n_pages) if st.node_state[p] == ACTIVATED]
            for row, node in enumerate(slots.tolist()):
                nb = gi.nbr[gi.nbr_ptr[node]: gi.nbr_ptr[node + 1]].tolist()
                linkers = [1 - st.rank_of[u] / gi.n_nodes for u in nb if st.node_state[u] in (ACTIVATED, OPENED)]
                assert obs["nodes"][row, COL["linker_rel"]] == pytest.approx(max(linkers, default=0.0), abs=1e-6)
                assert bool(linkers) == any(u in working for u in nb)
                page = int(gi.node_page[node])
                if active_pages:
                    d = min(abs(page - a) for a in active_pages)
                    want = np.log1p(d) / np.log1p(gi.n_pages - 1)
                else:
                    want = 1.0
                assert obs["nodes"][row, COL["active_page_distance"]] == pytest.approx(want, abs=1e-6)
                checked += 1
            mask = env.action_masks()
            obs, _, term, trunc, _ = env.step(int(rng.choice(np.flatnonzero(mask))))
            done = term or trunc
    assert checked > 100


def test_distance_is_one_without_active_pages() -> None:
    eps = toy_episodes()
    env = MageRAGEnv(episodes=eps, query_fn=hash_query_fn(16), K=8, budget={"k": 0})
    env.reset(seed=0)
    assert not env.state.working
    assert active_page_distance(env.state, np.arange(5)).tolist() == [1.0] * 5
