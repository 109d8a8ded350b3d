"""experiments/analysis/plot_learning_curves.py: runs that differ in their PPO rollout shape are labelled by it."""
from __future__ import annotations

import json
from pathlib import Path

from experiments.analysis import plot_learning_curves as plc


def _run(root: Path, name: str, n_envs: int, n_steps: int | None, hydra_n_steps: int | None = None) -> Path:
    run = root / name
    run.mkdir()
    training = {"n_envs": n_envs, **({} if n_steps is None else {"n_steps": n_steps})}
    (run / "train_summary.json").write_text(json.dumps({"recipe": "ppo", "seed": 0, "training": training}))
    (run / "learning_curve.json").write_text(json.dumps([{"timesteps": 0, "stage": "start", "val_reward": 0.5}]))
    if hydra_n_steps is not None:  # a run from before train_summary recorded n_steps
        (run / ".hydra").mkdir()
        (run / ".hydra" / "config.yaml").write_text(f"policy:\n  ppo:\n    train:\n      hparams:\n"
                                                    f"        n_steps: {hydra_n_steps}\n")
    return run


def test_rollout_shape_labels_runs_only_when_they_differ(tmp_path: Path) -> None:
    a = plc.load_run(_run(tmp_path, "a", 2, 512))
    b = plc.load_run(_run(tmp_path, "b", 8, None, hydra_n_steps=128))
    assert a["rollout"] == "2 envs x 512 steps" and b["rollout"] == "8 envs x 128 steps"
    rows = plc.results_of([a, b], "synth")["runs"]
    assert [r["policy"] for r in rows] == ["ppo (ppo seed 0, 2 envs x 512 steps)", "ppo (ppo seed 0, 8 envs x 128 steps)"]
    same = plc.results_of([a, plc.load_run(_run(tmp_path, "c", 2, 512))], "synth")["runs"]
    assert [r["policy"] for r in same] == ["ppo (ppo seed 0)", "ppo (ppo seed 0)"]
    dagger = plc.load_run(_run(tmp_path, "d", 0, None))
    assert dagger["rollout"] is None
