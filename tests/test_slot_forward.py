"""MaskableSlotPolicy.forward equals sb3-contrib's forward bit for bit (actions, values, log-probs, random stream)."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import mage_gym.env  # noqa: F401 - registers MageRAG-v0
from mage_gym.testing import hash_query_fn
from mage_gym.testing import toy_quote_pairs

import torch  # noqa: E402
from sb3_contrib.common.maskable.policies import MaskableMultiInputActorCriticPolicy  # noqa: E402
from stable_baselines3.common.utils import obs_as_tensor  # noqa: E402


@pytest.fixture(scope="module")
def batch():
    """A trained-a-little policy and a batch of real observations and masks from the toy env."""
    from policies.ppo import build_model

    pairs = toy_quote_pairs(n_questions=8, element=0, seed=7, prefix="sf-q")
    env = gym.make("MageRAG-v0", episodes=pairs, K=16, budget={"k": 2, "m": 2, "M": 6, "T": 3, "B": 4},
                   retriever="bm25", query_fn=hash_query_fn(16), render_mode="text")
    torch.set_num_threads(1)
    model = build_model(env, seed=0, hparams={"n_steps": 64, "batch_size": 32, "n_epochs": 1})
    model.learn(64)  # weights away from their initial near-uniform head
    obs, masks = [], []
    for i, p in enumerate(pairs):
        o, _ = env.reset(seed=i, options={"episode_id": p.episode.episode_id})
        obs.append(o)
        masks.append(env.unwrapped.action_masks())
        o, *_ = env.step(int(np.flatnonzero(masks[-1])[0]))  # a second state per episode, after one action
        obs.append(o)
        masks.append(env.unwrapped.action_masks())
    stacked = {k: np.stack([o[k] for o in obs]) for k in obs[0]}
    return model.policy, obs_as_tensor(stacked, "cpu"), np.stack(masks)


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("masked", [True, False])
def test_forward_is_sb3_contrib_forward(batch, deterministic: bool, masked: bool) -> None:
    policy, obs, masks = batch
    m = masks if masked else None
    with torch.no_grad():
        torch.manual_seed(11)
        ours = policy.forward(obs, deterministic=deterministic, action_masks=m)
        after_ours = torch.rand(1)
        torch.manual_seed(11)
        theirs = MaskableMultiInputActorCriticPolicy.forward(policy, obs, deterministic=deterministic,
                                                             action_masks=m)
        after_theirs = torch.rand(1)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert torch.equal(a, b)
    assert torch.equal(after_ours, after_theirs)  # the random stream is consumed alike
    if masked:  # never a masked action
        assert masks[np.arange(len(masks)), ours[0].numpy()].all()


def test_sampling_varies_and_follows_the_mask(batch) -> None:
    policy, obs, masks = batch
    with torch.no_grad():
        draws = np.stack([policy.forward(obs, action_masks=masks)[0].numpy() for _ in range(30)])
    assert masks[np.arange(len(masks))[None, :], draws].all()
    assert len({tuple(d) for d in draws}) > 1  # it samples, it is not the argmax every time
