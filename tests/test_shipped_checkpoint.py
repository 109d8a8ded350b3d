"""The packaged DAgger student: `policies=[ppo]` without a checkpoint loads it and acts on a fresh corpus."""
from __future__ import annotations

from pathlib import Path

import gymnasium as gym

import mage_gym  # noqa: F401 - registers MageRAG-v0
from mage_gym.bench.policy_options import checkpoint_of
from policies import REGISTRY
from policies import get_policy
from policies.ppo import SHIPPED_CHECKPOINT, read_meta
from mage_gym.bench.play import run_episode


def test_the_shipped_checkpoint_is_packaged_and_agrees_with_the_code() -> None:
    from mage_gym.env.observation import NODE_FEATURES
    from mage_gym.graph import GRAPH_VERSION

    assert SHIPPED_CHECKPOINT.is_file() and SHIPPED_CHECKPOINT.stat().st_size < 5 * 2**20
    meta = read_meta(SHIPPED_CHECKPOINT)
    assert list(meta["node_features"]) == list(NODE_FEATURES) and str(meta["graph_version"]) == str(GRAPH_VERSION)
    from mage_gym.env.relevance import default_relevance_columns

    assert list(meta["relevance_columns"]) == list(default_relevance_columns())  # what the default env shows
    assert (SHIPPED_CHECKPOINT.parent / "README.md").is_file()  # how it was trained, on what
    assert checkpoint_of("ppo", {"checkpoint": None}, REGISTRY)["path"] == str(SHIPPED_CHECKPOINT)


def test_ppo_without_a_checkpoint_runs_on_a_tiny_synthetic_corpus(tmp_path: Path) -> None:
    from mage_gym.data.registry import load_dataset
    from mage_gym.data.synth import SynthConfig, generate_corpus

    generate_corpus(tmp_path, 1, seed=11, cfg=SynthConfig(min_pages=6, max_pages=6, questions_per_doc=3),
                    workers=1, progress=False)
    episodes = load_dataset("synth", root=tmp_path)
    policy = get_policy("ppo")  # no checkpoint: the shipped one
    assert policy.checkpoint == str(SHIPPED_CHECKPOINT)
    env = gym.make("MageRAG-v0", episodes=episodes, parser="fast", render_mode=policy.render_mode)
    for i, ep in enumerate(episodes):
        r = run_episode(env, policy, ep.episode_id, seed=i)
        assert r.invalid == 0 and r.metrics["stop_reason"] in ("stop", "max_rounds", "step_cap")
