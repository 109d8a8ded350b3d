"""Wrappers for what is not the transition: traces, the text view in ``info``, reward shaping.

Why wrappers (Gymnasium's way): the env class stays the transition (reset,
step, masks, render, the round API) and each extra behaviour is a small
object one adds or leaves out. The env has three ways to move: ``step``,
``submit_round`` (LLM rounds) and ``operate`` (scripted); a wrapper that
changes what a move returns implements all three
(:class:`TransitionWrapper`), and callers reach the outermost one with
``env.get_wrapper_attr("submit_round")`` like any other env method.

- :class:`TraceRecording`: JSONL traces (:mod:`mage_gym.trace`), every
  operation including those inside an LLM round;
- :class:`TextViewInfo`: ``info["text_view"]`` at reset and before the end;
- :class:`PotentialShaping`: ``gamma * phi(s') - phi(s)`` per move with
  ``phi`` = the gold coverage of the state, so it needs an env built with
  ``privileged=True`` and raises otherwise.
"""
from __future__ import annotations

import os
from typing import Any, Mapping, SupportsFloat

import gymnasium as gym

from mage_gym.trace import TraceRecorder

Step = tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]


class TransitionWrapper(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Base: one hook, :meth:`transition`, applied to every move (step, LLM round, scripted operation)."""

    def step(self, action: Any) -> Step:
        return self.transition(*self.env.step(action))

    def submit_round(self, decision: Any, raw: str | None = None) -> Step:
        return self.transition(*self.env.get_wrapper_attr("submit_round")(decision, raw=raw))

    def operate(self, op: Any, node: Any = None, query: str | None = None, reason: str | None = None) -> Step:
        return self.transition(*self.env.get_wrapper_attr("operate")(op, node, query=query, reason=reason))

    def transition(self, obs: Any, reward: SupportsFloat, terminated: bool, truncated: bool,
                   info: dict[str, Any]) -> Step:
        return obs, reward, terminated, truncated, info


class TraceRecording(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Record every episode as JSONL records (``path``) and keep the current one in ``trace.records``.

    The recorder observes the base env's transition (``add_observer``), so
    operations inside ``submit_round`` and the final open pass are recorded
    even though they never pass through ``step``.
    """

    def __init__(self, env: gym.Env, path: str | os.PathLike[str] | None = None) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, path=None if path is None else str(path))
        gym.Wrapper.__init__(self, env)
        self.trace = TraceRecorder(path)
        env.get_wrapper_attr("add_observer")(self.trace)

    def close(self) -> None:
        self.env.get_wrapper_attr("remove_observer")(self.trace)
        super().close()


class TextViewInfo(TransitionWrapper):
    """Put the text view in ``info["text_view"]`` after reset and after every move that does not end the episode."""

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        info["text_view"] = self.env.get_wrapper_attr("text_view")()
        return obs, info

    def transition(self, obs, reward, terminated, truncated, info):
        if not (terminated or truncated):
            info["text_view"] = self.env.get_wrapper_attr("text_view")()
        return obs, reward, terminated, truncated, info


class PotentialShaping(TransitionWrapper):
    """Potential-based reward shaping (Ng et al., 1999): ``scale * (gamma * phi(s') - phi(s))`` per move.

    ``phi`` is the gold coverage the current working subgraph would give the
    reader (:func:`mage_gym.reward.potential`), and 0 once the episode is over,
    so with ``gamma = 1`` an episode's shaping terms add up to ``-phi(s0)``
    and optimal policies do not change. A submitted LLM round is one move.
    The potential reads gold, so the env must be built with ``privileged=True``.
    """

    def __init__(self, env: gym.Env, gamma: float = 1.0, scale: float = 1.0) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, gamma=gamma, scale=scale)
        gym.Wrapper.__init__(self, env)
        if not env.get_wrapper_attr("privileged"):
            from mage_gym.env.privileged import PrivilegedAccessError

            raise PrivilegedAccessError("PotentialShaping reads gold: build the env with privileged=True")
        self.gamma, self.scale = float(gamma), float(scale)
        self._gold = None
        self._whole_text = None
        self._phi = 0.0

    def _potential(self) -> float:
        from mage_gym.reward import potential

        state = self.env.get_wrapper_attr("state")
        visual = self.env.get_wrapper_attr("render_mode") == "visual"
        gi = state.gi
        return potential(self._gold, state.node_state, gi.node_page, gi.n_pages, visual, self._gold.answerable,
                         None if visual else self._whole_text)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self._gold = self.env.get_wrapper_attr("privileged_view")()
        if self.env.get_wrapper_attr("render_mode") != "visual":
            from mage_gym.render import whole_text_pages

            self._whole_text = whole_text_pages(self.env.get_wrapper_attr("graph"),
                                                self.env.get_wrapper_attr("render_config"),
                                                self.env.get_wrapper_attr("render_mode"))
        self._phi = self._potential()
        return obs, info

    def transition(self, obs, reward, terminated, truncated, info):
        phi = 0.0 if (terminated or truncated) else self._potential()
        reward = float(reward) + self.scale * (self.gamma * phi - self._phi)
        self._phi = phi
        return obs, reward, terminated, truncated, info


def wrap(env: gym.Env, *, trace: bool | str | os.PathLike[str] = False, text_view_in_info: bool = False,
         shaping: bool | Mapping[str, Any] = False) -> gym.Env:
    """Apply the wrappers asked for: shaping (``True`` or ``{"gamma", "scale"}``), text view in info, traces.

    ``trace``: a JSONL path, or ``True`` to keep the records in memory only.
    """
    if shaping:
        opts = dict(shaping) if isinstance(shaping, Mapping) else {}
        env = PotentialShaping(env, **opts)
    if text_view_in_info:
        env = TextViewInfo(env)
    if trace is not False and trace is not None:
        env = TraceRecording(env, None if trace is True else trace)
    return env


__all__ = ["PotentialShaping", "TextViewInfo", "TraceRecording", "TransitionWrapper", "wrap"]
