"""Controller policies: one small protocol (:class:`policies.base.Policy`), one registry.

``get_policy(name, **cfg)`` builds any of :data:`POLICIES` (Hydra's
``policy`` group maps onto it); modules are imported on demand, so building
``heuristic`` never imports torch and building ``ppo`` never loads an LLM.
:func:`policies.runner.run_episode` drives any policy through one episode.
"""
from __future__ import annotations

import importlib
from typing import Any

from policies.base import BasePolicy, EnvInfo, Policy

#: name -> (module, class)
POLICIES: dict[str, tuple[str, str]] = {
    "random": ("policies.random", "RandomPolicy"),
    "topk_page": ("policies.topk_page", "TopKPagePolicy"),
    "topk_text": ("policies.topk_text", "TopKTextPolicy"),
    "heuristic": ("policies.heuristic", "HeuristicPolicy"),
    "graph_follower": ("policies.graph_follower", "GraphFollowerPolicy"),  # reads the env's public graph
    "llm_evaluator": ("policies.llm_evaluator", "LLMEvaluatorPolicy"),
    "ppo": ("policies.ppo", "PPOPolicy"),
    "oracle": ("policies.oracle", "OraclePolicy"),  # privileged: reads gold; an upper bound, never a baseline
}


def policy_class(name: str) -> type:
    """The class registered as ``name`` (imported on demand), e.g. to read ``privileged`` without building it."""
    key = str(name).strip().lower()
    if key not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; expected one of {sorted(POLICIES)}")
    module, cls = POLICIES[key]
    return getattr(importlib.import_module(module), cls)


def get_policy(name: str, **cfg: Any) -> Policy:
    """Build a policy by name; ``cfg`` are its options (a ``name`` key, as in configs, is ignored)."""
    cfg.pop("name", None)
    return policy_class(name)(**cfg)


__all__ = ["POLICIES", "BasePolicy", "EnvInfo", "Policy", "get_policy", "policy_class"]
