"""experiments/analysis/aggregate_seeds.py: means over seeds, per-seed figures kept, privileged rows stay marked."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.analysis.aggregate_seeds import aggregate
from mage_gym.bench.equal_cost import DELTAS


def _run(tmp: Path, name: str, recall: float, delta: float, oracle: bool) -> Path:
    d = tmp / name
    d.mkdir()
    block = {"baseline": "topk_page", "render_mode": "visual", "ks": [1, 2],
             **{k: {"mean": delta, "lo": delta - 0.1, "hi": delta + 0.1, "n": 40, "interpretable": True}
                for k, _, _ in DELTAS}}
    runs = [{"policy": "ppo", "budget": {"k": 5}, "dataset": "d", "split": "test",
             "metrics": {"episodes": 40, "evidence_page_recall": recall, "reward": 0.5}, "equal_cost": block}]
    if oracle:
        runs.append({"policy": "oracle", "privileged": True, "budget": {"k": 5}, "dataset": "d", "split": "test",
                     "metrics": {"episodes": 40, "evidence_page_recall": 0.9}, "equal_cost": block})
    (d / "results.json").write_text(json.dumps({"schema_version": 2, "runs": runs}))
    return d


def test_means_over_seeds_and_privileged_rows(tmp_path: Path) -> None:
    res = aggregate([_run(tmp_path, "s0", 0.6, 0.02, True), _run(tmp_path, "s1", 0.8, 0.06, False)])
    rows = {r["policy"]: r for r in res["runs"]}
    assert rows["ppo"]["seeds"] == 2 and rows["ppo"]["metrics"]["evidence_page_recall"] == pytest.approx(0.7)
    assert rows["ppo"]["metrics"]["delta_recall_at_equal_tokens"] == pytest.approx(0.04)
    assert rows["ppo"]["metrics"]["delta_recall_at_equal_tokens_per_seed"] == [0.02, 0.06]
    assert rows["oracle"]["seeds"] == 1 and rows["oracle"]["privileged"] is True
    assert "privileged" not in rows["ppo"]
