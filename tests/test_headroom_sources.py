"""The oracle's headroom by source: each oracle on toy episodes, the elements render mode, topk_elements."""
from __future__ import annotations

import numpy as np
import pytest

from mage_gym.bench.headroom_sources import (
    aggregate_sources, element_recall, gold_elements, measure_sources, played_figures, report_sources, sources_for_env)
from mage_gym.env import MageRAGEnv
from mage_gym.testing import hash_query_fn, toy_episodes
from mage_gym.render import render, whole_text_pages
from mage_gym.testing import make_toy_graph
from policies import get_policy
from mage_gym.bench.play import run_episode

QF = hash_query_fn(16)
IDS = ("elem", "page", "region")


def _env(k: int = 2, **kw) -> MageRAGEnv:
    return MageRAGEnv(episodes=toy_episodes(), query_fn=QF, K=48, privileged=True, budget={"k": k}, **kw)


def _figures(env: MageRAGEnv, episode_id: str, k: int, kmax: int = 6, depths=(3, 6)):
    env.reset(seed=0, options={"episode_id": episode_id})
    ep = env.get_wrapper_attr("public_episode")

    class _Ep:  # the fields sources_for_env reads of an Episode
        episode_id = ep["episode_id"]
        page_window = None
        split = "test"

    return sources_for_env(env, _Ep(), k, kmax, depths)


@pytest.mark.parametrize("episode_id", IDS)
def test_topk_curve_is_what_topk_page_scores_through_the_env(episode_id: str) -> None:
    for k in (1, 3):
        env = _env(k)
        fig = _figures(env, episode_id, k)
        played = run_episode(env, get_policy("topk_page"), episode_id, seed=0).metrics
        assert fig.sources["topk_page"] == pytest.approx(played_figures(played))
        assert fig.curve_recall[k] == pytest.approx(played["evidence_page_recall"])
        assert fig.curve_tokens[k] == played["tokens_rendered"] and fig.curve_pages[k] == k


@pytest.mark.parametrize("episode_id", IDS)
def test_each_oracle_changes_one_thing_against_topk(episode_id: str) -> None:
    k = 2
    fig = _figures(_env(k), episode_id, k)
    curve = fig.curve_recall
    assert curve[0] == 0.0 and all(a <= b + 1e-12 for a, b in zip(curve, curve[1:])), "recall grows with k"
    assert all(a < b for a, b in zip(fig.curve_tokens, fig.curve_tokens[1:])), "tokens grow with k"
    top = fig.sources["topk_page"]
    for n in (3, 6):
        rr = fig.sources[f"rerank@{n}"]
        assert rr["pages"] == k and rr["recall"] >= top["recall"] - 1e-12
        assert rr["recall"] == pytest.approx(min(1.0, max(top["recall"], curve[n])) if curve[n] < 1 else 1.0) or \
            rr["recall"] >= curve[min(n, k)]
        stop = fig.sources[f"rerank_stop@{n}"]
        assert stop["recall"] == pytest.approx(curve[n]), "exactly the gold of the top N"
        assert stop["pages"] <= n
    # granularity: same pages, the same gold reached, through elements only (no page image)
    assert fig.sources["granularity"]["recall"] == pytest.approx(top["recall"])
    for cap in (2, 3, 6):
        a = fig.sources[f"adaptive_stop@{cap}"]
        assert a["recall"] == pytest.approx(curve[cap]) and 1 <= a["pages"] <= cap
        assert a["tokens"] <= fig.curve_tokens[cap]


def test_gold_elements_open_regions_and_whole_pages_of_page_level_gold() -> None:
    env = _env(1)
    env.reset(seed=0, options={"episode_id": "page"})
    graph, view = env.get_wrapper_attr("graph"), env.get_wrapper_attr("privileged_view")()
    page = int(view.pages[0])
    assert gold_elements(graph, view, [page]) == sorted(graph.element_indices_of_page(page))
    assert gold_elements(graph, view, [p for p in range(graph.n_pages) if p != page]) == []
    env.reset(seed=0, options={"episode_id": "region"})
    view = env.get_wrapper_attr("privileged_view")()
    got = gold_elements(graph, view, list(view.pages))
    want = {int(n) for item, is_page in zip(view.items, view.item_is_page) if not is_page for n in item}
    assert got and set(got) == want


def test_element_recall_counts_element_gold_only_and_grows_with_m() -> None:
    env = _env(2)
    env.reset(seed=0, options={"episode_id": "region"})
    graph, view = env.get_wrapper_attr("graph"), env.get_wrapper_attr("privileged_view")()
    order = np.asarray(env.get_wrapper_attr("rel").order)
    got = element_recall(graph, view, order, [int(view.pages[0])], None, at=(1, 5, 40))
    assert got["element_recall@1"] <= got["element_recall@5"] <= got["element_recall@40"] == 1.0
    assert got["entry_element_recall@40"] == 1.0, "the gold page is an entry page here"
    assert element_recall(graph, view, order, [], None, at=(5,))["entry_element_recall@5"] == 0.0
    env.reset(seed=0, options={"episode_id": "page"})
    assert element_recall(graph, env.get_wrapper_attr("privileged_view")(), order, [0], None) == {}


def test_aggregate_compares_every_source_with_the_curve_at_equal_tokens() -> None:
    env = _env(2)
    rows = [_figures(env, e, 2) for e in IDS]
    extra = {"nothing": {r.episode_id: {"recall": 0.0, "tokens": r.curve_tokens[0], "pages": 0} for r in rows}}
    agg = aggregate_sources(rows, extra, n_boot=200)
    assert agg["questions"] == 3 and agg["curve_ks"] == 6
    d = agg["sources"]["topk_page"]["delta_recall_at_equal_tokens"]
    assert d["mean"] == pytest.approx(0.0, abs=1e-9), "topk_page against its own curve"
    assert agg["sources"]["nothing"]["delta_recall_at_equal_tokens"]["mean"] == pytest.approx(0.0, abs=1e-9)
    assert agg["element_gold_questions"] >= 1 and "element_recall@5" in agg["element_recall"]
    rep = report_sources(rows, extra, n_boot=200)
    assert set(rep) >= {"all", "test", "element_gold"} and rep["test"]["questions"] == 3


def test_measure_sources_needs_gold_pages() -> None:
    g = make_toy_graph(n_pages=4, dim=16)

    class _NoGold:
        pages, items, item_pages, item_is_page, level = (), (), (), (), "none"

    assert measure_sources(g, _NoGold(), "q", [0, 1, 2, 3], np.arange(g.n_nodes), None, None, 2, 4) is None


# --- the elements render mode and topk_elements --------------------------------------------------------------


def test_elements_mode_never_sends_a_page_whole() -> None:
    g = make_toy_graph(n_pages=3, dim=16)
    st = np.zeros(g.n_nodes, dtype=np.int8)
    st[0] = 1  # page 0 activated
    figure = next(g.n_pages + j for j, e in enumerate(g.elements) if e.type in ("figure", "chart", "table"))
    st[g.node_page[figure]] = 1
    st[figure] = 2  # opened
    vis, el = render(g, st, "visual"), render(g, st, "elements")
    assert vis.page_image_ids and not el.page_image_ids and not el.page_text_ids
    assert [im.kind for im in el.images] == ["crop"], "opened visual elements keep their crop"
    assert el.tokens < vis.tokens and "<summary>" in el.xml
    assert not whole_text_pages(g, None, "elements").any() and whole_text_pages(g, None, "text").any()


def test_topk_elements_opens_the_best_elements_of_the_entry_pages_only() -> None:
    env = MageRAGEnv(episodes=toy_episodes(), query_fn=QF, K=48, budget={"k": 2}, render_mode="elements")
    policy = get_policy("topk_elements", n_open=3)
    r = run_episode(env, policy, "page", seed=0)
    assert r.invalid == 0 and r.metrics["opens"] == 3 and r.metrics["images_rendered"] <= 3
    state = env.get_wrapper_attr("state")
    entry = set(env.get_wrapper_attr("rel").page_order[:2].tolist())
    opened = np.flatnonzero(state.node_state == 2)
    assert len(opened) == 3 and {int(state.gi.node_page[n]) for n in opened} <= entry
    assert {int(p) for p in np.flatnonzero(state.node_state[: state.gi.n_pages] == 1)} == entry, "no page added"
    assert get_policy("topk_elements", n_open=0).render_mode == "elements"
    with pytest.raises(ValueError):
        get_policy("topk_elements", n_open=-1)


def test_oracle_reaches_in_the_elements_mode_what_it_reaches_with_page_images() -> None:
    for episode_id in IDS:
        got = {}
        for mode in ("visual", "elements"):
            env = _env(2, render_mode=mode)
            got[mode] = run_episode(env, get_policy("oracle", env=env), episode_id, seed=0).metrics
        assert got["elements"]["evidence_page_recall"] == pytest.approx(got["visual"]["evidence_page_recall"])
        assert got["elements"]["opens"] >= 1 and got["elements"]["images_rendered"] <= got["elements"]["opens"]
