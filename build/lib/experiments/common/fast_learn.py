"""Run SB3's ``learn`` faster without changing what it computes.

Why: a profile of MaskablePPO on the real training mix (2 cores, the
slot-set net of ``conf/policy/ppo.yaml``) spends its time in three places:
the policy forward of every rollout step (a batch of ``n_envs`` rows, so
per-call overhead, not arithmetic), the gradient epochs (batches of 128:
arithmetic that a second core speeds up), and torch's argument checks on
every ``Categorical`` the masked distribution builds (three per forward).
Two changes address the last two and leave the numbers PPO computes alone:

* **Threads per phase** (:class:`PhaseThreads`): rollouts run with
  ``rollout_threads`` torch threads (1: the env steps are Python, and a
  thread pool only adds wake-ups to a 2-row forward), the gradient epochs
  with ``update_threads`` (default: one per core; the envs are idle then,
  in this process or in their worker processes). Only the reduction order
  of multi-threaded kernels changes, so results agree to float rounding.
* **No per-call distribution checks** (:func:`unchecked_distributions`):
  torch validates a distribution's parameters on construction (a simplex
  check of the probabilities, built three times per forward by
  sb3-contrib's ``MaskableCategorical``). Turned off inside ``learn`` only
  and restored after; what the check was there for, a NaN in the network
  output, is still caught: :class:`PhaseThreads` checks the rollout's
  values and log-probabilities once per rollout and stops with an error
  naming the step count.

Measured by ``experiments/perf_train.py`` (the ``after`` setting uses
:func:`learn`, the ``legacy`` one plain ``model.learn``).
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Iterator


def usable_cores() -> int:
    """Cores this process may use (its CPU affinity where the OS reports it): the default update threads and
    ``train.n_envs``."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


@contextmanager
def unchecked_distributions() -> Iterator[None]:
    """Inside the block torch distributions skip their argument checks; the previous default comes back after."""
    from torch.distributions import Distribution

    previous = Distribution._validate_args
    Distribution.set_default_validate_args(False)
    try:
        yield
    finally:
        Distribution.set_default_validate_args(previous)


def phase_threads(rollout_threads: int = 1, update_threads: int | None = None) -> Any:
    """An SB3 callback: ``rollout_threads`` torch threads while collecting, ``update_threads`` while updating.

    It also checks each finished rollout for non-finite values or
    log-probabilities (the check :func:`unchecked_distributions` turns off
    per call), and restores the thread count ``learn`` started with.
    """
    import numpy as np
    import torch
    from stable_baselines3.common.callbacks import BaseCallback

    n_update = int(update_threads or usable_cores())
    n_rollout = int(rollout_threads)

    class PhaseThreads(BaseCallback):
        def _on_training_start(self) -> None:
            self.threads_at_start = torch.get_num_threads()

        def _on_rollout_start(self) -> None:
            torch.set_num_threads(n_rollout)

        def _on_rollout_end(self) -> None:
            buf = getattr(self.model, "rollout_buffer", None)
            if buf is not None:
                for name in ("values", "log_probs"):
                    arr = getattr(buf, name, None)
                    if arr is not None and not np.isfinite(arr).all():
                        raise FloatingPointError(
                            f"non-finite {name} in the rollout ending at step {self.num_timesteps}: the policy "
                            "network produced NaN or inf (lower the learning rate, or check the observations)")
            torch.set_num_threads(n_update)

        def _on_training_end(self) -> None:
            torch.set_num_threads(self.threads_at_start)

        def _on_step(self) -> bool:
            return True

    return PhaseThreads()


def learn(model: Any, total_timesteps: int, callback: Any = None, rollout_threads: int = 1,
          update_threads: int | None = None, **kwargs: Any) -> Any:
    """``model.learn(total_timesteps, callback, **kwargs)`` with :func:`phase_threads` and unchecked distributions.

    ``callback``: None, one callback or a list; :class:`PhaseThreads` runs
    after it, so a timer in ``callback`` closes its rollout before the
    thread count changes. Returns what ``model.learn`` returns (the model).
    """
    from stable_baselines3.common.callbacks import CallbackList

    callbacks = [] if callback is None else list(callback) if isinstance(callback, (list, tuple)) else [callback]
    callbacks.append(phase_threads(rollout_threads, update_threads))
    with unchecked_distributions():
        return model.learn(total_timesteps=total_timesteps, callback=CallbackList(callbacks), **kwargs)
