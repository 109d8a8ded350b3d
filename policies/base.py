"""Defaults shared by the controller policies (:class:`BasePolicy`, :class:`EnvBoundPolicy`).

The protocol they implement, :class:`~mage_gym.bench.protocol.Policy`, and
what a policy may know at reset, :class:`~mage_gym.bench.protocol.EnvInfo`,
live in :mod:`mage_gym.bench.protocol`, where the harness that drives them
can see them without importing any policy.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from mage_gym.bench.protocol import Action, EnvInfo
from mage_gym.render import RENDER_MODES


class BasePolicy:
    """Defaults for the protocol's attributes plus per-run counters (``stats``)."""

    name = "base"
    level = "step"
    uses_text_view = False

    def __init__(self, render_mode: str | None = None, **unused: Any) -> None:
        if render_mode not in (None, *RENDER_MODES):
            raise ValueError(f"render_mode must be one of {RENDER_MODES} or null, got {render_mode!r}")
        if unused:
            raise TypeError(f"{type(self).__name__}: unknown options {sorted(unused)}")
        self.render_mode = render_mode
        self.env_info: EnvInfo | None = None
        self.stats: dict[str, float] = {}

    def reset(self, env_info: EnvInfo) -> None:
        self.env_info = env_info

    def act(self, obs: Mapping[str, np.ndarray], text_view: str | None, mask: np.ndarray) -> Action:
        raise NotImplementedError

    def count(self, key: str, n: float = 1) -> None:
        self.stats[key] = self.stats.get(key, 0) + n

    def close(self) -> None:
        """Release resources (models, files); the default has none."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(render_mode={self.render_mode!r})"


class EnvBoundPolicy(BasePolicy):
    """A policy that reads its env's public API (graph, slots) or privileged view beside the observation.

    Why a base: such a policy must be bound to the env it plays before
    ``reset`` (``Policy(env)`` or :meth:`bind`), and saying so the same way
    everywhere keeps the binding deliberate (the oracle is never bound
    implicitly; ``needs_env`` policies are bound by :func:`mage_gym.bench.play.run_episode`).
    """

    def __init__(self, env: Any = None, render_mode: str | None = None, **kw: Any) -> None:
        super().__init__(render_mode=render_mode, **kw)
        self._env = env

    def bind(self, env: Any) -> "EnvBoundPolicy":
        self._env = env
        return self

    def reset(self, env_info: EnvInfo) -> None:
        super().reset(env_info)
        if self._env is None:
            cls = type(self).__name__
            raise RuntimeError(f"{cls} needs its env: {cls}(env) or policy.bind(env)")
