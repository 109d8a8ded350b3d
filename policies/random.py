"""``random``: a uniformly random valid action each step - the floor every policy must beat.

Why keep it: it bounds what the environment gives for free (entry pages are
activated at reset) and exercises every operation the mask allows.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from mage_gym.bench.protocol import EnvInfo
from policies.base import BasePolicy


class RandomPolicy(BasePolicy):
    """Uniform over ``np.flatnonzero(mask)``; seeded per episode from the run seed and episode order.

    ``stop_weight`` scales the probability of Stop relative to one other
    valid action (1 = plain uniform).
    """

    name = "random"

    def __init__(self, seed: int = 0, stop_weight: float = 1.0, **kw: Any) -> None:
        super().__init__(**kw)
        if stop_weight < 0:
            raise ValueError(f"stop_weight must be >= 0, got {stop_weight}")
        self.seed = int(seed)
        self.stop_weight = float(stop_weight)
        self._episodes = 0
        self.rng = np.random.default_rng(self.seed)

    def reset(self, env_info: EnvInfo) -> None:
        super().reset(env_info)
        base = self.seed if env_info.seed is None else env_info.seed
        self.rng = np.random.default_rng([int(base), self._episodes])
        self._episodes += 1

    def act(self, obs: Mapping[str, np.ndarray], text_view: str | None, mask: np.ndarray) -> int:
        valid = np.flatnonzero(mask)
        if not len(valid):
            return 0
        w = np.ones(len(valid))
        w[valid == 0] = self.stop_weight
        if w.sum() <= 0:
            w[:] = 1.0
        return int(self.rng.choice(valid, p=w / w.sum()))
