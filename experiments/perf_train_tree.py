"""Time ``learn`` in another checkout of this project: the ``--before-tree`` side of ``perf_train.py``.

Why a separate, standalone script: "faster than before" is only a claim
when the old code runs beside the new one on the same machine at the same
time. ``perf_train.py`` starts this script with the old checkout first on
``sys.path`` (and its own graph cache, since an older ``GRAPH_VERSION``
deletes newer cache entries it meets), so everything imported here is the
old tree's. It therefore only calls functions whose signatures have not
changed since the training loop existed (``load_episodes``,
``prepare_graphs``, ``make_env``, ``build_model``, ``shaping_kwargs``,
``evaluate``) and builds the training envs the way ``train.py`` built them
then: one episode provider per env, caches at their library defaults, SB3's
``DummyVecEnv`` (or ``SubprocVecEnv``), plain ``model.learn``.

It prints one JSON object (the same row fields as ``perf_train.measure``)
as its last stdout line. Its timer (:func:`timed_learn`) is the one
``perf_train.py`` uses for this tree too, so both sides are timed alike. Run by ``perf_train.py``; by hand::

    git archive e7c6e2b | tar -x -C /tmp/tree_old
    MAGE_GYM_CACHE=/tmp/cache_old .venv/bin/python experiments/perf_train_tree.py --tree /tmp/tree_old --steps 8192
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence


def phase_timer() -> Any:
    """SB3 callback timing rollout phases (and the start of ``learn`` before the first one)."""
    from stable_baselines3.common.callbacks import BaseCallback

    class PhaseTimer(BaseCallback):
        def _on_training_start(self) -> None:
            self.first_rollout: float | None = None
            self.rollout_s, self.rollouts = 0.0, 0

        def _on_rollout_start(self) -> None:
            self.t_rollout = time.perf_counter()
            if self.first_rollout is None:
                self.first_rollout = self.t_rollout

        def _on_rollout_end(self) -> None:
            self.rollout_s += time.perf_counter() - self.t_rollout
            self.rollouts += 1

        def _on_step(self) -> bool:
            return True

    return PhaseTimer()


def plain_learn(model: Any, steps: int, callback: Any, reset: bool) -> Any:
    return model.learn(total_timesteps=steps, callback=callback, reset_num_timesteps=reset)


def timed_learn(model: Any, steps: int, reset: bool = True, learn: Callable[..., Any] = plain_learn
                ) -> dict[str, float]:
    """One ``learn(model, steps, timer, reset)`` timed: setup (until the first rollout), rollout and update s.

    ``reset=False`` continues the model (a warm run: caches filled, workers up).
    """
    timer = phase_timer()
    before = int(model.num_timesteps)
    t0 = time.perf_counter()
    learn(model, steps, timer, reset)
    wall = time.perf_counter() - t0
    setup = (timer.first_rollout or t0) - t0  # learn's own setup: the first reset of every env (graph loads)
    update = max(0.0, wall - setup - timer.rollout_s)
    n = int(model.num_timesteps) - before
    return {"env_steps": n, "rollouts": timer.rollouts, "learn_setup_s": setup, "rollout_s": timer.rollout_s,
            "update_s": update, "learn_wall_s": wall, "steps_per_s": n / max(1e-9, timer.rollout_s + update),
            "rollout_steps_per_s": n / max(1e-9, timer.rollout_s)}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tree", required=True, help="the checkout to time (its code is imported)")
    ap.add_argument("--steps", type=int, default=8192)
    ap.add_argument("--n-envs", type=int, default=2)
    ap.add_argument("--kind", choices=("dummy", "subproc"), default="dummy")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--torch-threads", type=int, default=1)
    ap.add_argument("--val-episodes", type=int, default=16, help="per dataset; 0: no validation")
    ap.add_argument("--warm", action="store_true", help="also time a second learn() of --steps (warm caches)")
    ap.add_argument("--prepare-only", action="store_true", help="only build the graphs (into $MAGE_GYM_CACHE)")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)
    tree = Path(args.tree).resolve()
    sys.path.insert(0, str(tree))

    import torch
    from hydra import compose, initialize_config_dir
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    from experiments.common.config import plain, quiet_libraries
    from experiments.common.envs import make_env
    from experiments.common.episodes import episode_of, load_episodes, prepare_graphs
    from experiments.common.training import evaluate, shaping_kwargs
    from policies.ppo import build_model

    quiet_libraries()
    torch.set_num_threads(args.torch_threads)
    with initialize_config_dir(config_dir=str(tree / "conf"), version_base=None):
        cfg = plain(compose(config_name="train", overrides=["logger=none", "env.parser=fast", *args.overrides]))
    tc, env_cfg = cfg["train"], cfg["env"]
    parser, gk = env_cfg.get("parser", "fast"), env_cfg.get("graph_kwargs")
    train, val = [], []
    for name in ("mmlongbench", "financebench"):
        ds = {"name": name, "root": None, "seed": 0}
        train += load_episodes(ds, split="train", limit=None, usable_only=True)
        if args.val_episodes:
            val += load_episodes(ds, split="val", limit=args.val_episodes)
    t0 = time.perf_counter()
    train = prepare_graphs(train, parser, 1, gk)
    val = prepare_graphs(val, parser, 1, gk)
    graphs_s = time.perf_counter() - t0
    if args.prepare_only:  # build that tree's graphs into its cache, nothing timed
        print(json.dumps({"tree": str(tree), "graphs_s": graphs_s, "train_episodes": len(train)}))
        return 0
    ptrain = dict((cfg["policy"]["ppo"].get("train") or {}))
    algo = ptrain.get("algo", "maskable_ppo")
    render_mode = env_cfg.get("render_mode", "visual")
    train_cfg = {**cfg, "env": {**env_cfg, **shaping_kwargs(env_cfg, bool(tc.get("shaping", False)))}}
    n_docs = len({episode_of(e).source for e in train})

    def make_one() -> Any:
        env = make_env(train, train_cfg, render_mode=render_mode, reader="oracle", max_graphs=min(64, n_docs))
        return Monitor(env)

    t0 = time.perf_counter()
    vec = (SubprocVecEnv([make_one] * args.n_envs) if args.kind == "subproc" and args.n_envs > 1
           else DummyVecEnv([make_one] * args.n_envs))
    vec_setup = time.perf_counter() - t0
    try:
        model = build_model(vec, algo=algo, seed=args.seed, net=ptrain.get("net"), hparams=ptrain.get("hparams"),
                            device="cpu")
        import mage_gym

        row: dict[str, Any] = {"tree": str(tree), "imported_from": str(Path(mage_gym.__file__).parent),
                               "vec_env": args.kind if args.n_envs > 1 else "dummy",
                               "n_envs": args.n_envs, "envs": "that tree's train.py path", "graphs_s": graphs_s,
                               "train_episodes": len(train), "train_documents": n_docs, "vec_setup_s": vec_setup,
                               **timed_learn(model, args.steps), "shaping": bool(tc.get("shaping", False))}
        if val:  # validated at --steps (before the warm run), like perf_train.measure
            _, m = evaluate(model, algo, val, cfg, render_mode, seed=10_000)
            row.update(val_episodes=len(val), val_reward=m["reward"], val_page_recall=m["evidence_page_recall"])
        if args.warm:
            row["warm"] = timed_learn(model, args.steps, reset=False)
    finally:
        vec.close()
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
