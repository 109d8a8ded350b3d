"""The identity check used to prove refactors change no result (experiments/analysis/compare_runs.py)."""
from __future__ import annotations

import json
from pathlib import Path

from experiments.analysis.compare_runs import compare_runs, main


def _run(root: Path, rows: list[dict], wall: float) -> Path:
    root.mkdir(parents=True)
    (root / "episodes.jsonl").write_text("".join(json.dumps({**r, "wall_s": wall, "run_key": str(wall)}) + "\n"
                                                 for r in rows))
    (root / "traces" / "topk_page").mkdir(parents=True)
    (root / "traces" / "topk_page" / "k5.jsonl").write_text(json.dumps({"step": 1, "seconds": wall}) + "\n")
    (root / "results.json").write_text(json.dumps({"runs": [{"policy": "p", "metrics": {"wall_s": wall, "r": 1}}]}))
    return root


def test_wall_clock_and_run_keys_are_ignored_and_a_changed_result_is_caught(tmp_path) -> None:
    rows = [{"episode_id": "a", "reward": 0.5}, {"episode_id": "b", "reward": 0.25}]
    old = _run(tmp_path / "old", rows, wall=1.0)
    same = _run(tmp_path / "same", rows, wall=9.0)
    assert compare_runs(old, same)["identical"]
    changed = _run(tmp_path / "changed", [rows[0], {**rows[1], "reward": 0.2500001}], wall=1.0)
    res = compare_runs(old, changed)
    assert not res["identical"] and res["files"]["episodes.jsonl"]["differing_rows"] == 1
    assert main(["--pair", "toy", str(old), str(changed), "--out", str(tmp_path / "out")]) == 1
    assert json.loads((tmp_path / "out" / "results.json").read_text())["runs"]["toy"]["differing_rows"] == 1
