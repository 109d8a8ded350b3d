"""Controller policies: one small protocol (:class:`mage_gym.bench.protocol.Policy`), one registry.

``get_policy(name, **cfg)`` builds any of :data:`POLICIES` (Hydra's
``policy`` group maps onto it); modules are imported on demand, so building
``heuristic`` never imports torch and building ``ppo`` never loads an LLM.
:func:`mage_gym.bench.play.run_episode` drives any policy through one episode;
the harness (:mod:`mage_gym.bench`) builds policies through :data:`REGISTRY`.
"""
from __future__ import annotations

import importlib
from typing import Any

from mage_gym.bench.protocol import EnvInfo, Policy
from policies.base import BasePolicy

#: name -> (module, class)
POLICIES: dict[str, tuple[str, str]] = {
    "random": ("policies.random", "RandomPolicy"),
    "topk_page": ("policies.topk_page", "TopKPagePolicy"),
    "topk_text": ("policies.topk_text", "TopKTextPolicy"),
    "topk_elements": ("policies.topk_elements", "TopKElementsPolicy"),
    "heuristic": ("policies.heuristic", "HeuristicPolicy"),
    "graph_follower": ("policies.graph_follower", "GraphFollowerPolicy"),  # reads the env's public graph
    "llm_evaluator": ("policies.llm_evaluator", "LLMEvaluatorPolicy"),
    "llm_controller": ("policies.llm_evaluator", "LLMControllerPolicy"),  # the shipped LoRA SmolLM2 controller
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


#: policies that act from a trained checkpoint (``policy.<name>.checkpoint``)
LEARNED: tuple[str, ...] = ("ppo",)


class Registry:
    """This package's policies as the harness sees them (:class:`mage_gym.bench.protocol.PolicyRegistry`)."""

    def names(self) -> list[str]:
        return sorted(POLICIES)

    def policy_class(self, name: str) -> type:
        return policy_class(name)

    def make(self, name: str, **options: Any) -> Policy:
        return get_policy(name, **options)

    def learned_checkpoint(self, name: str, options: Any) -> str | None:
        """The checkpoint a learned policy acts with: ``checkpoint``, or the shipped one when none is given."""
        if name not in LEARNED:
            return None
        ckpt = options.get("checkpoint")
        if not ckpt and name == "ppo":
            from policies.ppo import SHIPPED_CHECKPOINT

            ckpt = SHIPPED_CHECKPOINT
        return str(ckpt) if ckpt else None

    def __reduce__(self) -> tuple:  # one registry per process: unpickled as the module's own
        return (_registry, ())


def _registry() -> Registry:
    return REGISTRY


REGISTRY = Registry()

__all__ = ["LEARNED", "POLICIES", "REGISTRY", "BasePolicy", "EnvInfo", "Policy", "Registry", "get_policy",
           "policy_class"]
