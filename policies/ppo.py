"""``ppo``: a learned controller - sb3-contrib MaskablePPO over the slot observation.

Why MaskablePPO: the flat action space (Stop + one block of K slots per operation, see ``ActionLayout``) is
mostly invalid at any moment (empty slots, spent budgets); masking through
``env.action_masks()`` keeps exploration on valid operations. The network is
the slot-set extractor and per-slot head of :mod:`policies.slot_net`. Other
SB3 algorithms plug in by name (:data:`ALGOS`: ``ppo``, ``a2c`` train without
masks - invalid actions are no-ops with an error - and act with the mask
applied to their action probabilities).

A checkpoint is SB3's ``.zip`` plus a ``.json`` sidecar (algorithm, K, the
observation keys, training config) so ``policy.ppo.checkpoint=PATH`` restores the
right class and refuses an environment with another K.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from policies.base import BasePolicy, EnvInfo

#: algorithm name -> (module, class, uses masks)
ALGOS: dict[str, tuple[str, str, bool]] = {
    "maskable_ppo": ("sb3_contrib", "MaskablePPO", True),
    "ppo": ("stable_baselines3", "PPO", False),
    "a2c": ("stable_baselines3", "A2C", False),
}
DEFAULT_NET = {"hidden": 64, "slot_dim": 16, "global_dim": 64, "question_dim": 32, "pooling": "mean+max+attention"}


def algo_class(algo: str) -> tuple[type, bool]:
    """(SB3 algorithm class, whether it takes action masks)."""
    if algo not in ALGOS:
        raise ValueError(f"unknown algorithm {algo!r}; expected one of {sorted(ALGOS)}")
    import importlib

    module, cls, masked = ALGOS[algo]
    return getattr(importlib.import_module(module), cls), masked


def build_model(env: Any, algo: str = "maskable_ppo", seed: int = 0, net: Mapping[str, Any] | None = None,
                hparams: Mapping[str, Any] | None = None, device: str = "cpu", verbose: int = 0) -> Any:
    """A fresh SB3 model on ``env`` (a VecEnv or an env) with the slot-set network."""
    from policies.slot_net import MaskableSlotPolicy, SlotPolicy, SlotSetExtractor

    cls, masked = algo_class(algo)
    net_cfg = {**DEFAULT_NET, **dict(net or {})}
    vf = list(net_cfg.pop("vf", [64]))
    policy_kwargs = {"features_extractor_class": SlotSetExtractor, "features_extractor_kwargs": net_cfg,
                     "net_arch": {"pi": [], "vf": vf}}
    return cls(MaskableSlotPolicy if masked else SlotPolicy, env, seed=seed, device=device, verbose=verbose,
               policy_kwargs=policy_kwargs, **dict(hparams or {}))


def save_checkpoint(model: Any, path: str | Path, algo: str, K: int, extra: Mapping[str, Any] | None = None) -> Path:
    """Write ``path`` (.zip) and its ``.json`` sidecar; returns the zip path."""
    path = Path(path)
    if path.suffix != ".zip":
        path = path.with_suffix(".zip")
    path.parent.mkdir(parents=True, exist_ok=True)
    model.save(str(path))
    meta = {"algo": algo, "K": int(K), "format": "mage-gym-policy-v1", **dict(extra or {})}
    path.with_suffix(".json").write_text(json.dumps(meta, indent=1, default=str))
    return path


def read_meta(path: str | Path) -> dict[str, Any]:
    side = Path(path).with_suffix(".json")
    return json.loads(side.read_text()) if side.is_file() else {}


class PPOPolicy(BasePolicy):
    """Acts with a trained SB3 model (``checkpoint``) or one passed in (``model``, during training).

    ``deterministic``: argmax of the masked action distribution (evaluation)
    or a sample (``False``). ``render_mode`` None takes the checkpoint's
    training render mode from its sidecar when there is one.
    """

    name = "ppo"

    def __init__(self, checkpoint: str | None = None, model: Any = None, algo: str | None = None,
                 deterministic: bool = True, device: str = "cpu", render_mode: str | None = None,
                 train: Mapping[str, Any] | None = None, **kw: Any) -> None:
        super().__init__(render_mode=render_mode, **kw)
        self.train_cfg = dict(train or {})  # training settings (experiments/train.py); unused when acting
        if model is None and not checkpoint:
            raise ValueError("ppo needs policy.ppo.checkpoint=PATH (train one with experiments/train.py)")
        self.checkpoint = checkpoint
        self.meta: dict[str, Any] = {}
        if model is None:
            path = Path(str(checkpoint)).expanduser()
            if path.suffix != ".zip" and path.with_suffix(".zip").is_file():
                path = path.with_suffix(".zip")
            if not path.is_file():
                raise FileNotFoundError(f"no checkpoint at {path}")
            self.meta = read_meta(path)
            if render_mode is None and self.meta.get("render_mode") in ("visual", "text"):
                self.render_mode = self.meta["render_mode"]
            algo = algo or self.meta.get("algo", "maskable_ppo")
            cls, _ = algo_class(algo)
            model = cls.load(str(path), device=device)
        self.algo = algo or "maskable_ppo"
        self.model = model
        self.masked = ALGOS[self.algo][2]
        self.deterministic = bool(deterministic)
        self.rng = np.random.default_rng(0)

    def reset(self, env_info: EnvInfo) -> None:
        super().reset(env_info)
        K = self.meta.get("K")
        if K is not None and int(K) != env_info.K:
            raise ValueError(f"checkpoint was trained with K={K} slots but the environment has K={env_info.K}")
        if env_info.seed is not None:
            self.rng = np.random.default_rng(env_info.seed)

    def act(self, obs: Mapping[str, np.ndarray], text_view: str | None, mask: np.ndarray) -> int:
        mask = np.asarray(mask, dtype=bool)
        if self.masked:
            action, _ = self.model.predict(dict(obs), action_masks=mask, deterministic=self.deterministic)
            return int(np.asarray(action).reshape(-1)[0])
        probs = self.action_probs(obs)
        probs = np.where(mask, probs, 0.0)
        if probs.sum() <= 0:
            return 0
        if self.deterministic:
            return int(np.argmax(probs))
        return int(self.rng.choice(len(probs), p=probs / probs.sum()))

    def action_probs(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """Unmasked action probabilities of the model (plain SB3 algorithms)."""
        import torch as th

        policy = self.model.policy
        tensor, _ = policy.obs_to_tensor(dict(obs))
        with th.no_grad():
            dist = policy.get_distribution(tensor)
        return dist.distribution.probs[0].cpu().numpy().astype(np.float64)
