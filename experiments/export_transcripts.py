"""Export a step-level policy's episodes as chat transcripts with tool calls (SFT data for an LLM controller).

Run (from the repo root)::

    .venv/bin/python experiments/export_transcripts.py dataset=synth dataset.root=data_out/synth/train24_s6 \
        dataset.split=train env.parser=fast policy_name=oracle          # the privileged teacher
    .venv/bin/python experiments/export_transcripts.py ... policy_name=ppo   # the shipped DAgger student

Each episode is played through ``MageRAG-Chat-v0`` (:mod:`mage_gym.agent`):
the policy sees the inner env's numeric observation and a mask restricted to
what the chat shows, and each action is written as one tool call, so the
transcript holds exactly the messages the chat env sends (never gold) and
calls it accepted. Writes ``transcripts.jsonl`` (one row per episode:
``messages``, ``tools``, ``task``, ``reward``, ``source``, ``privileged``,
...) and ``results.json`` (counts, mean reward, mean tool calls) into the run
directory. Rows of a privileged teacher say ``"privileged": true``; their
rewards are an upper bound, not a baseline.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig

from mage_gym.bench.config import exit_on_config_error, plain, quiet_libraries, run_dir, section, set_threads
from mage_gym.bench.chat import chat_episodes, make_chat_env, policy_actor
from mage_gym.bench.results import budget_dict
from policies import REGISTRY


@hydra.main(version_base=None, config_path="../conf", config_name="export_transcripts")
@exit_on_config_error
def main(cfg: DictConfig) -> None:
    from mage_gym.agent.transcripts import record_episode

    quiet_libraries()
    c = plain(cfg)
    set_threads(c.get("torch_threads"))
    out = run_dir()
    name = c["policy_name"]
    episodes = chat_episodes(c)
    env = make_chat_env(episodes, c, numeric_obs_in_info=True, privileged=name == "oracle")
    actor, privileged = policy_actor(env, name, section(c.get("policy", {}), name), REGISTRY)
    t0 = time.perf_counter()
    path = Path(c.get("out") or out / "transcripts.jsonl")
    path.parent.mkdir(parents=True, exist_ok=True)
    transcripts = []
    with open(path, "w") as f:  # row by row: a long export that stops early leaves what it recorded
        for i, ep in enumerate(episodes):
            for seed in c.get("seeds") or [0]:
                task = env.task_id(ep.episode_id, seed=int(seed))
                t = record_episode(env, actor, task=str(task), source=name, privileged=privileged)
                transcripts.append(t)
                f.write(json.dumps(t.row(), ensure_ascii=False, default=str) + "\n")
                f.flush()
            if (i + 1) % 100 == 0:
                print(f"{i + 1}/{len(episodes)} episodes, {time.perf_counter() - t0:.0f} s", flush=True)
    n = len(transcripts)
    calls = [sum(len(m.get("tool_calls") or []) for m in t.messages if m["role"] == "assistant") for t in transcripts]
    summary = {
        "kind": "transcripts", "policy": name, "privileged": privileged, "dataset": c["dataset"],
        "budget": budget_dict(c["env"]["budget"]), "chat": section(c, "chat"), "episodes": n, "path": str(path),
        "mean_reward": sum(t.reward for t in transcripts) / max(1, n),
        "mean_tool_calls": sum(calls) / max(1, n),
        "stopped_by_policy": sum(t.terminated for t in transcripts) / max(1, n),
        "seconds": time.perf_counter() - t0,
    }
    (out / "results.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
