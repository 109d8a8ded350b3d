"""The README's main job: synthetic corpus -> graphs -> PPO -> benchmark of every policy -> table and plots.

Run (from the repo root; ``scripts/run_main.sh`` sets up the venv first):

    bash scripts/run_main.sh                      # defaults in conf/main.yaml
    bash scripts/run_main.sh train.total_timesteps=30000 logger=none

Stages, each with a progress bar:

1. generate a small synthetic corpus (the generator's ``tiny`` preset: 20-page
   reports, 8 questions plus 2 two-hop bridge questions each; ``synth.n_docs``
   documents so that the train, val and test splits by document are all
   non-empty), reused when present;
2. build the evidence graphs (parallel workers, on-disk cache; ``env.parser``);
3. train PPO briefly on the train split (validation split for model selection);
4. benchmark random / topk_page / topk_text / heuristic / llm_evaluator /
   ppo with the oracle reader on the held-out test split (the LLM evaluator,
   SmolLM2 on CPU, runs on ``policy.llm_evaluator.limit`` episodes with at most
   ``policy.llm_evaluator.max_rounds`` rounds);
5. print the table; ``results.json``, CSV, markdown, plots and the
   checkpoint land in the run directory (``outputs/main/<time>``).
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Mapping

import hydra
from omegaconf import DictConfig

from experiments.common.benchmarking import benchmark
from experiments.common.benchmarking import check_config as check_benchmark_config
from experiments.common.config import exit_on_config_error, plain, quiet_libraries, run_dir, set_threads
from experiments.common.episodes import prepare_graphs
from experiments.common.policy_options import policy_options
from experiments.common.results import write_json
from experiments.common.tracking import make_logger, run_name
from experiments.common.training import check_config as check_train_config
from experiments.common.training import train

log = logging.getLogger("main")


def synth_root(c: Mapping[str, Any]) -> Path:
    """``synth.root``, else ``$MAGE_GYM_CACHE/synth/<preset>_n<n_docs>_s<seed>``."""
    from mage_gym.paths import cache_root

    s = c["synth"]
    if s.get("root"):
        return Path(s["root"])
    return cache_root() / "synth" / f"{s['preset']}_n{s['n_docs']}_s{s['seed']}"


def make_corpus(c: Mapping[str, Any]) -> Path:
    """Generate the corpus unless an identical one (same generator config and seed) is already there."""
    from mage_gym.data.synth import generate_corpus, preset, read_manifest

    s = c["synth"]
    n_docs, scfg = preset(s["preset"])
    n_docs = int(s.get("n_docs") or n_docs)
    root = synth_root(c)
    try:
        m = read_manifest(root)
        if m.get("config") == scfg.to_dict() and m.get("n_docs") == n_docs and m.get("seed") == int(s["seed"]):
            log.info("synthetic corpus already at %s", root)
            return root
    except Exception:  # noqa: BLE001 - absent or unreadable: generate
        pass
    generate_corpus(root, n_docs, seed=int(s["seed"]), cfg=scfg, workers=int(c.get("graph_workers", 2)))
    return root


def run(c: dict[str, Any], out: Path, logger: Any) -> dict[str, Any]:
    from mage_gym.data.registry import load_dataset

    stages: dict[str, float] = {}
    t = time.perf_counter()
    print("[1/4] synthetic corpus", flush=True)
    root = make_corpus(c)
    stages["corpus_s"] = time.perf_counter() - t

    t = time.perf_counter()
    print("[2/4] evidence graphs", flush=True)
    episodes = load_dataset("synth", root=root, split="all", seed=int(c.get("seed", 0)))
    episodes = prepare_graphs(episodes, c["env"].get("parser", "layout"), int(c.get("graph_workers", 2)),
                              c["env"].get("graph_kwargs"))
    stages["graphs_s"] = time.perf_counter() - t
    ds = {"name": "synth", "root": str(root), "split": c["benchmark_split"], "limit": None,
          "seed": int(c.get("seed", 0))}
    test = [e for e in episodes if e.split == c["benchmark_split"]]
    splits = {s: sum(e.split == s for e in episodes) for s in ("train", "val", "test")}
    print(f"      {len(episodes)} episodes on {len({e.doc_id for e in episodes})} documents; splits {splits}")

    t = time.perf_counter()
    print("[3/4] training PPO", flush=True)
    summary = train({**c, "dataset": ds}, out / "train", logger)
    stages["train_s"] = time.perf_counter() - t

    t = time.perf_counter()
    print(f"[4/4] benchmark on {len(test)} held-out test episodes", flush=True)
    trained = {**c["policy"], "ppo": {**c["policy"]["ppo"], "checkpoint": summary["checkpoint"]}}
    res = benchmark({**c, "dataset": ds, "policy": trained}, out, episodes=test, logger=logger)
    stages["benchmark_s"] = time.perf_counter() - t
    stages["total_s"] = sum(stages.values())
    main_summary = {"corpus": str(root), "splits": splits, "benchmark_episodes": len(test), "stages": stages,
                    "train": {k: v for k, v in summary.items() if k != "learning_curve"},
                    "llm_evaluator": policy_options(c, "llm_evaluator")}
    write_json(out / "main_summary.json", main_summary)
    return {"table": res["table"], "stages": stages, "plots": res["plots"], "summary": main_summary}


@hydra.main(version_base=None, config_path="../conf", config_name="main")
@exit_on_config_error
def main(cfg: DictConfig) -> None:
    quiet_libraries()
    out = run_dir()
    c = plain(cfg)
    check_benchmark_config(c)  # a wrong option is one error before any work (or a W&B run) starts
    check_train_config(c)
    set_threads(c.get("torch_threads"))
    logger = make_logger(c, run_name("synth", "main", c.get("seed", 0)), "main", out)
    try:
        res = run(c, out, logger)
    finally:
        logger.finish()
    llm = res["summary"]["llm_evaluator"]
    print("\n" + res["table"])
    print(f"\nllm_evaluator: SmolLM2 on the first {llm.get('limit') or 'all'} episodes, at most "
          f"{llm.get('max_rounds') or 'T'} rounds each (CPU); all others on every test episode.")
    print("stages: " + ", ".join(f"{k} {v:.0f}s" for k, v in res["stages"].items()))
    print(f"results: {out / 'results.json'}\nplots:   " + ", ".join(str(p) for p in res["plots"]))


if __name__ == "__main__":
    main()
