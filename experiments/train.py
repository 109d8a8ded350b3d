"""Train a learned controller (slot-set network: imitation of the oracle and/or MaskablePPO) and evaluate it on
held-out documents.

Run (from the repo root; ``python -m experiments.train`` works the same):

    .venv/bin/python experiments/make_synth.py preset=train                 # -> data_out/synth/train_seed0
    .venv/bin/python experiments/train.py dataset=synth dataset.root=data_out/synth/train_seed0 env.parser=fast
    .venv/bin/python experiments/train.py dataset=mmlongbench seed=1 logger=none
    .venv/bin/python experiments/train.py -m seed=0,1,2          # three seeds (Hydra multirun)
    .venv/bin/python experiments/train.py dataset=synth dataset.root=... 'train.mix=[mmlongbench,financebench]'
    .venv/bin/python experiments/train.py ... train.algo=dagger            # DAgger from the privileged oracle
    .venv/bin/python experiments/train.py ... train.algo=dagger_ppo        # DAgger, then MaskablePPO fine-tuning
    .venv/bin/python experiments/train.py ... train.init=outputs/train/<run>/checkpoint.zip   # start from weights

The recipes (``train.algo``: ppo, dagger, dagger_ppo) are in
:func:`policies.training.recipe.train` (train split, graphs, ``n_envs``
oracle-reader envs (in this process by default), behaviour-cloning warm start from
``train.bc.teacher`` or DAgger rounds from the oracle, PPO with periodic
validation and model selection on the validation split, never on test).
Options: ``train.*`` (conf/training/default.yaml; the learner's algorithm,
network and PPO hyperparameters under ``train.ppo``), the learner's acting
options ``policy.ppo.*`` (e.g. its render mode), ``dataset.limit`` (training
episodes).

Writes into the run directory (``outputs/train/<dataset>__ppo__<seed>__<time>``):
``checkpoint.zip`` (+ ``checkpoint.json``: algorithm, node features, observation keys,
K, render mode, graph version, recipe, shaping, config) - the
checkpoint with the best validation reward (``checkpoint_last.zip`` is the final
one), ``results.json`` (documented shape: the selected policy on the validation
episodes, with the checkpoint's path and sha256 and a ``training`` block: recipe,
whether shaping was used, and for DAgger the teacher-student agreement and
recall gap on validation; DAgger adds the oracle's own privileged row), ``learning_curve.json`` /
``learning_curve.png`` and ``train_summary.json``.
"""
from __future__ import annotations

import hydra
from omegaconf import DictConfig

from mage_gym.bench.config import exit_on_config_error, link_latest, plain, quiet_libraries, run_dir
from mage_gym.bench.results import fmt
from mage_gym.bench.tracking import make_logger, run_name
from policies.training.recipe import check_config, recipe_of, train


@hydra.main(version_base=None, config_path="../conf", config_name="train")
@exit_on_config_error
def main(cfg: DictConfig) -> None:
    quiet_libraries()
    out = run_dir()
    c = plain(cfg)
    check_config(c)  # a wrong option is one error before any work (or a W&B run) starts
    logger = make_logger(c, run_name(c["dataset"]["name"], recipe_of(c["train"]), c.get("seed", 0)), "train", out)
    try:
        summary = train(c, out, logger)
    finally:
        logger.finish()
    sps = f"{summary['steps_per_s']:.0f} steps/s; " if summary["steps_per_s"] else ""
    print(f"checkpoint: {summary['checkpoint']}  ({sps}{summary['selection']})")
    if summary["final_eval"]:
        print({k: fmt(v) for k, v in summary["final_eval"].items()})
    link_latest(out)
    print(f"results: {out / 'results.json'}")


if __name__ == "__main__":
    main()
