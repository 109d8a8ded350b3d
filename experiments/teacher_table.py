"""Each teacher through MageRAG-Chat-v0 beside the same policy through MageRAG-v0, per dataset: do they agree?

Run (from the repo root)::

    .venv/bin/python experiments/teacher_table.py budget=tight env.parser=fast \
        sets.synth_bridge.root=data_out/synth/train_seed0 sets.synth_single.root=data_out/synth/train_seed0

Why: transcripts for supervised warm starts are recorded through the chat
(:func:`mage_gym.agent.transcripts.step_actor`), where a step-level policy
sees only what the chat shows (the listed candidates, the evidence held,
stop) and acts with tool calls. A teacher that plays worse there than in the
slot env teaches worse moves than it knows; this table measures it. Per set
(``sets``: dataset, split, generator tags, limit) and teacher
(``teachers``), each question is played twice on one env (privileged for
the oracle): through ``MageRAG-v0`` directly and through the chat. Rows:
page recall, reader tokens, reward, replies; the chat minus slot-env delta
of recall and tokens with a 95% bootstrap interval over questions. The
oracle reads gold only through the env's privileged view; its rows say so.
"""
from __future__ import annotations

import json
import time
from typing import Any, Mapping

import hydra
from omegaconf import DictConfig

from mage_gym.bench.config import exit_on_config_error, plain, quiet_libraries, run_dir, section, set_threads
from policies import REGISTRY


def _play_pair(chat: Any, name: str, opts: Mapping[str, Any], episodes: list[Any]) -> dict[str, list[dict]]:
    """Per question: the teacher's outcome through the slot env and through the chat (same env, same seed)."""
    from mage_gym.agent.transcripts import record_episode
    from mage_gym.bench.chat import policy_actor
    from mage_gym.bench.play import run_episode

    inner = chat.inner_env()
    policy = REGISTRY.make(name, **{k: v for k, v in opts.items() if k not in ("name", "limit", "only_base_budget")})
    if getattr(policy, "privileged", False) or getattr(policy, "needs_env", False):
        policy.bind(inner)
    actor, _ = policy_actor(chat, name, opts, REGISTRY)
    out: dict[str, list[dict]] = {"env": [], "chat": []}
    for ep in episodes:
        r = run_episode(inner, policy, episode_id=ep.episode_id, seed=0)
        out["env"].append(_row(r.metrics, r.reward, r.decisions))
        t = record_episode(chat, actor, task=str(chat.task_id(ep.episode_id, seed=0)), source=name)
        replies = sum(1 for m in t.messages if m["role"] == "assistant")
        out["chat"].append(_row(t.metrics, t.reward, replies))
    policy.close()
    return out


def _row(metrics: Mapping[str, Any], reward: float, decisions: int) -> dict[str, Any]:
    return {"recall": metrics.get("evidence_page_recall"), "tokens": float(metrics.get("tokens_rendered") or 0.0),
            "reward": float(reward), "decisions": int(decisions)}


def _mean(values: list[Any]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def _summary(pair: Mapping[str, list[dict]]) -> dict[str, Any]:
    from mage_gym.bench import paired_delta

    out: dict[str, Any] = {}
    for side in ("env", "chat"):
        rows = pair[side]
        out[f"recall_{side}"] = _mean([r["recall"] for r in rows])
        out[f"tokens_{side}"] = _mean([r["tokens"] for r in rows])
        out[f"reward_{side}"] = _mean([r["reward"] for r in rows])
        out[f"decisions_{side}"] = _mean([r["decisions"] for r in rows])
    gold = [i for i, r in enumerate(pair["env"]) if r["recall"] is not None and pair["chat"][i]["recall"] is not None]
    out["questions_with_gold"] = len(gold)
    if gold:
        out["delta_recall_chat_minus_env"] = paired_delta([pair["chat"][i]["recall"] for i in gold],
                                                          [pair["env"][i]["recall"] for i in gold])
    out["delta_tokens_chat_minus_env"] = paired_delta([r["tokens"] for r in pair["chat"]],
                                                      [r["tokens"] for r in pair["env"]])
    return out


@hydra.main(version_base=None, config_path="../conf", config_name="teacher_table")
@exit_on_config_error
def main(cfg: DictConfig) -> None:
    from mage_gym.agent.chat_env import MageChatEnv
    from mage_gym.bench.chat import chat_episodes, chat_kwargs

    quiet_libraries()
    c = plain(cfg)
    set_threads(c.get("torch_threads"))
    out = run_dir()
    t0 = time.perf_counter()
    runs = []
    for label, spec in section(c, "sets").items():
        if not spec or not spec.get("enabled", True):
            continue
        ds = {k: v for k, v in spec.items() if k not in ("task_tags", "exclude_tags", "enabled", "teachers")}
        sub = {**c, "dataset": ds, "task_tags": spec.get("task_tags"), "exclude_tags": spec.get("exclude_tags")}
        episodes = chat_episodes(sub)
        for name in spec.get("teachers") or c["teachers"]:
            privileged = bool(getattr(REGISTRY.policy_class(name), "privileged", False))
            chat = MageChatEnv(episodes=episodes, **chat_kwargs(sub, numeric_obs_in_info=True, privileged=privileged))
            t1 = time.perf_counter()
            pair = _play_pair(chat, name, section(c.get("policy", {}), name), episodes)
            chat.close()
            runs.append({"policy": name, "dataset": label, "split": ds.get("split"), "budget": c["env"]["budget"],
                         "privileged": privileged, "episodes": len(episodes),
                         "metrics": _summary(pair), "seconds": time.perf_counter() - t1, "per_question": pair})
            m = runs[-1]["metrics"]
            print(f"{label:14s} {name:15s} recall env {m['recall_env']} chat {m['recall_chat']}  "
                  f"tokens env {m['tokens_env']:.0f} chat {m['tokens_chat']:.0f}", flush=True)
    results = {"kind": "teacher_table", "chat": section(c, "chat"), "budget": c["env"]["budget"],
               "seconds": time.perf_counter() - t0,
               "runs": [{k: v for k, v in r.items() if k != "per_question"} for r in runs]}
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    (out / "per_question.json").write_text(json.dumps({f"{r['dataset']}/{r['policy']}": r["per_question"]
                                                        for r in runs}, default=str))
    print(f"results: {out / 'results.json'}")


if __name__ == "__main__":
    main()
