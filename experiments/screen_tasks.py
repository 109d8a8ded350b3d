"""Screen GRPO's training tasks: play each a few times with the starting model, sampled, and keep those that vary.

Run (from the repo root), with the overrides the GRPO run will use::

    .venv/bin/python experiments/screen_tasks.py model=policies/checkpoints/llm_controller_smollm2 \
        dataset=synth dataset.root=data_out/synth/grpo_seed7 dataset.split=train dataset.limit=60 \
        'task_tags=[bridge]' env.parser=fast budget=tight grpo.max_tool_calling_iterations=6
    # then: experiments/train_llm.py algo=grpo ... grpo.tasks_from=<this run's dir>/results.json

Why: see :mod:`mage_gym.agent.screening` (GRPO learns only from groups whose
outcomes differ; most randomly drawn tasks give none). The config extends
``conf/train_llm.yaml``, so the model, tasks, chat settings, sampling
temperature and tool rounds are the GRPO run's own. Each task is played
``screen.samples`` times at ``grpo.temperature`` (``screen.temperature``
overrides it), ended after ``grpo.max_tool_calling_iterations`` replies as a
rollout is. ``screen.workers`` processes (one torch thread each) share the
tasks; the plays' seeds depend only on (``screen.seed``, task, sample), so
the result does not depend on the number of workers.

Writes ``results.json`` into the Hydra run directory: the settings, each
task's plays (support, recall, tokens, replies) and whether they varied, and
a summary (tasks with spread, their share, one worker's seconds per play).
"""
from __future__ import annotations

import json
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Mapping

import hydra
from omegaconf import DictConfig

from mage_gym.bench.chat import chat_episodes, chat_kwargs, grpo_task_rows, make_chat_env
from mage_gym.bench.config import (ConfigError, exit_on_config_error, plain, quiet_libraries, run_dir, section,
                                   set_threads)
from mage_gym.bench.results import budget_dict

#: per worker process: the chat env and the model, loaded once by :func:`_load_player`
_WORKER: dict[str, Any] = {}


def screen_settings(c: Mapping[str, Any]) -> dict[str, Any]:
    """The screen's settings, GRPO's where ``screen`` leaves them null; a ConfigError for values that cannot screen."""
    s, g = section(c, "screen"), section(c, "grpo")
    out = {"samples": int(s.get("samples") or 0),
           "temperature": float(s["temperature"] if s.get("temperature") is not None else g.get("temperature", 1.0)),
           "max_replies": int(s.get("max_replies") or g.get("max_tool_calling_iterations") or 8),
           "max_new_tokens": int(s.get("max_new_tokens") or 128),
           "workers": max(1, int(s.get("workers") or 1)), "seed": int(s.get("seed") or 0)}
    if out["samples"] < 2:
        raise ConfigError(f"screen.samples={out['samples']}: spread needs at least 2 plays per task")
    if out["temperature"] <= 0:
        raise ConfigError(f"screen temperature {out['temperature']}: greedy plays repeat, so they cannot vary")
    return out


def _load_player(c: Mapping[str, Any], threads: int | None, max_new_tokens: int) -> None:
    from mage_gym.agent.models import load_model
    from mage_gym.agent.rollout import LocalChatModel

    quiet_libraries()
    set_threads(threads)
    model, tokenizer = load_model(str(c["model"]), dtype=c.get("dtype", "float32"), device=c.get("device", "cpu"),
                                  force_template=bool(c.get("force_template")))
    _WORKER["env"] = make_chat_env(chat_episodes(c), c)
    _WORKER["player"] = LocalChatModel(model, tokenizer, max_new_tokens=max_new_tokens)


def _screen_one(task: str, settings: Mapping[str, Any]) -> Any:
    from mage_gym.agent.screening import screen_task

    return screen_task(_WORKER["env"], _WORKER["player"], task, samples=settings["samples"],
                       temperature=settings["temperature"], max_replies=settings["max_replies"],
                       seed=settings["seed"])


def run_screen(c: Mapping[str, Any], tasks: list[str], settings: Mapping[str, Any]) -> list[Any]:
    """Each task's screen, in task order; with several workers each process loads the model once."""
    from mage_gym.progress import progress_bar

    bar = progress_bar(total=len(tasks), desc="screen", unit="task")
    done: dict[str, Any] = {}
    if settings["workers"] == 1:
        _load_player(c, c.get("torch_threads"), settings["max_new_tokens"])
        for task in tasks:
            done[task] = _screen_one(task, settings)
            bar.update(1)
    else:
        import multiprocessing

        with ProcessPoolExecutor(settings["workers"], mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_load_player, initargs=(c, 1, settings["max_new_tokens"])) as pool:
            futures = {pool.submit(_screen_one, task, settings): task for task in tasks}
            for future in as_completed(futures):
                done[futures[future]] = future.result()
                bar.update(1)
                bar.set_postfix(with_spread=sum(d.spread for d in done.values()))
    bar.close()
    return [done[t] for t in tasks]


@hydra.main(version_base=None, config_path="../conf", config_name="screen_tasks")
@exit_on_config_error
def main(cfg: DictConfig) -> None:
    from mage_gym.agent.screening import screen_summary

    quiet_libraries()
    c = plain(cfg)
    settings = screen_settings(c)
    tasks = [row["task"] for row in grpo_task_rows(c, chat_episodes(c), chat_kwargs(c))]  # GRPO's own task ids
    out = run_dir()
    t0 = time.perf_counter()
    screens = run_screen(c, tasks, settings)
    wall = time.perf_counter() - t0
    # one worker's seconds per play: what a play costs on one core, whatever the number of workers
    summary = {**screen_summary(screens), "wall_s": wall,
               "worker_seconds_per_play": wall * settings["workers"] / max(1, len(tasks) * settings["samples"])}
    results = {"kind": "screen_tasks", "model": str(c["model"]), "dataset": section(c, "dataset"),
               "task_tags": c.get("task_tags"), "exclude_tags": c.get("exclude_tags"),
               "budget": budget_dict(section(c, "env").get("budget") or {}), "chat": section(c, "chat"),
               "settings": settings, "summary": summary, "tasks": [s.to_dict() for s in screens]}
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(json.dumps(summary, indent=1))
    print(f"results: {out / 'results.json'}  (train on them: grpo.tasks_from={out / 'results.json'})")


if __name__ == "__main__":
    main()
