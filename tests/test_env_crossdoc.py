"""Cross-document episodes: one env over the union of several documents' graphs."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
from gymnasium.utils.env_checker import check_env

from mage_gym.env import MageRAGEnv
from mage_gym.testing import hash_query_fn
from mage_gym.env.episodes import EnvEpisode
from mage_gym.env.observation import NUMERIC_KEYS
from mage_gym.graph.union import UnionGraph
from mage_gym.testing import toy_crossdoc
from policies import get_policy
from mage_gym.bench.play import run_episode

QF = hash_query_fn(16)


def crossdoc(pa: int = 4, pb: int = 2) -> EnvEpisode:
    return toy_crossdoc(pa, pb)


def make_env(pair: EnvEpisode | None = None, **kw) -> MageRAGEnv:
    return MageRAGEnv(episodes=[pair or crossdoc()], query_fn=QF, K=16, **kw)


def test_crossdoc_env_passes_check_env_with_todays_observation_space():
    env = make_env()
    assert env.observation_keys == NUMERIC_KEYS  # one question: no conversation keys
    check_env(env, skip_render_check=True)


def test_graph_is_the_union_and_entry_pages_span_documents():
    env = make_env(budget={"k": 6, "m": 2, "M": 4, "T": 2, "B": 2})
    env.reset(seed=0)
    g = env.graph
    assert isinstance(g, UnionGraph) and g.n_pages == 6 + 5
    assert g.doc_ids == ("A", "B")
    docs = {int(g.doc_of_page[p]) for p in env.state.working if p < g.n_pages}
    assert docs == {0, 1}, "entry retrieval ranks the pages of both documents together"


def test_gold_maps_onto_each_documents_nodes_and_per_document_recall_is_reported():
    env = make_env(privileged=True)
    env.reset(seed=0)
    assert set(env.privileged_view().gold_node_ids) == {"A:p4:e2", "B:p2:e2"}
    _, _, term, _, info = env.step(0)
    assert term
    per_doc = info["metrics"]["per_document_recall"]
    assert set(per_doc) == {"A", "B"}
    working_pages = {env.graph.node_ids[v] for v in env.state.working}
    assert per_doc["A"] == float("A:p4" in working_pages) and per_doc["B"] == float("B:p2" in working_pages)


def test_text_view_names_documents_and_local_pages():
    """Every page and candidate is shown with its own document and its page number there (1-based), not the union's."""
    import re

    env = make_env(budget={"k": 6, "m": 2, "M": 4, "T": 2, "B": 2})
    env.reset(seed=0)
    view, g = env.text_view(), env.graph
    pages = [p for p in env.state.working if p < g.n_pages]
    assert {int(g.doc_of_page[p]) for p in pages} == {0, 1}
    for p in pages:
        doc, local = g.doc_ids[int(g.doc_of_page[p])], int(g.local_page(p))
        assert f'<page id="{doc}:p{local}" number="{local + 1}" doc="{doc}"' in view, (p, doc, local)
    shown = re.findall(r'<candidate n="\d+" id="(\w+):p(\d+):e\d+" type="\w+" page="(\d+)" doc="(\w+)"', view)
    assert shown and any(d == "B" for _, _, _, d in shown)
    assert all(doc == d and int(num) == int(local) + 1 for doc, local, num, d in shown)


def test_no_gold_reaches_a_policy_in_a_crossdoc_episode():
    a, b = crossdoc(4, 2), crossdoc(1, 3)
    b = EnvEpisode(replace(b.episode, turns=(replace(b.episode.turns[0], answer="B"),)), b.graph)
    seen = []
    for pair in (a, b):
        env = make_env(pair)
        obs, info = env.reset(seed=1)
        trail = [(obs, env.action_masks(), env.text_view(), info)]
        for _ in range(6):
            mask = env.action_masks()
            valid = np.flatnonzero(mask[1:])
            if not len(valid):
                break
            obs, _, term, trunc, info = env.step(int(valid[0]) + 1)
            if term or trunc:
                break
            trail.append((obs, env.action_masks(), env.text_view(), info))
        seen.append(trail)
    assert len(seen[0]) == len(seen[1]) > 1
    for (oa, ma, va, ia), (ob, mb, vb, ib) in zip(*seen):
        assert all(np.array_equal(oa[k], ob[k]) for k in oa)
        assert np.array_equal(ma, mb) and va == vb and ia == ib
