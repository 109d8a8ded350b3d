"""Which training tasks can teach GRPO: each task played a few times by the starting model, sampled.

Why: GRPO learns only from a group whose rollouts' outcomes differ (with
``grpo.require_outcome_spread`` only those groups update). Measured in
llm_grpo_smollm2_cpu, 13 of the 34 groups drawn from the train tasks had
outcome spread, so most of a step's rollout time went to groups that taught
nothing. Playing each task a few times with the starting model, sampled as
GRPO samples, and training only on the tasks whose outcome varied spends the
rollouts where they can teach (``grpo.tasks_from`` in
``experiments/train_llm.py``).

The outcome is the answer support of the env's terminal reward, the measure
:func:`mage_gym.agent.trl_env.outcome_spread` judges groups by, so a task
kept here is one whose group would pass that filter at the start; the model
moves as it trains, so a kept task may stop varying later. Screening reads
nothing the trainer's reward does not already read.
"""
from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

#: outcomes closer than this count as equal
SPREAD_TOLERANCE = 1e-9


def outcome_varies(values: Sequence[float]) -> bool:
    """Whether a group's outcomes (answer supports) differ: the one test of spread for groups and screens."""
    return len(values) > 1 and max(values) - min(values) > SPREAD_TOLERANCE


@dataclass(frozen=True)
class TaskScreen:
    """One task's sampled plays: per play the answer support, page recall (None without gold pages), tokens
    read and replies written."""

    task: str
    support: tuple[float, ...]
    recall: tuple[float | None, ...]
    tokens: tuple[float, ...]
    replies: tuple[int, ...]

    @property
    def spread(self) -> bool:
        return outcome_varies(self.support)

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "spread": self.spread, "support": list(self.support),
                "recall": list(self.recall), "tokens": list(self.tokens), "replies": list(self.replies)}


def sample_seed(seed: int, task: str, sample: int) -> int:
    """The torch seed of one sampled play: fixed by (seed, task, sample), so a screen repeats however its tasks
    are split between workers."""
    return (int(seed) * 1_000_003 + zlib.crc32(task.encode()) * 101 + int(sample)) % (2**31 - 1)


def screen_task(env: Any, model: Any, task: str, *, samples: int, temperature: float, max_replies: int,
                seed: int = 0) -> TaskScreen:
    """``task`` played ``samples`` times by ``model`` (a :class:`~mage_gym.agent.rollout.LocalChatModel`) at
    ``temperature``, each play ended after ``max_replies`` replies as a GRPO rollout ends after its tool rounds."""
    import torch

    from mage_gym.agent.rollout import play_task

    if samples < 2:
        raise ValueError(f"samples={samples}: spread needs at least 2 plays of a task")
    if temperature <= 0:
        raise ValueError(f"temperature={temperature}: greedy plays repeat, so they cannot show spread")
    plays = []
    for i in range(samples):
        torch.manual_seed(sample_seed(seed, task, i))
        plays.append(play_task(env, model, task, max_replies=max_replies, temperature=temperature))
    return TaskScreen(task=task,
                      support=tuple(float(p.get("support") or 0.0) for p in plays),
                      recall=tuple(p["recall"] for p in plays),
                      tokens=tuple(float(p["tokens"] or 0.0) for p in plays),
                      replies=tuple(int(p["replies"]) for p in plays))


def screen_summary(screens: Sequence[TaskScreen]) -> dict[str, Any]:
    """How many tasks varied, and the plays' mean support and tokens."""
    n = len(screens)
    kept = sum(s.spread for s in screens)
    plays = [v for s in screens for v in s.support]
    tokens = [v for s in screens for v in s.tokens]
    return {"tasks": n, "tasks_with_spread": kept, "share_with_spread": kept / n if n else None,
            "plays": len(plays), "mean_support": sum(plays) / len(plays) if plays else None,
            "mean_tokens": sum(tokens) / len(tokens) if tokens else None}


def tasks_with_spread(paths: str | Path | Iterable[str | Path]) -> list[str]:
    """The task ids whose plays varied, from one or more ``screen_tasks.py`` results.json files (in file order,
    each once)."""
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if not paths:
        raise ValueError("no screen results given")
    kept: dict[str, None] = {}
    for path in map(Path, paths):
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no screen results there (experiments/screen_tasks.py writes "
                                    f"<run dir>/results.json)")
        data = json.loads(path.read_text())
        if data.get("kind") != "screen_tasks" or not isinstance(data.get("tasks"), list):
            raise ValueError(f"{path}: not a screen_tasks results.json (kind={data.get('kind')!r})")
        kept.update((t["task"], None) for t in data["tasks"] if outcome_varies(t["support"]))
    return list(kept)
