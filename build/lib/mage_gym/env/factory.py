"""What ``gym.make("MageRAG-v0", ...)`` builds: the env plus the wrappers its keywords ask for.

Why a factory as the registered entry point: experiment configs pass one flat
set of keywords. Those of the env go to :class:`MageRAGEnv`; four name
wrappers (:mod:`mage_gym.wrappers`): ``trace_path=PATH`` / ``record_trace=True``
(:class:`TraceRecording`, to a JSONL file / in memory), ``text_view_in_info=True``
(:class:`TextViewInfo`), ``shaping=True`` or ``{"gamma", "scale"}``
(:class:`PotentialShaping`, needs ``privileged=True``) and, kept for old
configs, ``reward.shaping: true`` (deprecated: it turns ``privileged`` on
with a warning). Gymnasium records these keywords in ``env.spec`` (the
episodes sealed), so ``gym.make(env.spec)`` rebuilds the same stack.
"""
from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Any, Mapping

import gymnasium as gym

from mage_gym.env.env import MageRAGEnv
from mage_gym.env.privileged import PrivilegedAccessError


def make_mage_rag(**kwargs: Any) -> gym.Env:
    """The ``MageRAG-v0`` entry point (see the module docstring for the wrapper keywords)."""
    from mage_gym import reward as R
    from mage_gym.wrappers import wrap

    trace_path = kwargs.pop("trace_path", None)
    record_trace = bool(kwargs.pop("record_trace", False))
    text_view_in_info = bool(kwargs.pop("text_view_in_info", False))
    shaping: bool | Mapping[str, Any] = kwargs.pop("shaping", False) or False
    cfg = R.RewardConfig.coerce(kwargs.get("reward"))
    if cfg.shaping:
        warnings.warn("reward.shaping is deprecated: build the training env with "
                      "mage_gym.make_training_env(..., privileged=True, shaping=True); turning privileged on",
                      DeprecationWarning, stacklevel=2)
        shaping = {"gamma": cfg.shaping_gamma, "scale": cfg.shaping_scale}
        kwargs["reward"] = replace(cfg, shaping=False)
        kwargs["privileged"] = True
    if shaping and not kwargs.get("privileged"):
        raise PrivilegedAccessError("shaping reads gold: pass privileged=True as well")
    trace = trace_path or record_trace
    return wrap(MageRAGEnv(**kwargs), trace=trace, text_view_in_info=text_view_in_info, shaping=shaping)


make_mage_rag.metadata = MageRAGEnv.metadata  # type: ignore[attr-defined]  # gym.make reads render modes here


def make_training_env(episodes: Any, *, privileged: bool = False, shaping: bool | Mapping[str, Any] = False,
                      **env_kwargs: Any) -> gym.Env:
    """An env for training a learned policy: ``gym.make("MageRAG-v0")`` with optional shaping.

    Shaping uses gold, so it needs ``privileged=True`` (explicitly: a
    privileged env also hands out :meth:`MageRAGEnv.privileged_view`). The
    policy's input stays the observation; gold reaches only the reward.
    """
    if shaping and not privileged:
        raise PrivilegedAccessError("shaping reads gold: call make_training_env(..., privileged=True, shaping=...)")
    from mage_gym.env import make_env

    return make_env(episodes=episodes, privileged=privileged, shaping=shaping, **env_kwargs)
