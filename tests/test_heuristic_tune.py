"""experiments/analysis/tune_heuristic.py: grid expansion, never a test split, question-weighted choice (the scoring
itself is mage_gym.bench.equal_cost's, tested in test_equal_cost.py)."""
from __future__ import annotations

import pytest

from mage_gym.bench.config import ConfigError
from experiments.analysis.tune_heuristic import choose, dataset_node, grid_points


def test_grid_points_product_with_fixed() -> None:
    pts = grid_points({"a": [1, 2], "b": [True, False]}, {"c": 0.5})
    assert pts == [{"c": 0.5, "a": 1, "b": True}, {"c": 0.5, "a": 1, "b": False},
                   {"c": 0.5, "a": 2, "b": True}, {"c": 0.5, "a": 2, "b": False}]
    with pytest.raises(ConfigError):
        grid_points({"a": []}, {})


def test_dataset_node_refuses_test_split() -> None:
    from hydra import compose, initialize_config_dir

    from mage_gym.bench.config import plain
    from experiments.analysis.tune_heuristic import _CONF

    with initialize_config_dir(config_dir=str(_CONF), version_base=None):
        cfg = plain(compose(config_name="tune_heuristic", overrides=["dataset.limit=7"]))
    node = dataset_node(cfg, "mmlongbench", "val")
    assert node["name"] == "mmlongbench" and node["split"] == "val" and node["limit"] == 7
    other = dataset_node(cfg, "financebench", "train")
    assert other["limit"] is None  # the dataset node's own overrides apply to its own name only
    with pytest.raises(ConfigError, match="test"):
        dataset_node(cfg, "mmlongbench", "test")
    with pytest.raises(ConfigError, match="not composed"):
        dataset_node(cfg, "nosuchset", "val")


def _cell(mean: float | None, n: int) -> dict:
    return {"mean": mean, "n": n}


def test_choose_weights_datasets_by_questions() -> None:
    grid = [
        {"scores": {"big": {"val": _cell(0.02, 60)}, "small": {"val": _cell(-0.10, 10)}}},  # pooled ~0.003
        {"scores": {"big": {"val": _cell(-0.01, 60)}, "small": {"val": _cell(0.20, 10)}}},  # pooled 0.02
        {"scores": {"big": {"val": _cell(None, 60)}, "small": {"val": _cell(0.90, 10)}}},  # off the curve
    ]
    assert choose(grid, ["big", "small"], "val") == 1
    assert grid[2]["select_score"] is None
    assert grid[0]["select_score"] == pytest.approx((0.02 * 60 - 0.10 * 10) / 70)
