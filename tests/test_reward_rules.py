"""The reward's small rules with hand-computed values: settings, gold nodes, noise, cost, potential, metrics.

tests/test_reward.py checks the reward through episodes; here each pure
function of :mod:`mage_gym.reward` is pinned on inputs chosen so that a
boundary (page 0, the last node, a cap of 1, an unanswerable question)
decides the answer.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from mage_gym import reward as R
from mage_gym.coverage import cover
from mage_gym.data.gold import GoldEvidence
from mage_gym.readers.base import RenderedInput
from mage_gym.testing import make_toy_graph, toy_episodes


@pytest.fixture()
def graph():
    return make_toy_graph(n_pages=3, elements_per_page=2, dim=16)  # nodes: pages 0-2, elements 3-8


def _gold(items, item_pages, is_page, pages=None, level="element", nodes=None) -> GoldEvidence:
    nodes = sorted({n for it in items for n in it}) if nodes is None else nodes
    return GoldEvidence(items=tuple(tuple(i) for i in items), pages=tuple(pages if pages is not None else
                                                                         sorted(set(item_pages))),
                        item_pages=tuple(item_pages), item_is_page=tuple(is_page), level=level,
                        gold_nodes=np.array(nodes, dtype=np.int32))


def _rendered(graph, node_tokens, total, opened=(), images=(), texts=()) -> RenderedInput:
    return RenderedInput(question="q", xml="", node_ids=tuple(n for n, _ in node_tokens), text_tokens=total,
                         node_tokens=tuple(node_tokens), opened_ids=tuple(opened), page_image_ids=tuple(images),
                         page_text_ids=tuple(texts))


def test_reward_settings_take_aliases_and_name_what_is_unknown() -> None:
    assert R.RewardConfig.coerce({"lambda1": 0.5, "lambda2": 0.25, "token_cap": 9}) == R.RewardConfig(
        lambda_noise=0.5, lambda_cost=0.25, token_cap=9)
    assert R.RewardConfig.coerce(None) == R.RewardConfig()
    cfg = R.RewardConfig(w_ops=0.5)
    assert R.RewardConfig.coerce(cfg) is cfg and cfg.to_dict()["w_ops"] == 0.5 and len(cfg.to_dict()) == 8
    with pytest.raises(TypeError) as err:
        R.RewardConfig.coerce({"lambda_cost": 1.0, "zeta": 1, "alpha": 2})
    valid = "lambda_noise, lambda_cost, token_cap, op_cap, call_cap, w_tokens, w_ops, w_calls"
    assert str(err.value) == f"unknown reward setting(s) ['alpha', 'zeta']; valid: {valid}"
    with pytest.raises(TypeError) as err:
        R.RewardConfig.coerce({"shaping_gamma": 0.9})
    assert str(err.value).endswith(f"valid: {valid} (reward shaping is the PotentialShaping wrapper: gym.make(..., "
                                   "privileged=True, shaping=True), train.shaping in the experiments)")


def test_gold_is_known_only_with_items_and_a_level() -> None:
    assert R.gold_known(_gold([(3,)], [0], [False]))
    assert not R.gold_known(_gold([(3,)], [0], [False], level="none"))
    assert not R.gold_known(_gold([], [], [], level="element"))


def test_gold_node_mask_marks_gold_nodes_gold_pages_and_every_node_of_page_level_gold(graph) -> None:
    # element gold on page 0 (node 0 is page 0, node 3 its first element) and page-level gold on page 2
    g = _gold([(3,), (2,)], [0, 2], [False, True], nodes=[-1, 0, 3, 2, graph.n_nodes])
    mask = R.gold_node_mask(graph, g)
    want = np.zeros(graph.n_nodes, dtype=bool)
    want[[0, 3, 2]] = True
    want[graph.n_pages:][graph.node_page[graph.n_pages:] == 2] = True  # page-level gold: its elements too
    assert mask.tolist() == want.tolist() and not mask[1] and not mask[graph.n_pages + 2]
    out_of_range = _gold([(4,)], [0], [False], pages=[0, graph.n_pages], nodes=[4])
    assert R.gold_node_mask(graph, out_of_range).nonzero()[0].tolist() == [0, 4]  # page 3 does not exist
    page_node_only = _gold([(0,)], [1], [False], pages=[1], nodes=[0])  # node 0 (page 0) listed as a gold node
    assert R.gold_node_mask(graph, page_node_only).nonzero()[0].tolist() == [0, 1]
    page_level_edges = _gold([(0,), (2,)], [0, graph.n_pages], [True, True], pages=[], nodes=[])
    assert R.gold_node_mask(graph, page_level_edges).nonzero()[0].tolist() == [0, 3, 4]  # page 0 and its elements
    page_only_past_end = _gold([(0,)], [graph.n_pages], [True], pages=[], nodes=[])
    assert not R.gold_node_mask(graph, page_only_past_end).any()
    assert not R.gold_node_mask(graph, _gold([(3,)], [0], [False], level="none")).any()


def test_noise_is_the_share_of_non_gold_tokens(graph) -> None:
    g = _gold([(3,)], [0], [False])  # gold: element 3 and page 0
    ids = graph.node_ids
    r = _rendered(graph, [(ids[3], 30), (ids[4], 50), (ids[1], 20)], total=120)
    assert R.noise(graph, g, r) == pytest.approx(70 / 120)
    one = _rendered(graph, [(ids[4], 1)], total=1)  # a single token, not gold: all noise
    assert R.noise(graph, g, one) == 1.0
    assert R.noise(graph, g, _rendered(graph, [], total=0)) == 0.0
    assert R.noise(graph, _gold([(3,)], [0], [False], level="none"), r) == 0.0


def test_cost_parts_are_clipped_shares_of_their_caps() -> None:
    cfg = R.RewardConfig(token_cap=1)
    total, parts = R.cost(1, 1, 1, cfg, op_cap=1, call_cap=1)  # caps of 1: each part is exactly 1
    assert parts == {"cost_tokens": 1.0, "cost_operations": 1.0, "cost_calls": 1.0} and total == pytest.approx(1.0)
    total, parts = R.cost(5, 9, 3, R.RewardConfig(token_cap=10, w_tokens=0.2, w_ops=0.3, w_calls=0.5), 3, 6)
    assert parts == {"cost_tokens": 0.5, "cost_operations": 1.0, "cost_calls": 0.5}
    assert total == pytest.approx(0.2 * 0.5 + 0.3 * 1.0 + 0.5 * 0.5)
    assert R.cost(99, 99, 99, R.RewardConfig(token_cap=10), 10, 10)[1] == {"cost_tokens": 1.0,
                                                                             "cost_operations": 1.0, "cost_calls": 1.0}
    total, parts = R.cost(0, 0, 0, R.RewardConfig(token_cap=0), 0, 0)  # a zero cap divides by 1, never by 0
    assert total == 0.0 and set(parts.values()) == {0.0}


def test_potential_is_the_coverage_the_state_would_give(graph) -> None:
    g = _gold([(3,), (5,)], [0, 1], [False, False])
    state = np.zeros(graph.n_nodes, dtype=np.int8)
    state[3] = 2  # element 3 opened
    args = (state, graph.node_page, graph.n_pages)
    assert R.potential(g, *args, visual=True, answerable=True) == 0.5
    assert R.potential(g, *args, visual=True, answerable=False) == 0.0
    assert R.potential(replace(g, level="none"), *args, visual=True, answerable=True) == 0.0
    state[1] = 1  # page 1 activated: its image covers element 5 in visual mode, not in text mode
    assert R.potential(g, *args, visual=True, answerable=True) == 1.0
    whole = np.zeros(graph.n_pages, dtype=bool)
    assert R.potential(g, *args, visual=False, answerable=True, whole_text=whole) == 0.5
    whole[1] = True  # ... unless the page's whole text is sent
    assert R.potential(g, *args, visual=False, answerable=True, whole_text=whole) == 1.0
    assert R.potential(g, np.zeros(graph.n_nodes, dtype=np.int8), graph.node_page, graph.n_pages, visual=True,
                       answerable=True) == 0.0


def test_episode_metrics_by_hand(graph) -> None:
    ids = graph.node_ids
    g = _gold([(3,), (5,), (2,)], [0, 1, 2], [False, False, True])  # two element items and page 2
    r = _rendered(graph, [(ids[0], 10), (ids[3], 10), (ids[4], 10), (ids[2], 10)], total=50,
                  opened=(ids[3], ids[4]), images=(ids[2],))
    opened, pages = R.rendered_masks(graph, r)
    assert opened.dtype == bool and pages.dtype == bool and opened.nonzero()[0].tolist() == [3, 4]
    assert pages.tolist() == [False, False, True]
    covered = cover(g, opened, pages, graph.node_page)
    m = R.episode_metrics(graph, g, r, covered)
    assert m == R.episode_metrics(graph, g, r, covered, opened=opened, is_gold=R.gold_node_mask(graph, g))
    assert m["gold_known"] is True and m["element_recall"] == 0.5 and m["element_precision"] == 0.5
    assert m["item_support"] == 0.5 and m["gold_pages_by_any_element"] == 0
    one = _rendered(graph, [(ids[3], 10)], total=10, opened=(ids[3],))
    assert R.episode_metrics(graph, g, one, covered)["element_precision"] == 1.0
    edge = _gold([(3, graph.n_nodes)], [0], [False])  # a node index past the end is ignored, not read
    assert R.episode_metrics(graph, edge, one, covered)["element_recall"] == 1.0
    assert (m["pages_rendered"], m["elements_rendered"], m["images_rendered"], m["tokens_rendered"]) == (2, 2, 0, 50)
    assert m["evidence_page_recall"] == pytest.approx(2 / 3) and m["evidence_all_covered"] is False
    none = R.episode_metrics(graph, replace(g, level="none"), r, covered)
    assert none["gold_known"] is False and none["evidence_page_recall"] is None
    assert none["evidence_all_covered"] is None and none["element_recall"] is None
    assert none["item_support"] is None and none["gold_pages_by_any_element"] is None  # not 0: no gold to count
    assert none["element_precision"] is None and none["item_support"] is None
    pages_only = R.episode_metrics(graph, g, _rendered(graph, [(ids[2], 10)], total=10, images=(ids[2],)), covered)
    assert pages_only["element_precision"] is None and pages_only["element_recall"] == 0.0


@pytest.mark.parametrize("benchmark, pred, gold, fmt, want", [
    ("financebench", "$1,234 million", "1234", "Str", None),
    ("mmlongbench", "1234", "1234", "Int", 1.0),
    ("longdocurl", "1234", "1234", "Integer", 1.0),
    ("unknown-bench", "1234", "1234", "Int", 1.0),
    # pairs the benchmarks' rules score apart: the episode's own benchmark and format decide
    ("longdocurl", "12 kg", "12", "Int", 1.0), ("mmlongbench", "12 kg", "12", "Int", 0.0),
    ("synth", "12 kg", "12", "Int", 0.0), ("longdocurl", "3.0", "3", "Int", 0.0),
    ("mmlongbench", "1.50", "1.5", "Float", 1.0), ("financebench", "about 12", "12", "Int", 1.0),
])
def test_answer_support_scores_with_the_episodes_benchmark(benchmark, pred, gold, fmt, want) -> None:
    from mage_gym.scoring import score

    ep = replace(toy_episodes()[0].episode, benchmark=benchmark, answer=gold, answer_format=fmt)
    bench = benchmark if benchmark in ("mmlongbench", "longdocurl", "financebench", "synth") else "mmlongbench"
    got = R.answer_support(ep, pred)
    assert got == float(score(pred, gold, fmt, bench)) and isinstance(got, float)
    if want is not None:
        assert got == want
