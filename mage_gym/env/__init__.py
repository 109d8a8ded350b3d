"""MageRAG-v0: evidence controllers as a Gymnasium environment.

Usage (README example)::

    import gymnasium as gym, numpy as np
    import mage_gym                                       # registers "MageRAG-v0"
    env = mage_gym.make_env(dataset="mmlongbench", limit=2)  # or gym.make("MageRAG-v0", episodes=pairs)
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

from mage_gym.env.actions import OP_NAMES, SLOT_OPS, ActionLayout, Op, decode_action, encode_action, n_actions
from mage_gym.env.budget import Budget
from mage_gym.env.config import EnvConfig
from mage_gym.env.env import DEFAULT_K, MageRAGEnv, PruneRequest, RoundDecision
from mage_gym.env.episodes import EnvEpisode, LazyGraphProvider, PairProvider, PublicEpisode, as_provider
from mage_gym.env.observation import NODE_FEATURES, NUMERIC_KEYS, OBSERVATION_KEYS, QUESTION_DIM, UnicodeText
from mage_gym.env.privileged import PrivilegedAccessError, PrivilegedView
from mage_gym.env.state import ACTIVATED, OPENED, PRUNED, STATE_NAMES, UNVISITED, EvidenceState


__all__ = [
    "ACTIVATED", "ActionLayout", "Budget", "DEFAULT_K", "EnvConfig", "EnvEpisode", "EvidenceState",
    "LazyGraphProvider", "MageRAGEnv", "NODE_FEATURES", "NUMERIC_KEYS", "OBSERVATION_KEYS", "OPENED", "OP_NAMES",
    "Op", "PRUNED", "PairProvider", "PrivilegedAccessError", "PrivilegedView", "PruneRequest", "PublicEpisode",
    "QUESTION_DIM", "RoundDecision", "SLOT_OPS", "STATE_NAMES", "UNVISITED", "UnicodeText", "as_provider",
    "decode_action", "encode_action", "n_actions",
]
