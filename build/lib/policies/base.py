"""The one Policy protocol every controller implements, and what a policy may know at reset.

Why one small protocol: the benchmark compares policies "on the same
episodes, budgets and metrics", so every policy - rules, an LLM, a learned
network - is driven by the same loop (:mod:`policies.runner`) through the
environment's public API only: the numeric observation, the action mask and
the text view. Nothing here gives a policy access to gold or env internals.

Two levels of decision exist because the environment has two interfaces:

- ``level = "step"``: :meth:`Policy.act` returns one flat action id
  (:class:`~mage_gym.env.ActionLayout`: ``0`` = Stop, then one block of ``K``
  slots per operation) for ``env.step``;
- ``level = "round"``: :meth:`Policy.act` returns a
  :class:`~mage_gym.env.RoundDecision` for ``env.submit_round`` (the LLM
  evaluator's granularity: one decision per round), or the flat action ``0``
  to stop without a round (so no evaluator call is counted).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Union, runtime_checkable

import numpy as np

from mage_gym.env import ActionLayout, Budget, RoundDecision

#: What :meth:`Policy.act` returns.
Action = Union[int, RoundDecision]
LEVELS = ("step", "round")


@dataclass(frozen=True)
class EnvInfo:
    """The public facts of an episode a policy may use at reset (no gold)."""

    K: int
    n_actions: int
    budget: Budget
    render_mode: str
    episode_id: str = ""
    doc_id: str = ""
    question: str = ""
    seed: int | None = None
    turn: int = 0  # the question's index in a conversation (0 for single questions)
    relevance_columns: tuple[str, ...] | None = None  # what the observation's relevance columns hold (None: unknown)

    @property
    def layout(self) -> ActionLayout:
        """Where each (operation, slot) sits in the flat action space."""
        return ActionLayout(self.K)

    @classmethod
    def from_env(cls, env: Any, seed: int | None = None) -> "EnvInfo":
        """Read the public properties of a (possibly wrapped) ``MageRAGEnv`` after ``reset``."""
        get = env.get_wrapper_attr
        public = get("public_episode")
        K = int(get("K"))
        return cls(K=K, n_actions=ActionLayout(K).n, budget=get("budget"), render_mode=str(get("render_mode")),
                   episode_id=public["episode_id"], doc_id=public["doc_id"], question=public["question"],
                   seed=seed, turn=_turn_of(get), relevance_columns=_relevance_columns_of(get))


def _relevance_columns_of(get: Any) -> tuple[str, ...] | None:
    """The env retriever's relevance columns (``mage_gym.env.relevance.relevance_columns``); None for test doubles
    without a retriever."""
    from mage_gym.env.relevance import relevance_columns

    try:
        retriever = get("retriever")
    except AttributeError:
        return None
    return relevance_columns(retriever)


def _turn_of(get: Any) -> int:
    """The env's current turn (0 for envs without conversations, e.g. test doubles)."""
    try:
        return int(get("turn"))
    except AttributeError:
        return 0


@runtime_checkable
class Policy(Protocol):
    """A controller policy.

    ``name``: registry name; ``level``: ``"step"`` or ``"round"``;
    ``uses_text_view``: whether :meth:`act` needs the text view (it is only
    built for those that do - it costs milliseconds per call);
    ``render_mode``: the reader input this policy is defined with
    (``"visual"``/``"text"``) or None to use the environment's.
    """

    name: str
    level: str
    uses_text_view: bool
    render_mode: str | None

    def reset(self, env_info: EnvInfo) -> None: ...

    def act(self, obs: Mapping[str, np.ndarray], text_view: str | None, mask: np.ndarray) -> Action: ...


class BasePolicy:
    """Defaults for the protocol's attributes plus per-run counters (``stats``)."""

    name = "base"
    level = "step"
    uses_text_view = False

    def __init__(self, render_mode: str | None = None, **unused: Any) -> None:
        if render_mode not in (None, "visual", "text"):
            raise ValueError(f"render_mode must be visual, text or null, got {render_mode!r}")
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
    implicitly; ``needs_env`` policies are bound by :func:`policies.runner.run_episode`).
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
