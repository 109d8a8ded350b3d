"""No gold reaches a policy: episodes differing only in gold fields look identical until the end."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from mage_gym.data.episode import FLAG_EMPTY_EVIDENCE, Region
from mage_gym.env import EnvEpisode, MageRAGEnv, RoundDecision
from mage_gym.env._synthetic import hash_query_fn, toy_episodes

QF = hash_query_fn(16)


def gold_variants():
    base = toy_episodes()[0]
    ep, g = base.episode, base.graph
    other = replace(
        ep, answer="something else entirely", answer_format="Str", answerable=False,
        evidence_pages=(0, 1), evidence_regions=(Region(page=1, bbox=(0.1, 0.1, 0.5, 0.5), type="Table"),),
        evidence_text=("a snippet",), gold_node_ids=("toy:p0:e1",), evidence_sources=("Chart",),
        task_tags=("Reasoning",), flags=(FLAG_EMPTY_EVIDENCE,), split="test",
    )
    return EnvEpisode(ep, g), EnvEpisode(other, g)


def run(pair, actions, rounds):
    env = MageRAGEnv(episodes=[pair], query_fn=QF, K=16, text_view_in_info=True)
    seen = []
    obs, info = env.reset(seed=5)
    seen.append((obs, env.action_masks(), env.text_view(), {k: v for k, v in info.items()}))
    for a in actions:
        mask = env.action_masks()
        a = a if mask[a] else int(np.flatnonzero(mask)[-1])
        obs, r, done, _, info = env.step(a)
        if done:
            return seen, info, r
        seen.append((obs, env.action_masks(), env.text_view(), dict(info), r))
    for d in rounds:
        obs, r, done, _, info = env.submit_round(d)
        if done:
            return seen, info, r
        seen.append((obs, env.action_masks(), env.text_view(), dict(info), r))
    obs, r, done, _, info = env.step(0)
    return seen, info, r


def test_gold_fields_never_change_what_a_policy_sees():
    a, b = gold_variants()
    rng = np.random.default_rng(0)
    actions = [int(x) for x in rng.integers(1, 1 + 5 * 16, size=12)]
    rounds = [RoundDecision(activate=(1, 2)), RoundDecision(open=("toy:p4:e2",), search="chart revenue")]
    seen_a, end_a, _ = run(a, actions, rounds)
    seen_b, end_b, _ = run(b, actions, rounds)
    assert len(seen_a) == len(seen_b) > 3
    for xa, xb in zip(seen_a, seen_b):
        obs_a, mask_a, tv_a, info_a = xa[:4]
        obs_b, mask_b, tv_b, info_b = xb[:4]
        for k in obs_a:
            assert np.array_equal(obs_a[k], obs_b[k]), k
        assert np.array_equal(mask_a, mask_b)
        assert tv_a == tv_b
        assert info_a == info_b
        if len(xa) > 4:
            assert xa[4] == xb[4] == 0.0  # no reward (hence no gold signal) before the end
    # the gold only shows at the end, in the reward and metrics
    assert end_a["reward_components"] != end_b["reward_components"]
    for field in ("something else", "Reasoning", "Chart", FLAG_EMPTY_EVIDENCE):
        assert all(field not in x[2] for x in seen_b)
