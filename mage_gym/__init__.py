"""mage-gym: Gymnasium environments for evidence controllers (MAGE-RAG setting).

``import mage_gym`` registers ``MageRAG-v0`` and its chat form ``MageRAG-Chat-v0``
(:mod:`mage_gym.agent`; entry points are strings, so nothing heavy is
imported until ``gym.make``)::

    import gymnasium as gym, mage_gym
    env = gym.make("MageRAG-v0", episodes=pairs)          # or gym.make("mage_gym:MageRAG-v0", ...)
    chat = gym.make("MageRAG-Chat-v0", episodes=pairs)    # assistant messages with tool calls in, chat messages out
"""
from __future__ import annotations

from typing import Any

from mage_gym.ids import CHAT_ENV_ID, ENV_ID

__version__ = "0.1.0"


def _register() -> None:
    import gymnasium as gym

    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point="mage_gym.make:make_mage_rag")
    if CHAT_ENV_ID not in gym.registry:
        gym.register(id=CHAT_ENV_ID, entry_point="mage_gym.agent.chat_env:make_chat_env")


_register()


def __getattr__(name: str) -> Any:
    """``mage_gym.make_env`` / ``mage_gym.make_training_env`` without importing the env at ``import mage_gym``."""
    if name in ("make_env", "make_training_env"):
        from mage_gym import make

        return getattr(make, name)
    raise AttributeError(f"module 'mage_gym' has no attribute {name!r}")


__all__ = ["CHAT_ENV_ID", "ENV_ID", "__version__", "make_env", "make_training_env"]
