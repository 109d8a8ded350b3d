"""Time one SB3 ``learn`` call, split into setup, rollout and update: the timer both sides of perf_train use.

Why a module of its own: ``experiments/perf/perf_train.py`` times this tree and
``experiments/perf/perf_train_tree.py`` times an older checkout, whose
``experiments`` package is the old one; the driver loads this file by path
(it has no imports from the project), so the old and the new code are
timed by the same lines.
"""
from __future__ import annotations

import time
from typing import Any, Callable


def phase_timer() -> Any:
    """SB3 callback timing rollout phases (and the start of ``learn`` before the first one)."""
    from stable_baselines3.common.callbacks import BaseCallback

    class PhaseTimer(BaseCallback):
        def _on_training_start(self) -> None:
            self.first_rollout: float | None = None
            self.rollout_s, self.rollouts = 0.0, 0

        def _on_rollout_start(self) -> None:
            self.t_rollout = time.perf_counter()
            if self.first_rollout is None:
                self.first_rollout = self.t_rollout

        def _on_rollout_end(self) -> None:
            self.rollout_s += time.perf_counter() - self.t_rollout
            self.rollouts += 1

        def _on_step(self) -> bool:
            return True

    return PhaseTimer()


def plain_learn(model: Any, steps: int, callback: Any, reset: bool) -> Any:
    return model.learn(total_timesteps=steps, callback=callback, reset_num_timesteps=reset)


def timed_learn(model: Any, steps: int, reset: bool = True, learn: Callable[..., Any] = plain_learn
                ) -> dict[str, float]:
    """One ``learn(model, steps, timer, reset)`` timed: setup (until the first rollout), rollout and update s.

    ``reset=False`` continues the model (a warm run: caches filled, workers up).
    """
    timer = phase_timer()
    before = int(model.num_timesteps)
    t0 = time.perf_counter()
    learn(model, steps, timer, reset)
    wall = time.perf_counter() - t0
    setup = (timer.first_rollout or t0) - t0  # learn's own setup: the first reset of every env (graph loads)
    update = max(0.0, wall - setup - timer.rollout_s)
    n = int(model.num_timesteps) - before
    return {"env_steps": n, "rollouts": timer.rollouts, "learn_setup_s": setup, "rollout_s": timer.rollout_s,
            "update_s": update, "learn_wall_s": wall, "steps_per_s": n / max(1e-9, timer.rollout_s + update),
            "rollout_steps_per_s": n / max(1e-9, timer.rollout_s)}
