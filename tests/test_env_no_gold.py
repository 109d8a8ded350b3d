"""No gold reaches a policy: episodes differing only in gold fields look identical until the end."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from mage_gym.data.episode import FLAG_EMPTY_EVIDENCE, Region
from mage_gym.env import OBSERVATION_KEYS, ActionLayout, EnvEpisode, MageRAGEnv, RoundDecision
from mage_gym.testing import hash_query_fn, toy_episodes
from mage_gym.wrappers import TextViewInfo
from gold_guard import public_leaves

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
    env = TextViewInfo(MageRAGEnv(episodes=[pair], query_fn=QF, K=16, observation_keys=OBSERVATION_KEYS))
    masks, view, submit = (env.get_wrapper_attr(n) for n in ("action_masks", "text_view", "submit_round"))
    seen = []
    obs, info = env.reset(seed=5)
    seen.append((obs, masks(), view(), {k: v for k, v in info.items()}))
    for a in actions:
        mask = masks()
        a = a if mask[a] else int(np.flatnonzero(mask)[-1])
        obs, r, terminated, truncated, info = env.step(a)
        if terminated or truncated:
            return seen, info, r
        seen.append((obs, masks(), view(), dict(info), r))
    for d in rounds:
        obs, r, terminated, truncated, info = submit(d)
        if terminated or truncated:
            return seen, info, r
        seen.append((obs, masks(), view(), dict(info), r))
    obs, r, done, _, info = env.step(0)
    return seen, info, r


def test_gold_fields_never_change_what_a_policy_sees():
    a, b = gold_variants()
    rng = np.random.default_rng(0)
    actions = [int(x) for x in rng.integers(1, ActionLayout(16).n, size=12)]
    rounds = [RoundDecision(activate=(1, 2)), RoundDecision(open=("toy:p4:e2",), search="chart revenue")]
    seen_a, end_a, _ = run(a, actions, rounds)
    seen_b, end_b, _ = run(b, actions, rounds)
    assert len(seen_a) == len(seen_b) > 3
    for xa, xb in zip(seen_a, seen_b):
        obs_a, mask_a, tv_a, info_a = xa[:4]
        obs_b, mask_b, tv_b, info_b = xb[:4]
        assert "text" in obs_a and obs_a["text"] == info_a["text_view"]
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


def test_no_public_attribute_differs_between_gold_variants():
    """Every plain value reachable through public attributes is the same whatever the gold (before the end)."""
    envs, pairs = [], gold_variants()
    for pair in pairs:
        env = TextViewInfo(MageRAGEnv(episodes=[pair], query_fn=QF, K=16, observation_keys=OBSERVATION_KEYS))
        env.reset(seed=5)
        env.action_space.seed(0)  # the spaces' own generators start from fresh entropy in every env
        env.observation_space.seed(0)
        env.step(int(np.flatnonzero(env.get_wrapper_attr("action_masks")())[1]))
        envs.append(env)
    a, b = (public_leaves(env) for env in envs)
    assert len(a) > 100 and ("str", pairs[0].episode.question) in a  # the walk reaches the env's properties
    assert a - b == set() and b - a == set()
