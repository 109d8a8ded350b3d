"""perf_env's --compare-tree: each tree's step loop runs in a fresh process on that tree's own code."""
from __future__ import annotations

from pathlib import Path

import pytest

from experiments.perf.perf_env import compare_trees

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # two fresh processes, each importing the package and building a small graph
def test_compare_trees_runs_each_tree_in_its_own_process() -> None:
    out = compare_trees(ROOT, ROOT, rounds=1, pages=12, elements=3, encoder="hash", steps=60, repeats=2)
    for side in ("this", "other"):
        res = out[side]
        assert res["runs"] == 2 and res["steps_per_s_cpu"] > 0 and res["steps_per_s_wall"] > 0
        assert len(res["load_average_1min"]) == 1
    assert out["ratio_cpu"] == out["this"]["steps_per_s_cpu"] / out["other"]["steps_per_s_cpu"]
    assert out["tree"] == str(ROOT)
