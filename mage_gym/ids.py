"""The registered Gymnasium ids, defined once (``mage_gym/__init__`` registers them; the makers build them)."""
from __future__ import annotations

#: The evidence-controller env (:class:`mage_gym.env.MageRAGEnv` with its wrappers, :mod:`mage_gym.make`).
ENV_ID = "MageRAG-v0"
#: The same env as a chat: assistant messages with tool calls in, chat messages out (:mod:`mage_gym.agent`).
CHAT_ENV_ID = "MageRAG-Chat-v0"
