"""Task ids that replay an episode exactly, and task lists per split in the form trainers take.

Why task ids: group-relative trainers (GRPO, verifiers' several rollouts per
task) compare rollouts of *the same task*; the comparison only means
something when each rollout starts from the same state. A :class:`TaskId`
names everything that decides the start - dataset, document, question
(episode id), budget and seed - and ``MageChatEnv.reset(options={"task":
str(task_id)})`` replays it: same entry pages, same candidates and text,
same reward for the same calls (a property test checks it).

Why a ``datasets.Dataset``: it is what TRL's trainers and verifiers take.
Rows hold the prompt messages and public info (dataset, document, question,
budget) and never the gold (answers, evidence pages); the env keeps the gold
sealed and pays the reward.
"""
from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from mage_gym.env.budget import COUNT_KEYS, Budget

_BUDGET_KEYS = COUNT_KEYS
_TOKENS = "tok"  # the optional reader-token budget part: ``-tok5355`` (absent when the budget has none)


@dataclass(frozen=True)
class TaskId:
    """``dataset/document/episode/k5-m4-M24-T6-B16/s0``; the three names are percent-encoded.

    Under a reader-token budget the budget part ends in ``-tok<int>`` (``k5-m4-M24-T6-B16-tok5355``);
    without one it is what it always was, so earlier task ids still name the same tasks.
    """

    dataset: str
    doc_id: str
    episode_id: str
    budget: Budget = Budget()
    seed: int = 0

    def __str__(self) -> str:
        q = lambda s: urllib.parse.quote(str(s), safe="")  # noqa: E731
        b = "-".join(f"{k}{getattr(self.budget, k)}" for k in _BUDGET_KEYS)
        if self.budget.tokens is not None:
            b += f"-{_TOKENS}{self.budget.tokens}"
        return f"{q(self.dataset)}/{q(self.doc_id)}/{q(self.episode_id)}/{b}/s{int(self.seed)}"

    @classmethod
    def parse(cls, text: "str | TaskId") -> "TaskId":
        """Read a task id string; a malformed one raises ValueError naming the part that is wrong."""
        if isinstance(text, TaskId):
            return text
        parts = str(text).split("/")
        if len(parts) != 5:
            raise ValueError(f"task id {text!r} must be dataset/document/episode/budget/seed "
                             "(e.g. synth/doc0/doc0-q1/k5-m4-M24-T6-B16/s0)")
        dataset, doc, episode, budget, seed = parts
        values: dict[str, int] = {}
        for item in budget.split("-"):
            key = _TOKENS if item.startswith(_TOKENS) else item[:1]
            num = item[len(key):]
            if key not in _BUDGET_KEYS + (_TOKENS,) or not num.isdigit() or key in values:
                raise ValueError(f"task id {text!r}: budget part {budget!r} must read "
                                 "k<int>-m<int>-M<int>-T<int>-B<int>, optionally then -tok<int>")
            values[key] = int(num)
        tokens = values.pop(_TOKENS, None)
        if set(values) != set(_BUDGET_KEYS):
            raise ValueError(f"task id {text!r}: budget part {budget!r} must name k, m, M, T and B")
        if not (seed.startswith("s") and seed[1:].lstrip("-").isdigit()):
            raise ValueError(f"task id {text!r}: seed part {seed!r} must read s<int>")
        u = urllib.parse.unquote
        try:
            parsed = Budget(**values, tokens=tokens)
        except ValueError as err:
            raise ValueError(f"task id {text!r}: {err}") from None
        return cls(u(dataset), u(doc), u(episode), parsed, int(seed[1:]))


def public_fields(episode: Any) -> tuple[str, str, str]:
    """(episode_id, doc_id, question) of an Episode or CompositeEpisode: the only fields a task list reads."""
    question = getattr(episode, "question", None)
    if question is None:  # a composite episode: its first turn's question
        question = episode.turns[0].question
    doc_id = getattr(episode, "doc_id", None) or "+".join(getattr(episode, "doc_ids", ()))
    return str(episode.episode_id), str(doc_id), str(question)


def dataset_label(episodes: Iterable[Any]) -> str:
    """The benchmark name the episodes share (``custom`` when they do not, or do not say)."""
    names = set()
    for item in episodes:
        ep = getattr(item, "episode", item[0] if isinstance(item, tuple) else item)
        names.add(str(getattr(ep, "benchmark", None) or getattr(ep, "source", None) or "custom"))
        if len(names) > 1:
            return "custom"
    return names.pop() if names else "custom"


def task_rows(episodes: Sequence[Any], dataset: str, *, budget: Budget | Mapping[str, int] | None = None,
              seeds: Sequence[int] = (0,), split: str = "all", tools_in_prompt: bool = True) -> list[dict[str, Any]]:
    """One row per (episode, seed): ``prompt`` (system + user messages), ``task`` (id) and ``info`` (public).

    ``tools_in_prompt=False`` leaves the tool list out of the system message,
    for trainers whose chat template renders ``tools=`` (TRL).
    """
    from mage_gym.agent.prompts import CHAT_PROMPT_VERSION, system_prompt, user_intro

    b = Budget.coerce(budget)
    system = system_prompt(tools_in_prompt)
    rows = []
    for ep in episodes:
        ep = getattr(ep, "episode", ep[0] if isinstance(ep, tuple) else ep)
        episode_id, doc_id, question = public_fields(ep)
        for seed in seeds:
            task = TaskId(dataset, doc_id, episode_id, b, int(seed))
            rows.append({
                "prompt": [{"role": "system", "content": system}, {"role": "user", "content": user_intro(question)}],
                "task": str(task),
                "info": {"dataset": dataset, "split": split, "doc_id": doc_id, "episode_id": episode_id,
                         "question": question, "budget": b.to_dict(), "seed": int(seed),
                         "prompt_version": CHAT_PROMPT_VERSION},
            })
    return rows


def task_dataset(dataset: str, split: str = "train", *, root: str | None = None, limit: int | None = None,
                 budget: Budget | Mapping[str, int] | None = None, seeds: Sequence[int] = (0,),
                 tools_in_prompt: bool = True, data_seed: int = 0) -> Any:
    """The tasks of a benchmark split as a ``datasets.Dataset`` (needs the ``llm-train`` extra)."""
    from datasets import Dataset

    from mage_gym.data.registry import require_episodes

    episodes = require_episodes(dataset, root=root, split=split, limit=limit, seed=data_seed)
    return Dataset.from_list(task_rows(episodes, dataset, budget=budget, seeds=seeds, split=split,
                                       tools_in_prompt=tools_in_prompt))
