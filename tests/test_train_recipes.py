"""train.algo recipes end to end on toy pairs: DAgger from the oracle, DAgger then MaskablePPO on worker
processes, starting from a checkpoint; what results.json says about how the policy was trained."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mage_gym.bench.config import ConfigError, plain
from mage_gym.bench.results import validate_results
from policies.training.recipe import n_envs_of, train
from mage_gym.data.episode import Episode
from mage_gym.env import EnvEpisode
from mage_gym.testing import hash_query_fn
from mage_gym.testing import make_toy_graph

CONF = Path(__file__).resolve().parents[1] / "conf"
BUDGET = {"k": 1, "m": 2, "M": 6, "T": 3, "B": 4}


def compose(*overrides: str) -> dict:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        return plain(hydra_compose(config_name="train", overrides=list(overrides)))


@pytest.fixture(scope="module")
def pairs() -> list[EnvEpisode]:
    g = make_toy_graph(n_pages=8, elements_per_page=4, dim=16, seed=1)
    out = []
    for i in range(8):
        quoted, el = g.elements[(5 * i + 1) % 32], g.elements[(5 * i + 5) % 32]  # gold: one page on
        out.append(EnvEpisode(Episode(
            episode_id=f"q{i}", benchmark="synth", doc_id="toy", source="<toy>", question=quoted.text, answer="x",
            answer_format="Str", evidence_pages=(el.page,), gold_node_ids=(el.node_id,),
            evidence_sources=("Table",)), g))
    return out


def cfg_for(algo: str, **train: object) -> dict:
    cfg = compose("retriever=bm25", "logger=none", f"train.algo={algo}")
    cfg["env"].update(K=16, render_mode="visual", budget=dict(BUDGET), query_fn=hash_query_fn(16))
    cfg["train"].update({"split": "all", "eval_split": "all", "eval_episodes": 4, "eval_freq": 64,
                         "total_timesteps": 128, "n_envs": 1, **train})
    cfg["train"]["dagger"].update(rounds=2, episodes_per_round=4, updates=20, batch_size=32, patience=2)
    cfg["train"]["bc"].update(enabled=False)
    cfg["train"]["ppo"]["hparams"].update(n_steps=64, batch_size=32, n_epochs=1)
    cfg["torch_threads"] = 1
    return cfg


def read_results(out: Path) -> dict:
    obj = json.loads((out / "results.json").read_text())
    validate_results(obj)
    return {r["policy"]: r for r in obj["runs"]}


def test_dagger_reports_agreement_and_recall_gap(pairs, tmp_path) -> None:
    summary = train(cfg_for("dagger"), tmp_path, train_episodes=pairs, val_episodes=pairs[:4])
    runs = read_results(tmp_path)
    tr = runs["ppo"]["training"]
    assert tr["recipe"] == "dagger" and tr["shaping"] is False and tr["n_envs"] == 0
    im = tr["imitation"]
    assert im["rounds"] >= 1 and 0.0 <= im["val_agreement"] <= 1.0 and 0.0 < im["val_agreement_chance"] < 1.0
    assert im["page_recall_gap"] == pytest.approx(im["teacher_val_page_recall"] - im["student_val_page_recall"])
    assert runs["oracle"]["privileged"] is True  # the teacher's own row on validation, marked
    assert runs["oracle"]["metrics"]["evidence_page_recall"] == im["teacher_val_page_recall"]
    assert [r["stage"] for r in summary["learning_curve"]] == ["dagger"] * im["rounds"]
    meta = json.loads((tmp_path / "checkpoint.json").read_text())
    assert meta["recipe"] == "dagger" and meta["shaping"] is False and (tmp_path / "checkpoint_dagger.zip").is_file()


def test_dagger_ppo_on_worker_processes_then_init_from_its_checkpoint(pairs, tmp_path, monkeypatch) -> None:
    import policies.ppo as ppo_module

    loaded: list[str] = []

    class RecordingPPOPolicy(ppo_module.PPOPolicy):  # which checkpoints the final evaluations load
        def __init__(self, *args, checkpoint=None, **kwargs) -> None:
            if checkpoint is not None:
                loaded.append(Path(str(checkpoint)).name)
            super().__init__(*args, checkpoint=checkpoint, **kwargs)

    monkeypatch.setattr(ppo_module, "PPOPolicy", RecordingPPOPolicy)
    cfg = cfg_for("dagger_ppo", n_envs=2, vec_env="subproc")
    summary = train(cfg, tmp_path / "a", train_episodes=pairs, val_episodes=pairs[:4])
    assert loaded == ["checkpoint.zip", "checkpoint_dagger.zip"]  # the chosen one, then the DAgger student
    tr = read_results(tmp_path / "a")["ppo"]["training"]
    assert tr["recipe"] == "dagger_ppo" and tr["shaping"] is True and tr["vec_env"] == "subproc" and tr["n_envs"] == 2
    best_dagger = [r for r in summary["learning_curve"] if r["stage"] == "dagger"][summary["imitation"]["best_round"]]
    # the imitation report's student is the DAgger student (checkpoint_dagger.zip), whatever PPO selected after it
    assert tr["imitation"]["student_val_page_recall"] == pytest.approx(best_dagger["val_evidence_page_recall"])
    stages = [r["stage"] for r in summary["learning_curve"]]
    assert "dagger" in stages and stages[-1] == "ppo"
    steps = [r["timesteps"] for r in summary["learning_curve"]]
    assert steps == sorted(steps) and summary["timesteps"] == summary["imitation"]["env_steps"] + 128

    cfg = cfg_for("ppo", init=str(tmp_path / "a" / "checkpoint_dagger.zip"), shaping=False, total_timesteps=64)
    summary = train(cfg, tmp_path / "b", train_episodes=pairs, val_episodes=pairs[:4])
    tr = read_results(tmp_path / "b")["ppo"]["training"]
    assert tr["init"].endswith("checkpoint_dagger.zip") and tr["shaping"] is False
    assert summary["learning_curve"][0]["stage"] == "start"  # the initial weights were validated first


def test_init_refuses_a_checkpoint_for_other_inputs(pairs, tmp_path) -> None:
    from policies.ppo import CheckpointMismatch

    train(cfg_for("dagger"), tmp_path / "a", train_episodes=pairs[:4], val_episodes=pairs[:2])
    cfg = cfg_for("ppo", init=str(tmp_path / "a" / "checkpoint.zip"))
    cfg["env"]["render_mode"] = "text"
    with pytest.raises(CheckpointMismatch, match="render_mode='visual' in the checkpoint, render_mode='text' now"):
        train(cfg, tmp_path / "b", train_episodes=pairs, val_episodes=pairs[:2])


def test_options_fail_early() -> None:
    with pytest.raises(ConfigError, match="train.algo"):
        train(cfg_for("dqn"), Path("/nonexistent"))
    with pytest.raises(ConfigError, match="train.init"):
        train(cfg_for("ppo", init="/nonexistent/x.zip"), Path("/nonexistent"))
    assert n_envs_of({"n_envs": None}) >= 1 and n_envs_of({"n_envs": 3}) == 3
