"""Benchmark controller policies side by side: same episodes, same budgets, same metrics.

Run (from the repo root; ``python -m experiments.benchmark`` works the same):

    .venv/bin/python experiments/benchmark.py dataset=mmlongbench 'policies=[topk_page,heuristic,ppo]' \
        policy.ppo.checkpoint=outputs/train/<run>/checkpoint.zip
    .venv/bin/python experiments/benchmark.py dataset=synth dataset.root=data_out/synth/tiny_seed0 \
        env.parser=fast 'budgets=[{k: 1}, {k: 3}, {k: 5}]' logger=none
    # the paper setting (conf/paper.yaml): Qwen3-VL-8B-Instruct behind vLLM as evaluator and reader
    .venv/bin/python experiments/benchmark.py --config-name paper dataset=mmlongbench budget=paper_mmlongbench \
        reader.base_url=http://127.0.0.1:8000/v1 policy.llm_evaluator.backend.base_url=http://127.0.0.1:8000/v1

``policies`` is the list of policies run, in order, in this one process.
Every policy's options are composed by Hydra under ``policy.<name>``
(``conf/policy/<name>.yaml``, listed in ``conf/common.yaml``) and overridden
with ``policy.<name>.<key>=...``: ``policy.ppo.checkpoint=PATH`` is the
learned policy's weights; ``limit: N`` runs a policy on the first N episodes
only and ``only_base_budget: true`` at ``env.budget`` only (both for the slow
LLM evaluator). ``budgets`` is a list of partial budgets merged onto
``env.budget`` (null: that budget alone). Hydra multirun sweeps anything else.

Writes into the Hydra run directory (see :mod:`mage_gym.bench.benchmark`):
``results.json`` (documented shape, :mod:`mage_gym.bench.results`),
``results.csv``, ``results.md``, ``breakdown.json``, ``episodes.jsonl``,
``traces/``, and the plots ``budget_curve.png``, ``by_evidence_type.png``,
``single_vs_multi_page.png``. An episode whose reader or evaluator fails past
its retries is recorded as failed and the run goes on (``max_failed_episodes``,
default 5 % of the run's episodes, stops it beyond that); re-running with
``hydra.run.dir=<the same dir>`` resumes, playing only the episodes not yet done.
"""
from __future__ import annotations

import hydra
from omegaconf import DictConfig

from mage_gym.bench.benchmark import RunStopped, benchmark, check_config
from policies import REGISTRY
from mage_gym.bench.config import exit_on_config_error, link_latest, plain, quiet_libraries, run_dir, set_threads
from mage_gym.bench.tracking import make_logger, run_name


@hydra.main(version_base=None, config_path="../conf", config_name="benchmark")
@exit_on_config_error
def main(cfg: DictConfig) -> None:
    quiet_libraries()
    c = plain(cfg)
    check_config(c, REGISTRY)  # a wrong option is one error before any work (or a W&B run) starts
    set_threads(c.get("torch_threads"))
    out = run_dir()
    logger = make_logger(c, run_name(c["dataset"]["name"], "benchmark", c.get("seed", 0)), "benchmark", out)
    try:
        res = benchmark(c, out, logger=logger, registry=REGISTRY)
    except RunStopped as err:  # too many failed episodes or a backend down: one message, exit status 1
        raise SystemExit(f"stopped: {err}") from None
    finally:
        logger.finish()
    print(res["table"])
    link_latest(out)
    print(f"\nresults: {out / 'results.json'}")


if __name__ == "__main__":
    main()
