"""The policy interface the harness drives: the Policy protocol, what a policy may know at reset, a registry.

Why here, below ``policies/``: the harness (:mod:`mage_gym.bench.play`,
:mod:`mage_gym.bench.benchmark`) plays any controller through this protocol
and builds them through a :class:`PolicyRegistry` it is handed, so it never
imports a policy; ``policies/`` implements the protocol and provides the
registry (``policies.REGISTRY``).

Every policy - rules, an LLM, a learned network - is driven by the same loop
through the environment's public API only: the numeric observation, the
action mask and the text view. Nothing here gives a policy access to gold or
env internals. Two levels of decision exist because the environment has two
interfaces:

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
from typing import Any, Mapping, Protocol, Sequence, Union, runtime_checkable

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
    (``"visual"``/``"text"``/``"elements"``) or None to use the environment's.
    """

    name: str
    level: str
    uses_text_view: bool
    render_mode: str | None

    def reset(self, env_info: EnvInfo) -> None: ...

    def act(self, obs: Mapping[str, np.ndarray], text_view: str | None, mask: np.ndarray) -> Action: ...


@runtime_checkable
class PolicyRegistry(Protocol):
    """What the harness needs to build policies by name (``policies.REGISTRY`` is the project's).

    ``learned_checkpoint(name, options)`` is the checkpoint file a learned
    policy would act with (None for rule policies), so result rows can name
    it (path and sha256).
    """

    def names(self) -> Sequence[str]: ...

    def policy_class(self, name: str) -> type: ...

    def make(self, name: str, **options: Any) -> Policy: ...

    def learned_checkpoint(self, name: str, options: Mapping[str, Any]) -> str | None: ...
