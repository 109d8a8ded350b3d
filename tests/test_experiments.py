"""benchmark.py and train.py end to end: results.json of the documented shape, tables, plots, checkpoints.

In-process runs use toy graph pairs (milliseconds); one module-scoped
fixture writes a two-document synthetic corpus (4 pages each, rule parser)
so the Hydra entry points run as real subprocesses on real files.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "experiments"))

import _common as C  # noqa: E402
from mage_gym.data.episode import Episode  # noqa: E402
from mage_gym.env import EnvEpisode  # noqa: E402
from mage_gym.env._synthetic import hash_query_fn  # noqa: E402
from mage_gym.testing import make_toy_graph  # noqa: E402

BUDGET = {"k": 2, "m": 2, "M": 6, "T": 3, "B": 4}


@pytest.fixture(scope="module")
def pairs() -> list[EnvEpisode]:
    g = make_toy_graph(n_pages=8, elements_per_page=5, dim=16, seed=1)
    kinds = ("Table", "Chart", "Pure-text (Plain-text)", "Figure")
    out = []
    for i in range(8):
        el = g.elements[i * 5 + 2]
        pages = (el.page,) if i % 3 else (el.page, (el.page + 3) % 8)
        out.append(EnvEpisode(Episode(
            episode_id=f"q{i}", benchmark="synth", doc_id="toy", source="<toy>", question=el.text, answer="x",
            answer_format="Str", evidence_pages=pages, gold_node_ids=(el.node_id,),
            evidence_sources=(kinds[i % 4],)), g))
    return out


def toy_cfg(**extra) -> dict:
    cfg = {"dataset": {"name": "synth", "split": "all"}, "reader": {"name": "oracle"}, "retriever": {"name": "bm25"},
           "env": {"K": 16, "render_mode": "text", "budget": dict(BUDGET), "query_fn": hash_query_fn(16)},
           "policies": ["random", "topk_page", "topk_text", "heuristic"], "budgets": [{"k": 1}, {"k": 2}],
           "policy": {}, "seed": 0, "torch_threads": 1,
           "train": {"split": "all", "eval_split": "all", "eval_episodes": 4, "eval_freq": 128,
                     "total_timesteps": 256, "n_envs": 2}}
    cfg.update(extra)
    return cfg


def check_results(path: Path, n_runs: int) -> dict:
    obj = json.loads(path.read_text())
    C.validate_results(obj)
    assert len(obj["runs"]) == n_runs
    for run in obj["runs"]:
        m = run["metrics"]
        assert m["episodes"] > 0 and m["accuracy"] is None and m["f1"] is None  # oracle reader: no answers
        assert 0.0 <= m["evidence_page_recall"] <= 1.0 and m["tokens_rendered"] > 0
    return obj


def test_validate_results_rejects_other_shapes() -> None:
    run = C.make_run("heuristic", BUDGET, "synth", "test", {k: 0.0 for k in C.METRIC_KEYS})
    C.validate_results({"runs": [run]})
    for bad in ({"runs": [run], "extra": 1}, {"runs": [{**run, "seed": 0}]},
                {"runs": [{**run, "metrics": {**run["metrics"], "answer": "x"}}]},
                {"runs": [{**run, "budget": {"k": 1}}]}):
        with pytest.raises(ValueError):
            C.validate_results(bad)


def test_benchmark_in_process_writes_every_output(pairs, tmp_path) -> None:
    from benchmark import benchmark

    res = benchmark(toy_cfg(), tmp_path, episodes=pairs)
    obj = check_results(tmp_path / "results.json", n_runs=8)
    assert [r["budget"]["k"] for r in obj["runs"]] == [1] * 4 + [2] * 4
    assert [r["policy"] for r in obj["runs"][:4]] == ["random", "topk_page", "topk_text", "heuristic"]
    for name in ("results.csv", "results.md", "breakdown.json", "episodes.jsonl", "budget_curve.png",
                 "by_evidence_type.png", "single_vs_multi_page.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    bd = json.loads((tmp_path / "breakdown.json").read_text())["breakdown"]["heuristic | k2 m2 M6 T3 B4"]
    assert {"type:table", "type:chart", "type:text", "type:figure", "single_page", "multi_page"} <= set(bd)
    assert len((tmp_path / "episodes.jsonl").read_text().splitlines()) == 8 * len(pairs)
    assert res["table"].count("\n") == 8 + 1
    topk = next(r for r in obj["runs"] if r["policy"] == "topk_page" and r["budget"]["k"] == 2)["metrics"]
    assert topk["images_rendered"] == 2 and topk["operations"] == 0


def test_benchmark_policy_limit_and_overrides(pairs, tmp_path) -> None:
    from benchmark import benchmark

    cfg = toy_cfg(policies=["heuristic"], budgets=None,
                  policy={"heuristic": {"limit": 3, "open_min_rel": 0.0}})
    benchmark(cfg, tmp_path, episodes=pairs)
    m = check_results(tmp_path / "results.json", 1)["runs"][0]["metrics"]
    assert m["episodes"] == 3


def test_train_in_process_checkpoint_and_curve(pairs, tmp_path) -> None:
    from omegaconf import OmegaConf

    from policies import get_policy
    from train import train

    pol = C.plain(OmegaConf.load(REPO / "conf" / "policy" / "ppo.yaml"))
    pol["train"]["hparams"].update(n_steps=64, batch_size=64, n_epochs=1)
    cfg = toy_cfg(policy=pol)
    cfg["train"]["bc"] = {"enabled": True, "teacher": "heuristic", "episodes": 8, "updates": 50, "batch_size": 64}
    summary = train(cfg, tmp_path, train_episodes=pairs, val_episodes=pairs[:4])
    check_results(tmp_path / "results.json", 1)
    curve = json.loads((tmp_path / "learning_curve.json").read_text())
    assert curve[0]["timesteps"] == 0 and curve[0]["bc"]["teacher"] == "heuristic"  # the warm start's row
    assert curve[0]["bc"]["steps"] > 0 and 0.0 <= curve[0]["bc"]["agreement"] <= 1.0
    assert len(curve) >= 3 and all(r["steps_per_s"] > 0 for r in curve[1:]) and "val_reward" in curve[-1]
    assert (tmp_path / "learning_curve.png").is_file() and summary["timesteps"] >= 256
    assert (tmp_path / "checkpoint_last.zip").is_file() and (tmp_path / "checkpoint_best.zip").is_file()
    assert summary["selected_timesteps"] in [r["timesteps"] for r in curve]  # model selection on validation
    meta = json.loads((tmp_path / "checkpoint.json").read_text())
    assert meta["algo"] == "maskable_ppo" and meta["K"] == 16 and meta["render_mode"] == "text"
    assert get_policy("ppo", checkpoint=summary["checkpoint"]).render_mode == "text"


# --- real entry points on a tiny generated corpus ------------------------------------------------

@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    from mage_gym.data.registry import load_dataset
    from mage_gym.data.synth import SynthConfig, generate_corpus
    from mage_gym.graph import build_graph

    root = tmp_path_factory.mktemp("synth_corpus")
    generate_corpus(root, 2, seed=5, cfg=SynthConfig(min_pages=4, max_pages=4, questions_per_doc=3), workers=1,
                    progress=False)
    for src in sorted({e.source for e in load_dataset("synth", root=root)}):
        build_graph(src, parser="fast")
    return root


def run_script(script: str, tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, WANDB_MODE="offline", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    cmd = [sys.executable, str(REPO / "experiments" / script), f"hydra.run.dir={tmp_path}", *overrides]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


SMALL_ENV = ["env.K=16", "env.parser=fast", "env.budget.k=2", "env.budget.M=6", "env.budget.T=3", "env.budget.B=4",
             "graph_workers=1"]


def test_benchmark_script_end_to_end(corpus, tmp_path) -> None:
    proc = run_script("benchmark.py", tmp_path, "dataset=synth", f"dataset.root={corpus}", "dataset.limit=4",
                      "policies=[topk_page,heuristic]", "logger=wandb", "retriever=bm25", *SMALL_ENV)
    check_results(tmp_path / "results.json", 2)
    assert "| topk_page |" in proc.stdout and (tmp_path / "budget_curve.png").is_file()
    assert list(tmp_path.glob("wandb/offline-run-*")), "W&B offline run folder missing"


def test_train_script_end_to_end(corpus, tmp_path) -> None:
    run_script("train.py", tmp_path, "dataset=synth", f"dataset.root={corpus}", "train.split=all",
               "train.eval_split=all", "train.eval_episodes=2", "train.total_timesteps=128", "train.eval_freq=128",
               "train.n_envs=1", "policy.train.hparams.n_steps=64", "policy.train.hparams.batch_size=32",
               "logger=none", "retriever=bm25", *SMALL_ENV)
    check_results(tmp_path / "results.json", 1)
    assert (tmp_path / "checkpoint.zip").is_file() and not list(tmp_path.glob("wandb"))
