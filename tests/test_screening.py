"""Task screening for GRPO (mage_gym/agent/screening.py) and the training script's filter on its results."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mage_gym.agent import screening
from mage_gym.agent.screening import (TaskScreen, outcome_varies, sample_seed, screen_summary, screen_task,
                                      tasks_with_spread)


def _screen_file(path: Path, supports: dict[str, list[float]]) -> Path:
    tasks = [{"task": t, "spread": outcome_varies(s), "support": s, "recall": [None] * len(s),
              "tokens": [1.0] * len(s), "replies": [1] * len(s)} for t, s in supports.items()]
    path.write_text(json.dumps({"kind": "screen_tasks", "tasks": tasks}))
    return path


def test_an_outcome_varies_only_when_two_plays_differ_beyond_rounding() -> None:
    assert outcome_varies([0.5, 0.5, 1.0])
    assert not outcome_varies([0.5, 0.5, 0.5])
    assert not outcome_varies([0.5, 0.5 + 1e-12])
    assert not outcome_varies([1.0])  # one play shows nothing


def test_a_screen_summary_counts_the_tasks_that_varied() -> None:
    screens = [TaskScreen("a", (0.0, 1.0), (0.0, 1.0), (10.0, 30.0), (1, 2)),
               TaskScreen("b", (0.5, 0.5), (0.5, 0.5), (20.0, 20.0), (1, 1)),
               TaskScreen("c", (0.0, 0.0), (None, None), (20.0, 20.0), (3, 3))]
    assert [s.spread for s in screens] == [True, False, False]
    out = screen_summary(screens)
    assert out["tasks"] == 3 and out["tasks_with_spread"] == 1 and out["share_with_spread"] == pytest.approx(1 / 3)
    assert out["plays"] == 6 and out["mean_support"] == pytest.approx(2.0 / 6) and out["mean_tokens"] == 20.0
    assert screens[0].to_dict()["spread"] is True and screens[1].to_dict()["support"] == [0.5, 0.5]


def test_each_play_is_seeded_by_task_and_sample_and_scored_by_its_support(monkeypatch) -> None:
    """screen_task seeds torch per (seed, task, play) before each play, so workers split tasks freely."""
    import torch

    import mage_gym.agent.rollout as rollout

    seen = []

    def fake_play(env, model, task, max_replies=None, temperature=0.0):
        seen.append((task, torch.initial_seed(), max_replies, temperature))
        return {"support": [0.25, 0.75, None][len(seen) - 1], "recall": 0.5, "tokens": 100, "replies": len(seen)}

    monkeypatch.setattr(rollout, "play_task", fake_play)
    out = screen_task(None, None, "t1", samples=3, temperature=0.9, max_replies=5, seed=4)
    assert [s[1] for s in seen] == [sample_seed(4, "t1", i) for i in range(3)]
    assert {s[2:] for s in seen} == {(5, 0.9)}
    assert out.support == (0.25, 0.75, 0.0) and out.spread and out.replies == (1, 2, 3)
    assert len({sample_seed(0, t, i) for t in ("t1", "t2") for i in range(4)}) == 8
    with pytest.raises(ValueError, match="at least 2"):
        screen_task(None, None, "t1", samples=1, temperature=1.0, max_replies=5)
    with pytest.raises(ValueError, match="greedy"):
        screen_task(None, None, "t1", samples=2, temperature=0.0, max_replies=5)


def test_the_tasks_with_spread_are_read_from_one_or_more_screens(tmp_path) -> None:
    a = _screen_file(tmp_path / "a.json", {"t1": [0.0, 1.0], "t2": [0.5, 0.5], "t3": [0.2, 0.4]})
    b = _screen_file(tmp_path / "b.json", {"t4": [1.0, 0.0], "t1": [0.0, 1.0]})
    assert tasks_with_spread(a) == ["t1", "t3"]
    assert tasks_with_spread([str(a), b]) == ["t1", "t3", "t4"]
    with pytest.raises(FileNotFoundError, match="screen_tasks.py"):
        tasks_with_spread(tmp_path / "missing.json")
    (tmp_path / "other.json").write_text(json.dumps({"kind": "benchmark", "runs": []}))
    with pytest.raises(ValueError, match="not a screen_tasks"):
        tasks_with_spread(tmp_path / "other.json")
    with pytest.raises(ValueError, match="no screen"):
        tasks_with_spread([])


def test_grpo_trains_only_on_the_screened_tasks_that_varied(tmp_path) -> None:
    from agent_helpers import train_llm_module

    m = train_llm_module()
    rows = [{"task": t, "prompt": []} for t in ("t1", "t2", "t3")]
    assert m.screened_rows(rows, None) is rows  # no screen: every task
    screen = _screen_file(tmp_path / "s.json", {"t1": [0.0, 1.0], "t2": [0.5, 0.5], "t9": [0.0, 1.0]})
    assert [r["task"] for r in m.screened_rows(rows, str(screen))] == ["t1"]
    alien = _screen_file(tmp_path / "alien.json", {"t9": [0.0, 1.0]})
    with pytest.raises(m.ConfigError, match="none of the 1 screened tasks"):
        m.screened_rows(rows, str(alien))
    with pytest.raises(m.ConfigError, match="grpo.tasks_from: .*no screen results"):
        m.screened_rows(rows, str(tmp_path / "missing.json"))


def test_groups_are_judged_by_the_same_spread_test_as_screens() -> None:
    from mage_gym.agent.trl_env import outcome_spread

    class Env:
        def __init__(self, support: float) -> None:
            self._info = {"reward_components": {"support": support}}

    envs = [Env(s) for s in (0.5, 0.5, 0.0, 1.0, 0.3, 0.3 + 1e-12)]
    assert outcome_spread(envs, 2) == [False, True, False]
    assert screening.SPREAD_TOLERANCE == 1e-9
