"""``MageRAG-v0`` and its reader from the ``env``, ``retriever`` and ``reader`` config nodes.

Why no list of env keys: every key of the ``env`` node (``conf/env/``) is a
``MageRAGEnv`` keyword argument, so the node is passed whole; a key the class
does not take fails at construction with the class's own error.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from experiments.common.config import section


def env_kwargs(cfg: Mapping[str, Any], render_mode: str | None = None, reader: Any = None) -> dict[str, Any]:
    """Keyword arguments for ``MageRAGEnv``: the ``env`` node (null values left to the class), retriever, reader."""
    kw = {k: v for k, v in section(cfg, "env").items() if v is not None}
    if render_mode:
        kw["render_mode"] = render_mode
    ret = section(cfg, "retriever") or {"name": "hybrid"}
    kw["retriever"] = ret.pop("name", "hybrid")
    kw["retriever_cfg"] = ret
    if reader is None:
        rd = section(cfg, "reader") or {"name": "oracle"}
        reader = rd.pop("name", "oracle")
        kw["reader_cfg"] = rd or None
    kw["reader"] = reader
    return kw


def make_env(episodes: Sequence[Any], cfg: Mapping[str, Any], render_mode: str | None = None,
             reader: Any = None, max_graphs: int | None = None) -> Any:
    """``gymnasium.make("MageRAG-v0")`` on ``episodes`` (graphs from the cache, lazily)."""
    import gymnasium as gym

    import mage_gym.env  # noqa: F401 - registers MageRAG-v0

    kw = env_kwargs(cfg, render_mode, reader)
    if max_graphs is not None:
        kw["max_graphs"] = max_graphs
    return gym.make("MageRAG-v0", episodes=list(episodes), **kw)


def build_reader(cfg: Mapping[str, Any]) -> Any:
    """One reader object from the ``reader`` node, shared by all envs of a run (one model load)."""
    from mage_gym.readers import get_reader

    rd = section(cfg, "reader") or {"name": "oracle"}
    return get_reader(rd.pop("name", "oracle"), **rd)
