"""The registered Gymnasium ids, defined once (``mage_gym/__init__`` registers them; the makers build them)."""
from __future__ import annotations

#: The evidence-controller env (:class:`mage_gym.env.MageRAGEnv` with its wrappers, :mod:`mage_gym.make`).
ENV_ID = "MageRAG-v0"
