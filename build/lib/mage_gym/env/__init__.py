"""MageRAG-v0: evidence controllers as a Gymnasium environment.

Usage (README example)::

    import gymnasium as gym, numpy as np
    import mage_gym                                       # registers "MageRAG-v0"
    from mage_gym.env import make_env
    env = make_env(dataset="mmlongbench", limit=2)        # or gym.make("MageRAG-v0", episodes=pairs)
    obs, info = env.reset(seed=0)
    rng, done = np.random.default_rng(0), False
    while not done:
        mask = env.get_wrapper_attr("action_masks")()     # bool [ActionLayout(K).n]; 0 is Stop
        action = rng.choice(np.flatnonzero(mask))
        obs, reward, terminated, truncated, info = env.step(action)
        done = terminated or truncated
    print(reward, info["reward_components"], info["evidence_page_recall"])

LLM policies read ``env.get_wrapper_attr("text_view")()`` (or build the env with
``observation_keys=NUMERIC_KEYS + ("text",)``) and call
``env.get_wrapper_attr("submit_round")(RoundDecision(activate=(1, 2), open=("doc:p3:e1",)))``.
"""
from __future__ import annotations

from typing import Any

import gymnasium as gym

from mage_gym import ENV_ID
from mage_gym.env.actions import OP_NAMES, SLOT_OPS, ActionLayout, Op, decode_action, encode_action, n_actions
from mage_gym.env.budget import Budget
from mage_gym.env.env import DEFAULT_K, MageRAGEnv, PruneRequest, RoundDecision
from mage_gym.env.episodes import EnvEpisode, LazyGraphProvider, PairProvider, PublicEpisode, as_provider
from mage_gym.env.observation import NODE_FEATURES, NUMERIC_KEYS, OBSERVATION_KEYS, QUESTION_DIM, UnicodeText
from mage_gym.env.privileged import PrivilegedAccessError, PrivilegedView
from mage_gym.env.state import ACTIVATED, OPENED, PRUNED, STATE_NAMES, UNVISITED, EvidenceState


def make_env(dataset: str | None = None, *, episodes: Any = None, root: str | None = None, split: str = "all",
             limit: int | None = None, seed: int = 0, dataset_kwargs: dict[str, Any] | None = None,
             **env_kwargs: Any) -> gym.Env:
    """``gymnasium.make("MageRAG-v0", ...)`` on a benchmark's episodes or on given ones.

    ``dataset`` (mmlongbench, longdocurl, financebench, synth) loads episodes
    with ``mage_gym.data.registry.load_dataset(dataset, root, split, limit,
    seed)``; graphs are built (or loaded from the graph cache) on first use.
    Other keywords go to :class:`MageRAGEnv` (budget, K, render_mode, reward,
    reader, retriever, final_open_pass, observation_keys, privileged, ...) or
    name wrappers (``trace_path`` / ``record_trace``, ``text_view_in_info``,
    ``shaping``; see :mod:`mage_gym.env.factory`).
    """
    if (dataset is None) == (episodes is None):
        raise ValueError("give exactly one of dataset= or episodes=")
    if dataset is not None:
        from mage_gym.data.registry import load_dataset

        episodes = load_dataset(dataset, root=root, split=split, limit=limit, seed=seed, **(dataset_kwargs or {}))
        if not episodes:
            raise ValueError(f"dataset {dataset!r} (split={split!r}) has no episodes")
    return gym.make(ENV_ID, episodes=episodes, **env_kwargs)


__all__ = [
    "ACTIVATED", "ActionLayout", "Budget", "DEFAULT_K", "ENV_ID", "EnvEpisode", "EvidenceState",
    "LazyGraphProvider", "MageRAGEnv", "NODE_FEATURES", "NUMERIC_KEYS", "OBSERVATION_KEYS", "OPENED", "OP_NAMES",
    "Op", "PRUNED", "PairProvider", "PrivilegedAccessError", "PrivilegedView", "PruneRequest", "PublicEpisode",
    "QUESTION_DIM", "RoundDecision", "SLOT_OPS", "STATE_NAMES", "UNVISITED", "UnicodeText", "as_provider",
    "decode_action", "encode_action", "make_env", "n_actions",
]
