"""Random, scripted and MaskablePPO agents on generator episodes and on real benchmark episodes.

Graphs are built from PDFs here (fast parser, a few pages) with the real MiniLM
encoder and hybrid retriever, so these tests take seconds, not milliseconds.
"""
from __future__ import annotations

import numpy as np
import pytest

from mage_gym import make_env
from mage_gym.env import MageRAGEnv, RoundDecision


def random_episode(env, seed: int) -> dict:
    action_masks = env.get_wrapper_attr("action_masks")
    env.reset(seed=seed)
    rng, done = np.random.default_rng(seed), False
    while not done:
        valid = np.flatnonzero(action_masks())
        _, r, terminated, truncated, info = env.step(int(valid[rng.integers(len(valid))]))
        done = terminated or truncated
    assert np.isfinite(r) and info["stop_reason"] in ("stop", "max_rounds", "step_cap")
    return info


def scripted_episode(env, episode_id: str) -> dict:
    """Activate the best candidates, open every activated element, stop (through submit_round)."""
    get = env.get_wrapper_attr
    env.reset(options={"episode_id": episode_id})
    budget, submit_round = get("budget"), get("submit_round")
    submit_round(RoundDecision(activate=tuple(range(1, budget.m + 1))))
    gi, state = get("gi"), get("state")
    to_open = [gi.node_ids[v] for v in state.working if v >= gi.n_pages][: budget.B]
    _, r, done, _, info = submit_round(RoundDecision(open=tuple(to_open), stop=True))
    assert done and info["opens"] == len(to_open)
    return info


def ppo_smoke(env) -> None:
    """MaskablePPO learns a few steps, then plays an episode whose every action its mask allowed."""
    from sb3_contrib import MaskablePPO

    model = MaskablePPO("MultiInputPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0, verbose=0)
    model.learn(128)
    assert model.num_timesteps >= 128
    masks = env.get_wrapper_attr("action_masks")
    obs, _ = env.reset(seed=1)
    for _ in range(200):
        mask = masks()
        action, _ = model.predict(obs, action_masks=mask, deterministic=True)
        assert mask[int(action)], "a masked action was chosen"
        obs, _, terminated, truncated, info = env.step(int(action))
        if terminated or truncated:
            break
    assert (terminated or truncated) and info["invalid_actions"] == 0  # the env's own count agrees with the mask


@pytest.fixture(scope="module")
def synth_episodes(tmp_path_factory):
    from mage_gym.data.synth.config import SynthConfig
    from mage_gym.data.synth.corpus import generate_corpus, load_synth

    root = tmp_path_factory.mktemp("synth_env")
    generate_corpus(root, n_docs=1, seed=0, cfg=SynthConfig(min_pages=4, max_pages=5, questions_per_doc=4),
                    workers=1, progress=False)
    return load_synth(root)


@pytest.mark.slow
def test_agents_on_generator_episodes(synth_episodes):
    env = make_env(episodes=synth_episodes, parser="fast", K=32)
    infos = [random_episode(env, s) for s in range(3)]
    assert all("evidence_page_recall" in i for i in infos)
    answerable = next(e for e in synth_episodes if e.answerable)
    info = scripted_episode(env, answerable.episode_id)
    c = info["reward_components"]
    assert c["support"] == c["gold_coverage"] and 0.0 < c["support"] <= 1.0  # the oracle reader: gold it received
    assert c["reward"] == pytest.approx(c["support"] - c["lambda_noise"] * c["noise"] - c["lambda_cost"] * c["cost"])
    ppo_smoke(env)  # MaskablePPO finds the masks through the wrappers gym.make adds


@pytest.mark.real_data
@pytest.mark.slow
def test_agents_on_real_benchmark_episodes(data_root):
    from mage_gym.data.registry import load_dataset

    episodes = load_dataset("mmlongbench", root=data_root / "mmlongbench-dev", limit=2, seed=0)
    assert episodes
    env = MageRAGEnv(episodes=episodes, parser="fast", graph_kwargs={"max_pages": 4}, K=32, render_mode="visual")
    info = random_episode(env, 0)
    assert info["images_rendered"] >= 1
    assert env.last_render.images[0].load().size[0] > 0  # pixels come lazily from the real PDF
    scripted_episode(env, episodes[0].episode_id)
    ppo_smoke(env)


@pytest.mark.real_data
@pytest.mark.slow
def test_text_observation_stays_in_its_space_on_real_documents(data_root):
    """Real PDFs carry any character (ligatures, symbols, CJK): the opt-in text key must still be in its space."""
    from mage_gym.data.registry import load_dataset
    from mage_gym.env import OBSERVATION_KEYS

    episodes = load_dataset("mmlongbench", root=data_root / "mmlongbench-dev", limit=4, seed=1)
    env = MageRAGEnv(episodes=episodes, parser="fast", graph_kwargs={"max_pages": 6}, K=32,
                     observation_keys=OBSERVATION_KEYS)
    non_ascii = 0
    for i, ep in enumerate(episodes):
        obs, _ = env.reset(seed=i, options={"episode_id": ep.episode_id})
        rng, done = np.random.default_rng(i), False
        while not done:
            assert env.observation_space.contains(obs)
            non_ascii += any(ord(c) > 127 for c in obs["text"])
            valid = np.flatnonzero(env.action_masks())
            obs, _, terminated, truncated, _ = env.step(int(valid[rng.integers(len(valid))]))
            done = terminated or truncated
        assert env.observation_space.contains(obs)
    assert non_ascii > 0  # the check did see characters outside ASCII
