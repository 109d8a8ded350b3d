"""Play episodes: any policy through the environment, one episode at a time - the one loop everything uses.

Why one loop: benchmark, training-time evaluation and tests must run every
policy the same way, through the env's public interfaces only: ``step`` with
a flat action for step-level policies, ``submit_round`` for round-level ones,
the mask and the text view read before each decision. Everything is reached
with ``env.get_wrapper_attr``, so wrappers (traces, shaping, text view in
``info``) see every move, LLM rounds included.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from mage_gym.env import RoundDecision
from mage_gym.bench.protocol import EnvInfo, Policy

log = logging.getLogger("mage_gym.bench.play")


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
    if getattr(policy, "level", "step") == "chat":  # tool calls through MageRAG-Chat-v0 over this same env
        return run_chat_episode(env, policy, episode_id, seed, t0)
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


def run_chat_episode(env: Any, policy: Any, episode_id: str | None = None, seed: int | None = None,
                     t0: float | None = None) -> EpisodeResult:
    """One episode of a ``level = "chat"`` policy: ``act_chat(messages, info)`` replies, the chat env acts.

    The chat env (:class:`mage_gym.agent.chat_env.MageChatEnv`) drives ``env``
    itself, so traces, the reader and the metrics are the same as for any
    other policy; the policy's chat settings are ``policy.chat_options``. A
    reply of None ends the episode without a model call (the reader reads).
    """
    from mage_gym.agent.chat_env import MageChatEnv
    from mage_gym.agent.transcripts import assistant_message

    t0 = time.perf_counter() if t0 is None else t0
    chat = MageChatEnv.wrap(env, **dict(getattr(policy, "chat_options", {}) or {}))
    messages, info = chat.reset(seed=seed, options={"episode_id": episode_id} if episode_id is not None else None)
    policy.reset(EnvInfo.from_env(env, seed=seed))
    convo = list(messages)
    total, decisions, invalid, done = 0.0, 0, 0, False
    errors: list[str] = []
    while not done:
        reply = policy.act_chat(convo, info)
        if reply is None:
            obs, reward, terminated, truncated, info = chat.finish("max_replies")
        else:
            obs, reward, terminated, truncated, info = chat.step(reply)
            convo.append(assistant_message(reply))
            decisions += 1
        convo.extend(obs)
        invalid += int(info.get("format_errors", 0)) + int(info.get("invalid_calls", 0))
        errors.extend(info.get("errors") or [])
        total += float(reward)
        done = bool(terminated or truncated)
    out = env.get_wrapper_attr("last_reader_output")
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


#: error kinds (:func:`mage_gym.readers.errors.error_kind`) that fail one episode; ``config`` and ``rate`` stop the run
EPISODE_ERROR_KINDS: tuple[str, ...] = ("request", "transient", "backend")


def stat_snapshot(policy: Any) -> dict[str, float]:
    return {k: v for k, v in dict(getattr(policy, "stats", {}) or {}).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def stat_delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """The policy's evaluator counters gained during one episode (empty for other policies)."""
    return {k: after[k] - before.get(k, 0) for k in after if k.startswith("evaluator_")}


def play_episodes(env: Any, policy: Any, episodes: Sequence[Any], seed: int = 0, desc: str = "episodes",
                  progress: bool = True, *, skip: Any = (), on_result: Any = None, on_failure: Any = None) -> list[Any]:
    """``policy`` on each episode in turn (episode ``i`` reset with ``seed + i``); one result per episode played.

    The single place where episodes are played for benchmarks and
    training-time evaluation. Episodes whose id is in ``skip`` are not played
    (a resumed run; the others keep their seeds). ``on_result(i, result,
    stats)`` is called after each episode with the evaluator counters it
    added. With ``on_failure``, a reader or evaluator error that outlived its
    retries (:data:`EPISODE_ERROR_KINDS`) calls ``on_failure(i, episode_id,
    error, stats)`` and the loop goes on; ``on_failure`` may raise to stop.
    Anything else (and everything, without ``on_failure``) propagates.
    """
    from mage_gym.progress import progress_bar
    from mage_gym.readers.errors import error_kind

    results: list[Any] = []
    bar = progress_bar(episodes, desc=desc, unit="ep", disable=not progress, leave=False)
    for i, ep in enumerate(bar):
        episode_id = episode_id_of(ep)
        if episode_id in skip:
            continue
        before = stat_snapshot(policy)
        try:
            r = run_episode(env, policy, episode_id, seed=seed + i)
        except Exception as err:
            if on_failure is None or error_kind(err) not in EPISODE_ERROR_KINDS:
                raise
            log.warning("episode %s failed: %s: %s", episode_id, type(err).__name__, err)
            on_failure(i, episode_id, err, stat_delta(before, stat_snapshot(policy)))
            continue
        results.append(r)
        if on_result is not None:
            on_result(i, r, stat_delta(before, stat_snapshot(policy)))
        bar.set_postfix(reward=f"{sum(x.reward for x in results) / len(results):.3f}")
    return results


def episode_id_of(item: Any) -> str:
    """The id of an Episode, a CompositeEpisode or a pre-built pair (``EnvEpisode``)."""
    return str(getattr(item, "episode_id", None) or item.episode.episode_id)
