"""Drive any policy through one episode of the environment - the one loop every experiment uses.

Why one loop: benchmark, training-time evaluation and tests must run every
policy the same way, through the env's public interfaces only: ``step`` with
a flat action for step-level policies, ``submit_round`` for round-level ones,
the mask and the text view read before each decision. Everything is reached
with ``env.get_wrapper_attr``, so wrappers (traces, shaping, text view in
``info``) see every move, LLM rounds included.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from mage_gym.env import RoundDecision
from policies.base import EnvInfo, Policy


@dataclass
class EpisodeResult:
    """What one episode gave: the return, the env's terminal info, and how the policy behaved."""

    episode_id: str
    reward: float  # sum of rewards over the episode (terminal reward unless shaping is on)
    components: dict[str, Any]  # info["reward_components"]
    metrics: dict[str, Any]  # info["metrics"] (evidence metrics, counters, stop reason)
    answer: str | None  # the reader's answer (None for the oracle reader)
    decisions: int  # act() calls
    invalid: int  # step actions outside the mask + refused parts of round decisions
    wall_s: float
    errors: list[str] = field(default_factory=list)


def run_episode(env: Any, policy: Policy, episode_id: str | None = None, seed: int | None = None,
                max_decisions: int | None = None) -> EpisodeResult:
    """Reset ``env`` (optionally on ``episode_id``), let ``policy`` act until the episode ends.

    ``max_decisions`` guards against a policy that never stops (default: the
    budget's step cap plus T, per turn); when hit, Stop is sent. In a
    conversation the policy is reset again with each new question
    (``info["turn_end"]``), so per-question plans start afresh while the env
    carries the working subgraph.
    """
    t0 = time.perf_counter()
    get = env.get_wrapper_attr  # reaches the env's methods through any wrappers (the outermost one wins)
    options = {"episode_id": episode_id} if episode_id is not None else None
    obs, info = env.reset(seed=seed, options=options)
    if getattr(policy, "needs_env", False):  # reads the env's public graph and slots (graph_follower)
        policy.bind(env)  # (the privileged oracle is never bound here: binding it stays a deliberate act)
    policy.reset(EnvInfo.from_env(env, seed=seed))
    budget = get("budget")
    action_masks, text_view, submit_round = get("action_masks"), get("text_view"), get("submit_round")
    limit = max_decisions if max_decisions is not None else budget.max_steps + budget.T + 2
    total, decisions, invalid, turn_decisions = 0.0, 0, 0, 0
    errors: list[str] = []
    done = False
    while not done:
        mask = action_masks()
        view = text_view() if policy.uses_text_view else None
        if turn_decisions >= limit:
            action: Any = 0 if policy.level == "step" else RoundDecision(stop=True)
            errors.append(f"policy did not stop within {limit} decisions; sent Stop")
        else:
            action = policy.act(obs, view, mask)
        decisions += 1
        turn_decisions += 1
        if isinstance(action, (RoundDecision, Mapping)):
            obs, reward, terminated, truncated, info = submit_round(action, raw=getattr(policy, "last_raw", None))
            errs = info.get("errors") or ([info["last_action_error"]] if info.get("last_action_error") else [])
            invalid += len(errs)
            errors.extend(errs)
        else:
            a = int(action)
            if not (0 <= a < len(mask)) or not mask[a]:
                invalid += 1
                errors.append(f"action {a} outside the mask")
            obs, reward, terminated, truncated, info = env.step(a)
        total += float(reward)
        done = bool(terminated or truncated)
        if info.get("turn_end") and not done:  # the next question of a conversation
            policy.reset(EnvInfo.from_env(env, seed=seed))
            turn_decisions = 0
    out = get("last_reader_output")
    return EpisodeResult(
        episode_id=str(info.get("episode_id", episode_id)), reward=total,
        components=dict(info.get("reward_components", {})), metrics=dict(info.get("metrics", {})),
        answer=None if out is None else out.answer, decisions=decisions, invalid=invalid,
        wall_s=time.perf_counter() - t0, errors=errors,
    )


def mean_or_none(values: list[Any]) -> float | None:
    """Mean of the non-None values (bools count as 0/1), None when there are none."""
    vals = [float(v) for v in values if v is not None]
    return float(np.mean(vals)) if vals else None
