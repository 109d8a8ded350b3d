"""Reward parts: oracle support, noise, cost, the total, shaping, answering readers."""
from __future__ import annotations

import numpy as np
import pytest

from mage_gym import reward as R
from mage_gym.coverage import cover
from mage_gym.data.gold import GoldEvidence
from mage_gym.env import MageRAGEnv, Op, encode_action
from mage_gym.testing import hash_query_fn, toy_episodes
from mage_gym.readers.base import ReaderOutput
from mage_gym.render import render
from mage_gym.testing import make_toy_graph

QF = hash_query_fn(16)


@pytest.fixture()
def graph():
    return make_toy_graph(n_pages=4, elements_per_page=4, dim=16)


def gold(graph, element_ids=(), pages=()):
    items, item_pages, is_page = [], [], []
    for nid in element_ids:
        items.append((graph.index_of[nid],)), item_pages.append(graph.page_of(nid)), is_page.append(False)
    for p in pages:
        items.append((p,)), item_pages.append(p), is_page.append(True)
    nodes = np.array(sorted({n for it in items for n in it}), dtype=np.int32)
    return GoldEvidence(items=tuple(items), pages=tuple(sorted(set(item_pages))), item_pages=tuple(item_pages),
                        item_is_page=tuple(is_page), level="element" if element_ids else "page", gold_nodes=nodes)


def masks(graph, opened=(), page_images=()):
    o = np.zeros(graph.n_nodes, dtype=bool)
    o[[graph.index_of[n] for n in opened]] = True
    p = np.zeros(graph.n_pages, dtype=bool)
    p[list(page_images)] = True
    return o, p


def test_support_is_the_covered_share_of_gold_items(graph):
    """The rule itself is pinned in tests/test_coverage.py; here: support is its item share, 1 / 0 without gold."""
    ep = toy_episodes()[0].episode
    g = gold(graph, element_ids=("toy:p1:e2", "toy:p2:e1"))
    covered = cover(g, *masks(graph, opened=("toy:p1:e2",)), graph.node_page)
    assert covered.items.tolist() == [True, False] and R.oracle_support(ep, covered) == 0.5
    covered = cover(g, *masks(graph, opened=("toy:p1:e2",), page_images=(2,)), graph.node_page)
    assert R.oracle_support(ep, covered) == 1.0  # the page image covers element gold in visual mode
    from dataclasses import replace

    none = cover(GoldEvidence(), *masks(graph), graph.node_page)
    assert R.oracle_support(replace(ep, answerable=False), none) == 1.0
    assert R.oracle_support(ep, none) == 0.0  # answerable, gold unknown


def test_noise_counts_non_gold_tokens(graph):
    g = gold(graph, element_ids=("toy:p1:e2",))
    st = np.zeros(graph.n_nodes, dtype=np.int8)
    for nid, v in (("toy:p1", 1), ("toy:p1:e2", 2), ("toy:p2", 1), ("toy:p2:e1", 2)):
        st[graph.index_of[nid]] = v
    r = render(graph, st, "text")
    per = dict(r.node_tokens)
    expect = (per["toy:p2"] + per["toy:p2:e1"]) / r.tokens  # page 1 holds gold, so its page node is not noise
    assert R.noise(graph, g, r) == pytest.approx(expect)
    assert R.noise(graph, GoldEvidence(), r) == 0.0


def test_cost_is_clipped_weighted_and_total_combines_parts():
    cfg = R.RewardConfig(token_cap=100, w_tokens=0.5, w_ops=0.25, w_calls=0.25)
    total, parts = R.cost(tokens=250, operations=5, calls=1, cfg=cfg, op_cap=10, call_cap=4)
    assert parts == {"cost_tokens": 1.0, "cost_operations": 0.5, "cost_calls": 0.25}
    assert total == pytest.approx(0.5 + 0.125 + 0.0625)
    assert R.total_reward(0.8, 0.5, 0.4, R.RewardConfig(lambda_noise=0.2, lambda_cost=0.5)) == pytest.approx(0.5)
    assert R.RewardConfig.coerce({"lambda1": 0.3, "lambda2": 0.7}).lambda_cost == 0.7


def test_shaping_telescopes_to_terminal_reward_minus_initial_potential():
    from mage_gym.wrappers import PotentialShaping

    plain = MageRAGEnv(episodes=toy_episodes(), query_fn=QF, K=16, budget={"k": 1})
    shaped = PotentialShaping(MageRAGEnv(episodes=toy_episodes(), query_fn=QF, K=16, budget={"k": 1}, privileged=True))
    totals = []
    for env in (plain, shaped):
        env.reset(options={"episode_id": "elem"})
        phi0 = getattr(env, "_phi", 0.0)  # the wrapper's potential of the start state
        total, done, rng = 0.0, False, np.random.default_rng(4)
        while not done:
            valid = np.flatnonzero(env.get_wrapper_attr("action_masks")())
            a = int(valid[rng.integers(len(valid))]) if rng.random() > 0.1 else 0
            _, r, terminated, truncated, info = env.step(a)
            done = terminated or truncated
            total += r
        totals.append((total, phi0, info["reward_components"]["reward"]))
    (t_plain, _, term_plain), (t_shaped, phi0, term_shaped) = totals
    assert t_plain == pytest.approx(term_plain)
    assert t_shaped == pytest.approx(term_shaped - phi0)


class _EchoReader:
    """An answering reader that returns a fixed answer (stands in for a model)."""

    name = "echo"
    answers = True

    def __init__(self, answer):
        self.answer = answer

    def read(self, rendered):
        return ReaderOutput(answer=self.answer, raw=self.answer)


def test_answering_reader_support_is_the_benchmark_score():
    for answer, expect in (("12", 1.0), ("7", 0.0)):
        env = MageRAGEnv(episodes=toy_episodes(), query_fn=QF, K=8, reader=_EchoReader(answer))
        env.reset(options={"episode_id": "elem"})  # gold answer "12", format Int
        _, r, done, _, info = env.step(encode_action(Op.STOP, 0, env.K))
        assert done and info["reward_components"]["support"] == expect
        assert env.last_reader_output.answer == answer


def test_reward_terms_are_signed_shares_that_sum_to_the_episodes_reward():
    cfg = R.RewardConfig(lambda_noise=0.3, lambda_cost=0.8, w_tokens=0.6, w_ops=0.3, w_calls=0.1, token_cap=512)
    env = MageRAGEnv(episodes=toy_episodes(), query_fn=QF, K=16, budget={"k": 2}, reward=cfg)
    env.reset(options={"episode_id": "elem"})
    rng, done = np.random.default_rng(1), False
    while not done:  # a few random valid moves, so every cost part is above zero
        valid = np.flatnonzero(env.action_masks())
        _, r, terminated, truncated, info = env.step(int(valid[rng.integers(len(valid))]) if rng.random() > 0.2
                                                     else 0)
        done = terminated or truncated
    comp = info["reward_components"]
    terms = R.reward_terms(comp, cfg)
    assert list(terms) == list(R.REWARD_TERMS)
    assert sum(terms.values()) == pytest.approx(comp["reward"])
    assert terms["support"] == comp["support"] and terms["noise"] == pytest.approx(-0.3 * comp["noise"])
    assert terms["cost_tokens"] == pytest.approx(-0.8 * 0.6 * comp["cost_tokens"]) and terms["cost_tokens"] < 0
    assert terms["cost_calls"] == pytest.approx(-0.8 * 0.1 * comp["cost_calls"]) and terms["cost_calls"] < 0
    with pytest.raises(ValueError, match="cost weights"):  # the defaults (0.5/0.25/0.25) are not what scored it
        R.reward_terms(comp, R.RewardConfig())
