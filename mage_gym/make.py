"""Making envs: what ``gym.make("MageRAG-v0", ...)`` builds (the env plus the wrappers its keywords ask for).

``make_env`` (episodes of a benchmark or given ones) and ``make_training_env``
are reached as ``mage_gym.make_env`` / ``mage_gym.make_training_env``.

Why a factory as the registered entry point: experiment configs pass one flat
set of keywords. Those of the env (its :class:`~mage_gym.env.config.EnvConfig`
settings, reader, retriever, query_fn, privileged) go to :class:`MageRAGEnv`;
four name wrappers (:mod:`mage_gym.wrappers`): ``trace_path=PATH`` /
``record_trace=True`` (:class:`TraceRecording`, to a JSONL file / in memory),
``text_view_in_info=True`` (:class:`TextViewInfo`) and ``shaping=True`` or
``{"gamma", "scale"}`` (:class:`PotentialShaping`, needs ``privileged=True``).
Gymnasium records these keywords in ``env.spec`` (the episodes sealed), so
``gym.make(env.spec)`` rebuilds the same stack.
"""
from __future__ import annotations

from typing import Any, Mapping

import gymnasium as gym

from mage_gym.ids import ENV_ID
from mage_gym.env.env import MageRAGEnv
from mage_gym.env.privileged import PrivilegedAccessError
from mage_gym.wrappers import wrap


def make_mage_rag(**kwargs: Any) -> gym.Env:
    """The ``MageRAG-v0`` entry point (see the module docstring for the wrapper keywords)."""
    trace_path = kwargs.pop("trace_path", None)
    record_trace = bool(kwargs.pop("record_trace", False))
    text_view_in_info = bool(kwargs.pop("text_view_in_info", False))
    shaping: bool | Mapping[str, Any] = kwargs.pop("shaping", False) or False
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
    return make_env(episodes=episodes, privileged=privileged, shaping=shaping, **env_kwargs)


def make_env(dataset: str | None = None, *, episodes: Any = None, root: str | None = None, split: str = "all",
             limit: int | None = None, seed: int = 0, dataset_kwargs: dict[str, Any] | None = None,
             **env_kwargs: Any) -> gym.Env:
    """``gymnasium.make("MageRAG-v0", ...)`` on a benchmark's episodes or on given ones.

    ``dataset`` (mmlongbench, longdocurl, financebench, synth) loads episodes
    with ``mage_gym.data.registry.load_dataset(dataset, root, split, limit,
    seed)``; graphs are built (or loaded from the graph cache) on first use.
    Other keywords go to :class:`MageRAGEnv` (``config`` and its settings:
    budget, K, render_mode, reward, ...; reader, retriever, query_fn,
    privileged) or name wrappers (``trace_path`` / ``record_trace``, ``text_view_in_info``,
    ``shaping``; see :func:`make_mage_rag`).
    """
    if (dataset is None) == (episodes is None):
        raise ValueError("give exactly one of dataset= or episodes=")
    if dataset is not None:
        from mage_gym.data.registry import load_dataset

        episodes = load_dataset(dataset, root=root, split=split, limit=limit, seed=seed, **(dataset_kwargs or {}))
        if not episodes:
            raise ValueError(f"dataset {dataset!r} (split={split!r}) has no episodes")
    return gym.make(ENV_ID, episodes=episodes, **env_kwargs)
