"""The experiment package and entry points: results.json shape, tables, plots, checkpoints, config composition,
package boundaries and the rough edges a new user hit (issue 20).

In-process runs use toy graph pairs (milliseconds) with configs composed by
Hydra from ``conf/`` exactly as the scripts compose them; one module-scoped
fixture writes a two-document synthetic corpus (4 pages each, rule parser)
so the Hydra entry points run as real subprocesses on real files.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mage_gym.bench import results as R
from mage_gym.bench.benchmark import benchmark
from policies import REGISTRY
from mage_gym.bench.config import ConfigError, plain
from mage_gym.bench.metrics import METRIC_KEYS
from policies.training.recipe import split_episodes, train
from mage_gym.data.episode import Episode
from mage_gym.env import EnvEpisode
from mage_gym.testing import hash_query_fn
from mage_gym.testing import make_toy_graph

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
BUDGET = {"k": 2, "m": 2, "M": 6, "T": 3, "B": 4}
SCRIPTS = sorted(p.stem for p in (REPO / "experiments").glob("*.py") if p.stem != "__init__")


def compose(name: str, *overrides: str) -> dict:
    """The config ``experiments/<name>.py`` would run with, as plain containers."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        return plain(hydra_compose(config_name=name, overrides=list(overrides)))


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


def toy_cfg(name: str = "benchmark", **extra) -> dict:
    """The composed config of an entry point on toy pairs: 16 slots, text reader input, hashed question vectors."""
    cfg = compose(name, "retriever=bm25", "logger=none")
    cfg["env"].update(K=16, render_mode="text", budget=dict(BUDGET), query_fn=hash_query_fn(16))
    cfg.update({"policies": ["random", "topk_page", "topk_text", "heuristic"], "budgets": [{"k": 1}, {"k": 2}]})
    if name == "train":
        cfg["train"].update(split="all", eval_split="all", eval_episodes=4, eval_freq=128, total_timesteps=256,
                            n_envs=2)
        cfg["train"]["ppo"]["hparams"].update(n_steps=64, batch_size=64, n_epochs=1)
        cfg["train"]["bc"].update(enabled=True, teacher="heuristic", episodes=8, updates=50, batch_size=64)
    cfg.update(extra)
    return cfg


def check_results(path: Path, n_runs: int) -> dict:
    obj = json.loads(path.read_text())
    R.validate_results(obj)
    assert len(obj["runs"]) == n_runs
    for run in obj["runs"]:
        m = run["metrics"]
        assert m["episodes"] > 0 and m["accuracy"] is None and m["f1"] is None  # oracle reader: no answers
        assert 0.0 <= m["evidence_page_recall"] <= 1.0 and m["tokens_rendered"] > 0
    return obj


# --- results.json -----------------------------------------------------------------------------------

def test_validate_results_rejects_other_shapes() -> None:
    run = R.make_run("heuristic", BUDGET, "synth", "test", {k: 0.0 for k in METRIC_KEYS},
                     counts={k: 3 for k in METRIC_KEYS})
    v = {"schema_version": R.SCHEMA_VERSION}
    R.validate_results({**v, "runs": [run]})
    R.validate_results({**v, "runs": [{**run, "checkpoint": {"path": "/x.zip", "sha256": "ab"}}]})
    R.validate_results({**v, "runs": [R.make_run("oracle", BUDGET, "synth", "test", run["metrics"], privileged=True)]})
    for bad in ({**v, "runs": [run], "extra": 1}, {"runs": [run]}, {"schema_version": 1, "runs": [run]},
                {**v, "runs": [{**run, "seed": 0}]},
                {**v, "runs": [{**run, "metrics": {**run["metrics"], "answer": "x"}}]},
                {**v, "runs": [{**run, "budget": {"k": 1}}]}, {**v, "runs": [{**run, "checkpoint": "/x.zip"}]},
                {**v, "runs": [{**run, "checkpoint": {"path": "/x.zip"}}]},
                {**v, "runs": [{**run, "n": {"episodes": 3}}]}, {**v, "runs": [{**run, "privileged": False}]},
                {**v, "runs": [{**run, "equal_cost": {"baseline": "topk_page"}}]}):
        with pytest.raises(ValueError):
            R.validate_results(bad)


# --- package boundaries and composition ---------------------------------------------------------------

def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_mage_gym_imports_neither_policies_nor_experiments() -> None:
    bad = {f"{p.relative_to(REPO)}: {m}" for p in (REPO / "mage_gym").rglob("*.py") for m in _imports(p)
           if m.split(".")[0] in ("policies", "experiments")}
    assert not bad, bad


def test_scripts_never_import_scripts_and_nothing_edits_sys_path() -> None:
    script_modules = {f"experiments.{s}" for s in SCRIPTS} | set(SCRIPTS) | {"_common"}
    for p in (REPO / "experiments").rglob("*.py"):
        assert not (_imports(p) & script_modules), f"{p} imports a script: {_imports(p) & script_modules}"
    edit = re.compile(r"sys\.path\.(insert|append|extend)\(|sys\.path\s*(\+)?=[^=]")
    for folder in ("experiments", "tests", "mage_gym", "policies"):
        for p in (REPO / folder).rglob("*.py"):
            assert not edit.search(p.read_text(encoding="utf-8")), f"{p} edits sys.path"


def test_experiment_code_never_rereads_policy_yaml() -> None:
    for p in (REPO / "experiments").rglob("*.py"):
        assert "OmegaConf.load" not in p.read_text(encoding="utf-8"), p


def test_every_policy_composed_once_and_one_env_block() -> None:
    from mage_gym.env import EnvConfig
    from policies import POLICIES

    cfgs = {n: compose(n) for n in ("benchmark", "train", "main", "paper")}
    for name, cfg in cfgs.items():
        assert set(cfg["policy"]) == set(POLICIES), name
        assert all(cfg["policy"][p]["name"] == p for p in POLICIES)
    assert cfgs["benchmark"]["env"] == cfgs["train"]["env"]
    assert {**cfgs["main"]["env"], "parser": "layout"} == cfgs["benchmark"]["env"]  # main: fast parser only
    # the experiments' render mode and cost weight, stated once in conf/env/default.yaml
    assert cfgs["benchmark"]["env"]["render_mode"] == "visual" and cfgs["paper"]["env"]["render_mode"] == "visual"
    assert cfgs["benchmark"]["env"]["reward"]["lambda_cost"] == cfgs["paper"]["env"]["reward"]["lambda_cost"] == 1.0
    assert cfgs["paper"]["env"]["final_open_pass"] is True
    # the env node is passed whole: every key must be an EnvConfig setting
    assert set(cfgs["benchmark"]["env"]) <= set(EnvConfig.settings()), set(cfgs["benchmark"]["env"])
    over = compose("main", "policy.heuristic.open_min_rel=0.5")
    assert over["policy"]["heuristic"]["open_min_rel"] == 0.5 and over["policy"]["llm_evaluator"]["limit"] == 3


def test_llm_training_uses_every_core_while_the_rl_entry_points_keep_one_thread() -> None:
    """common.yaml's one thread suits PPO's tiny matrices; an LLM's matmuls need every core (a GRPO step
    took 887 s on one thread against 181-471 s on two), so train_llm leaves torch its default."""
    assert compose("train")["torch_threads"] == 1 and compose("benchmark")["torch_threads"] == 1
    assert compose("train_llm")["torch_threads"] is None
    assert compose("train_llm", "torch_threads=2")["torch_threads"] == 2


# --- benchmark and train in process -----------------------------------------------------------------------

def test_benchmark_in_process_writes_every_output(pairs, tmp_path) -> None:
    res = benchmark(toy_cfg(), tmp_path, episodes=pairs, registry=REGISTRY)
    obj = check_results(tmp_path / "results.json", n_runs=8)
    assert [r["budget"]["k"] for r in obj["runs"]] == [1] * 4 + [2] * 4
    assert [r["policy"] for r in obj["runs"][:4]] == ["random", "topk_page", "topk_text", "heuristic"]
    assert not any("checkpoint" in r for r in obj["runs"])  # rule policies have no checkpoint
    for name in ("results.csv", "results.md", "breakdown.json", "episodes.jsonl", "budget_curve.png",
                 "by_evidence_type.png", "single_vs_multi_page.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    bd = json.loads((tmp_path / "breakdown.json").read_text())["breakdown"]["heuristic | k2 m2 M6 T3 B4"]
    assert {"type:table", "type:chart", "type:text", "type:figure", "single_page", "multi_page"} <= set(bd)
    assert len((tmp_path / "episodes.jsonl").read_text().splitlines()) == 8 * len(pairs)
    assert res["table"].count("\n") == 8 + 1
    topk = next(r for r in obj["runs"] if r["policy"] == "topk_page" and r["budget"]["k"] == 2)["metrics"]
    assert topk["images_rendered"] == 2 and topk["operations"] == 0


def test_benchmark_compares_at_equal_cost_and_marks_the_oracle_privileged(pairs, tmp_path) -> None:
    cfg = toy_cfg(policies=["topk_page", "heuristic", "oracle"], budgets=[{"k": 2}])
    benchmark(cfg, tmp_path, episodes=pairs, registry=REGISTRY)
    obj = check_results(tmp_path / "results.json", 3)
    runs = {r["policy"]: r for r in obj["runs"]}
    assert "equal_cost" not in runs["topk_page"] and runs["oracle"]["privileged"] is True
    assert "privileged" not in runs["heuristic"]
    for name in ("heuristic", "oracle"):
        ec = runs[name]["equal_cost"]
        assert ec["baseline"] == "topk_page" and ec["render_mode"] == "text" and 1 in ec["ks"]
        d = ec["delta_recall_at_equal_pages"]
        assert d["n"] == runs[name]["n"]["evidence_page_recall"] and d["interpretable"] is (d["n"] >= 30)
        if d["mean"] is not None:  # inside topk_page's curve: the interval brackets the point estimate
            assert d["lo"] - 1e-9 <= d["mean"] <= d["hi"] + 1e-9
    curve = [json.loads(x) for x in (tmp_path / "topk_curve.jsonl").read_text().splitlines()]
    assert curve and {r["policy"] for r in curve} == {"topk_page"} and {r["render_mode"] for r in curve} == {"text"}
    rows = [json.loads(x) for x in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert len(rows) == 3 * len(pairs)  # the curve's extra runs stay out of episodes.jsonl
    assert (tmp_path / "frontier.png").stat().st_size > 0
    assert runs["oracle"]["metrics"]["evidence_page_recall"] >= runs["topk_page"]["metrics"]["evidence_page_recall"]


def test_a_fixed_operating_k_judges_every_run_against_topk_page_at_that_k(pairs, tmp_path) -> None:
    cfg = toy_cfg(policies=["heuristic"], budgets=[{"k": 1}])
    cfg["equal_cost"] = {"operating_k": 2}  # k is the policy's knob here; the budget is topk_page's at k=2
    benchmark(cfg, tmp_path, episodes=pairs, registry=REGISTRY)
    run = check_results(tmp_path / "results.json", 1)["runs"][0]
    curve = [json.loads(x) for x in (tmp_path / "topk_curve.jsonl").read_text().splitlines()]
    two = [r["metrics"] for r in curve if r["budget"]["k"] == 2 and r["metrics"]["evidence_page_recall"] is not None]
    op = run["equal_cost"]["delta_recall_at_operating_budget"]
    assert run["equal_cost"]["operating_budget"]["k"] == 2 and op["k"] == 2
    assert op["budget_cost"] == pytest.approx(np.mean([m["tokens_rendered"] for m in two]))


def test_a_token_capped_topk_page_is_a_policy_judged_on_the_uncapped_curve(pairs, tmp_path) -> None:
    cfg = toy_cfg(policies=["topk_page"], budgets=[{"k": 2}])
    probe = tmp_path / "probe"
    benchmark(cfg, probe, episodes=pairs, registry=REGISTRY)
    one_page = json.loads((probe / "results.json").read_text())["runs"][0]["metrics"]["tokens_rendered"] / 2
    cfg["env"]["budget"] = {**BUDGET, "tokens": int(one_page * 1.2)}  # room for about one page, not two
    benchmark(cfg, tmp_path / "capped", episodes=pairs, registry=REGISTRY)
    run = check_results(tmp_path / "capped" / "results.json", 1)["runs"][0]
    assert run["budget"]["tokens"] == int(one_page * 1.2) and "equal_cost" in run  # compared, as any policy
    curve = [json.loads(x) for x in (tmp_path / "capped" / "topk_curve.jsonl").read_text().splitlines()]
    assert {r["budget"]["k"] for r in curve} >= {1, 2} and all("tokens" not in r["budget"] for r in curve)
    two = [r["metrics"]["tokens_rendered"] for r in curve if r["budget"]["k"] == 2]
    assert max(two) > int(one_page * 1.2)  # the curve's k=2 reads its two pages: it is not capped
    assert run["equal_cost"]["operating_budget"]["tokens"] > run["metrics"]["tokens_rendered"]


def test_an_element_reader_under_one_page_is_compared_with_the_page_image_curve(pairs, tmp_path) -> None:
    cfg = toy_cfg(policies=["topk_page", "topk_elements"], budgets=[{"k": 2}])
    cfg["env"]["render_mode"] = "visual"
    cfg["policy"]["topk_elements"]["n_open"] = 1
    benchmark(cfg, tmp_path, episodes=pairs, registry=REGISTRY)
    runs = {r["policy"]: r for r in check_results(tmp_path / "results.json", 2)["runs"]}
    curve = [json.loads(x) for x in (tmp_path / "topk_curve.jsonl").read_text().splitlines()]
    assert {r["render_mode"] for r in curve} == {"visual"}  # whole page images, not an elements-mode topk_page
    one_page = min(r["metrics"]["tokens_rendered"] for r in curve if r["budget"]["k"] == 1)
    ec = runs["topk_elements"]["equal_cost"]
    assert ec["render_mode"] == "visual" and runs["topk_elements"]["metrics"]["tokens_rendered"] < one_page
    assert ec["delta_recall_at_equal_tokens"]["mean"] is not None  # k=0 floors the curve: compared, not dropped
    # at the operating budget (topk_page at the run's k=2) it gets no credit for the tokens it leaves unused
    played = [json.loads(x) for x in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    two = [r for r in played if r["policy"] == "topk_page" and r["metrics"]["evidence_page_recall"] is not None]
    op = ec["delta_recall_at_operating_budget"]
    assert ec["operating_budget"]["k"] == 2 and op["overspent"] is False
    assert op["mean"] == pytest.approx(runs["topk_elements"]["metrics"]["evidence_page_recall"]
                                       - np.mean([r["metrics"]["evidence_page_recall"] for r in two]))
    assert op["budget_cost"] == pytest.approx(np.mean([r["metrics"]["tokens_rendered"] for r in two]))


def test_benchmark_policy_limit_and_overrides(pairs, tmp_path) -> None:
    cfg = toy_cfg(policies=["heuristic"], budgets=None)
    cfg["policy"]["heuristic"].update(limit=3, open_min_rel=0.0)
    benchmark(cfg, tmp_path, episodes=pairs, registry=REGISTRY)
    m = check_results(tmp_path / "results.json", 1)["runs"][0]["metrics"]
    assert m["episodes"] == 3


def test_benchmark_rejects_unknown_parser_and_policy_before_any_work(tmp_path) -> None:
    cfg = toy_cfg()
    cfg["env"]["parser"] = "fsat"
    cfg["dataset"] = {"name": "synth", "root": str(tmp_path / "no_corpus_here"), "split": "val"}
    with pytest.raises(ConfigError, match=r"env\.parser='fsat'.*layout, fast"):
        benchmark(cfg, tmp_path, registry=REGISTRY)  # the parser, not the missing corpus or "no episodes", is the error
    with pytest.raises(ConfigError, match="unknown policies"):
        benchmark(toy_cfg(policies=["heuristic", "heurstic"]), tmp_path, registry=REGISTRY)
    assert not (tmp_path / "episodes.jsonl").exists()


def test_train_then_benchmark_records_the_checkpoint(pairs, tmp_path) -> None:
    from policies import get_policy

    summary = train(toy_cfg("train"), tmp_path / "train", train_episodes=pairs, val_episodes=pairs[:4])
    out = tmp_path / "train"
    run = check_results(out / "results.json", 1)["runs"][0]
    curve = json.loads((out / "learning_curve.json").read_text())
    assert curve[0]["timesteps"] == 0 and curve[0]["bc"]["teacher"] == "heuristic"  # the warm start's row
    assert curve[0]["bc"]["steps"] > 0 and 0.0 <= curve[0]["bc"]["agreement"] <= 1.0
    assert len(curve) >= 3 and all(r["steps_per_s"] > 0 for r in curve[1:]) and "val_reward" in curve[-1]
    assert (out / "learning_curve.png").is_file() and summary["timesteps"] >= 256
    assert (out / "checkpoint_last.zip").is_file() and (out / "checkpoint_best.zip").is_file()
    assert summary["selected_timesteps"] in [r["timesteps"] for r in curve]  # model selection on validation
    assert summary["selection"] == "best_validation_reward"
    meta = json.loads((out / "checkpoint.json").read_text())
    assert meta["algo"] == "maskable_ppo" and meta["K"] == 16 and meta["render_mode"] == "text"
    assert get_policy("ppo", checkpoint=summary["checkpoint"]).render_mode == "text"
    sha = hashlib.sha256(Path(summary["checkpoint"]).read_bytes()).hexdigest()
    assert run["checkpoint"] == {"path": str(Path(summary["checkpoint"]).resolve()), "sha256": sha}

    cfg = toy_cfg(policies=["heuristic", "ppo"], budgets=None)
    cfg["policy"]["ppo"]["checkpoint"] = summary["checkpoint"]
    benchmark(cfg, tmp_path / "bench", episodes=pairs, registry=REGISTRY)
    runs = {r["policy"]: r for r in check_results(tmp_path / "bench" / "results.json", 2)["runs"]}
    assert runs["ppo"]["checkpoint"]["sha256"] == sha and "checkpoint" not in runs["heuristic"]
    rows = [json.loads(x) for x in (tmp_path / "bench" / "episodes.jsonl").read_text().splitlines()]
    assert {r["checkpoint"]["sha256"] for r in rows if r["policy"] == "ppo"} == {sha}
    assert len([r for r in rows if r["policy"] == "ppo"]) == len(pairs)
    assert not any("checkpoint" in r for r in rows if r["policy"] == "heuristic")


def _wrappers(env) -> list[str]:
    names = []
    while hasattr(env, "env"):
        names.append(type(env).__name__)
        env = env.env
    return names


def test_only_training_envs_are_privileged_and_shaped(pairs) -> None:
    from mage_gym.bench.envs import make_env
    from policies.training.recipe import shaping_kwargs

    cfg = toy_cfg("train")
    assert shaping_kwargs(False) == {} and cfg["train"]["shaping"] is True
    kw = shaping_kwargs(True)
    assert kw == {"privileged": True, "shaping": {"gamma": 1.0, "scale": 1.0}}
    assert shaping_kwargs({"gamma": 0.9})["shaping"] == {"gamma": 0.9, "scale": 1.0}
    with pytest.raises(ConfigError, match="train.shaping"):
        shaping_kwargs({"gama": 0.9})
    shaped = make_env(pairs, {**cfg, "env": {**cfg["env"], **kw}}, reader="oracle")
    plain_env = make_env(pairs, cfg, reader="oracle")
    try:
        assert "PotentialShaping" in _wrappers(shaped) and shaped.unwrapped.privileged
        assert "PotentialShaping" not in _wrappers(plain_env) and not plain_env.unwrapped.privileged
    finally:
        shaped.close()
        plain_env.close()


def test_train_checks_parser_and_teacher_first(pairs, tmp_path) -> None:
    cfg = toy_cfg("train")
    cfg["env"]["parser"] = "fsat"
    with pytest.raises(ConfigError, match="env.parser='fsat'"):
        train(cfg, tmp_path, train_episodes=pairs, val_episodes=pairs)
    cfg = toy_cfg("train")
    cfg["train"]["bc"]["teacher"] = "heuristc"
    with pytest.raises(ConfigError, match="policy.heuristc"):
        train(cfg, tmp_path, train_episodes=pairs, val_episodes=pairs)
    assert not list(tmp_path.iterdir())


def test_train_without_validation_fails_unless_allowed(pairs, tmp_path) -> None:
    cfg = toy_cfg("train")
    with pytest.raises(ConfigError, match="allow_no_validation"):
        train(cfg, tmp_path, train_episodes=pairs, val_episodes=[])
    assert not (tmp_path / "checkpoint.zip").exists()
    cfg["train"].update(allow_no_validation=True, total_timesteps=64, eval_freq=64)
    cfg["train"]["bc"]["enabled"] = False
    summary = train(cfg, tmp_path, train_episodes=pairs, val_episodes=[])
    assert summary["selection"] == "last (no validation)" and summary["selected_timesteps"] is None
    assert json.loads((tmp_path / "results.json").read_text()) == {"schema_version": R.SCHEMA_VERSION, "runs": []}


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


def test_train_honours_dataset_limit(corpus) -> None:
    cfg = compose("train", "dataset=synth", f"dataset.root={corpus}", "train.split=all", "train.eval_split=all",
                  "train.eval_episodes=2")
    train_all, val = split_episodes(cfg)
    assert len(train_all) > 2 and len(val) == 2
    cfg["dataset"]["limit"] = 2
    limited, _ = split_episodes(cfg)
    assert 0 < len(limited) <= 2 and {e.episode_id for e in limited} <= {e.episode_id for e in train_all}


def run_script(script: str, tmp_path: Path, *overrides: str, module: bool = False,
               ok: bool = True) -> subprocess.CompletedProcess:
    """An entry point as a user runs it: ``python experiments/<script>.py`` or ``python -m experiments.<script>``."""
    env = dict(os.environ, WANDB_MODE="offline", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    target = ["-m", f"experiments.{script.replace('/', '.')}"] if module else [str(REPO / "experiments" / f"{script}.py")]
    cmd = [sys.executable, *target, *overrides]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    if ok:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


SMALL_ENV = ["env.K=16", "env.parser=fast", "env.budget.k=2", "env.budget.M=6", "env.budget.T=3", "env.budget.B=4",
             "graph_workers=1"]


def test_benchmark_script_end_to_end(corpus, tmp_path) -> None:
    proc = run_script("benchmark", tmp_path, f"hydra.run.dir={tmp_path}", "dataset=synth", f"dataset.root={corpus}",
                      "dataset.limit=4", "policies=[topk_page,heuristic]", "logger=wandb", "retriever=bm25",
                      *SMALL_ENV)
    check_results(tmp_path / "results.json", 2)
    assert "| topk_page |" in proc.stdout and (tmp_path / "budget_curve.png").is_file()
    assert list(tmp_path.glob("wandb/offline-run-*")), "W&B offline run folder missing"


def test_train_module_end_to_end(corpus, tmp_path) -> None:
    run_script("train", tmp_path, f"hydra.run.dir={tmp_path}", "dataset=synth", f"dataset.root={corpus}",
               "train.split=all", "train.eval_split=all", "train.eval_episodes=2", "train.total_timesteps=128",
               "train.eval_freq=128", "train.n_envs=1", "train.bc.episodes=4", "train.bc.updates=10",
               "train.ppo.hparams.n_steps=64", "train.ppo.hparams.batch_size=32", "logger=none",
               "retriever=bm25", *SMALL_ENV, module=True)
    check_results(tmp_path / "results.json", 1)
    assert (tmp_path / "checkpoint.zip").is_file() and not list(tmp_path.glob("wandb"))


def test_benchmark_script_names_the_bad_parser(tmp_path) -> None:
    proc = run_script("benchmark", tmp_path, f"hydra.run.dir={tmp_path}", "dataset=synth", "dataset.split=val",
                      "env.parser=fsat", "logger=wandb", ok=False)
    assert proc.returncode != 0 and "env.parser='fsat' is not a graph parser" in proc.stderr, proc.stderr[-2000:]
    assert "no episodes" not in proc.stderr and not list(tmp_path.glob("wandb"))


def test_build_graphs_bad_parser_is_one_error_and_exit_status(corpus, tmp_path) -> None:
    proc = run_script("build_graphs", tmp_path, f"hydra.run.dir={tmp_path / 'a'}", f"input={corpus}",
                      "parser=lyout", ok=False, module=True)
    assert proc.returncode != 0 and proc.stderr.count("lyout") == 1, proc.stderr[-2000:]
    assert "layout, fast" in proc.stderr and "Traceback" not in proc.stderr
    bad = tmp_path / "docs"
    bad.mkdir()
    (bad / "broken.pdf").write_bytes(b"not a pdf")
    proc = run_script("build_graphs", tmp_path, f"hydra.run.dir={tmp_path / 'b'}", f"input={bad}", "parser=fast",
                      "workers=1", ok=False)
    assert proc.returncode != 0 and "0 built, 0 cached, 1 failed" in proc.stdout, proc.stderr[-2000:]
    assert "no graph built" in proc.stderr
    assert json.loads((tmp_path / "b" / "results.json").read_text())["totals"]["failed"] == 1


def test_report_on_a_missing_run_dir_says_so_and_creates_nothing(tmp_path) -> None:
    missing = tmp_path / "outputs" / "no_such_run"
    proc = run_script("report", tmp_path, f"run_dir={missing}", ok=False)
    assert proc.returncode != 0 and "does not exist" in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "outputs").exists()


def test_parser_quality_type_accuracy_is_null_without_gold_boxes() -> None:
    from experiments.quality.parser_quality import format_table, type_accuracy

    acc = type_accuracy({"table": {"table": 3, "text": 1}, "chart": {}})
    assert acc == {"table": 0.75, "chart": None}
    tally = {"boxes": 0, "matched": 0, "match_rate": 0.0, "mean_iou": 0.0}
    res = {"parser": "fast", "parser_cfg": {}, "documents": 0, "pages": 0, "overall": tally, "by_type": {},
           "by_type_any": {}, "by_page_kind": {}, "type_confusion": {"chart": {}}, "type_accuracy": acc,
           "seconds_per_page": {"median_doc": None, "text_layer_median_doc": None, "image_only_median_doc": None,
                                "cpu_median_doc": None},
           "ocr": {"seconds_per_page": None, "cached_pages": 0}}
    assert "gold chart box (IoU >= 0.3): right n/a" in format_table(res)
