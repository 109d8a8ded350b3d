"""The LLM-controller entry points' shared harness (export_transcripts, train_llm, screen_tasks): episodes, chat
envs, actors.

Why one place: the transcripts an LLM is fine-tuned on, the tasks it is
trained on with GRPO and the benchmark it is compared in must use the same
env settings (``conf/env/``, ``conf/budget/``, ``conf/retriever/``, the
oracle reader) and the same chat settings (``chat:`` in the entry point's
config), so a model never trains under one view and is scored under another.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from mage_gym.bench.config import ConfigError, section
from mage_gym.bench.protocol import EnvInfo, PolicyRegistry
from mage_gym.bench.envs import env_kwargs


def chat_episodes(cfg: Mapping[str, Any], split: str | None = None) -> list[Any]:
    """The ``dataset`` node's episodes (``split`` overrides ``dataset.split``); a ConfigError when none."""
    from mage_gym.bench.episodes import load_episodes

    ds = section(cfg, "dataset")
    split = split or ds.get("split", "all")
    tags, skip = cfg.get("task_tags"), cfg.get("exclude_tags")  # e.g. [bridge]: the generator's question kinds
    episodes = load_episodes({**ds, "split": split, "task_tags": tags or ds.get("task_tags"),
                              "exclude_tags": skip or ds.get("exclude_tags")})
    if not episodes:
        raise ConfigError(f"dataset {ds['name']!r} (root={ds.get('root')!r}, split={split!r}, task_tags={tags}, "
                          f"exclude_tags={skip}) has no episodes")
    return episodes


def chat_kwargs(cfg: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    """``MageChatEnv`` keywords: the env node (budget, reward, K, parser, ...), retriever, reader, chat node."""
    kw = env_kwargs(cfg)
    kw.update({k: v for k, v in section(cfg, "chat").items() if v is not None})
    kw["dataset"] = section(cfg, "dataset")["name"]
    kw.update(extra)
    return kw


def grpo_task_rows(cfg: Mapping[str, Any], episodes: Sequence[Any], kw: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The task rows GRPO trains on (:func:`mage_gym.agent.tasks.task_rows`): one per episode and ``grpo.seeds``
    seed, in the chat keywords ``kw``'s dataset and budget; screen_tasks.py plays the same task ids."""
    from mage_gym.agent.tasks import task_rows

    return task_rows(episodes, kw["dataset"], budget=kw.get("budget"),
                     seeds=section(cfg, "grpo").get("seeds") or [0], split=section(cfg, "dataset").get("split", "all"),
                     tools_in_prompt=bool(kw.get("tools_in_prompt", False)))


def make_chat_env(episodes: Sequence[Any], cfg: Mapping[str, Any], **extra: Any) -> Any:
    from mage_gym.agent.chat_env import MageChatEnv

    return MageChatEnv(episodes=list(episodes), **chat_kwargs(cfg, **extra))


def policy_actor(env: Any, name: str, options: Mapping[str, Any], registry: PolicyRegistry) -> tuple[Callable, bool]:
    """(chat actor, privileged) for a step-level policy of ``policies`` acting through ``env``'s tool calls.

    The policy is reset (and bound, for the oracle) at the first reply of
    each episode; ``registry`` builds it by name (``policies.REGISTRY``); ``env`` must be built with ``numeric_obs_in_info=True``
    (and ``privileged=True`` for the oracle).
    """
    from mage_gym.agent.transcripts import step_actor

    opts = {k: v for k, v in dict(options).items() if k not in ("name", "limit", "only_base_budget", "train")}
    policy = registry.make(name, **opts)
    if getattr(policy, "level", "step") != "step":
        raise ConfigError(f"policy {name!r} decides whole rounds; transcripts need a step-level policy "
                          "(oracle, ppo, heuristic, ...)")
    privileged = bool(getattr(registry.policy_class(name), "privileged", False))
    chat_choice = getattr(policy, "chat_choice", None)
    if callable(chat_choice):  # a policy with its own moves for the chat's shorter candidate list (the oracle)
        def decide(obs: Any, mask: Any) -> Any:
            listed, _ = env.visible_ids()
            return chat_choice(obs, mask, listing_full=len(listed) >= env.view.max_candidates, listed=listed)
    else:
        def decide(obs: Any, mask: Any) -> Any:
            return policy.act(obs, None, mask)
    inner_act = step_actor(env, decide)

    def actor(messages: list[dict[str, Any]], info: Mapping[str, Any]) -> Any:
        if len(messages) <= 2:  # the first reply of an episode: (system, user) so far
            if privileged or getattr(policy, "needs_env", False):
                policy.bind(env.inner)
            policy.reset(EnvInfo.from_env(env.inner))
        return inner_act(messages, info)

    return actor, privileged
