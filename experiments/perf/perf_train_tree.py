"""Time ``learn`` in another checkout of this project: the ``--before-tree`` side of ``perf_train.py``.

Why a separate, standalone script: "faster than before" is only a claim
when the old code runs beside the new one on the same machine at the same
time. ``perf_train.py`` starts this script with the old checkout first on
``PYTHONPATH`` (and its own graph cache, since an older ``GRAPH_VERSION``
deletes newer cache entries it meets), so everything imported here is the
old tree's. It therefore only calls functions whose signatures have not
changed since the training loop existed (``load_episodes``,
``prepare_graphs``, ``make_env``, ``build_model``, ``evaluate``; for
``shaping_kwargs`` and the learner's settings, which issue 32 moved from
``policy.ppo.train`` to ``train.ppo``, it reads either form) and builds
the training envs the way ``train.py`` built them then: one episode
provider per env, caches at their library defaults, SB3's ``DummyVecEnv``
(or ``SubprocVecEnv``), plain ``model.learn``.

It prints one JSON object (the same row fields as ``perf_train.measure``)
as its last stdout line. Its timer is this tree's
:mod:`policies.training.learn_timer` (loaded by path), the one
``perf_train.py`` uses for this tree too, so both sides are timed alike. Run by ``perf_train.py``; by hand::

    git archive e7c6e2b | tar -x -C /tmp/tree_old
    cd /tmp/tree_old && PYTHONPATH=/tmp/tree_old MAGE_GYM_CACHE=/tmp/cache_old \\
        /path/to/this/.venv/bin/python /path/to/this/experiments/perf/perf_train_tree.py --tree /tmp/tree_old
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Sequence


def _learn_timer() -> Any:
    """This tree's :mod:`policies.training.learn_timer`, loaded by file path.

    The ``experiments`` package importable here is the *other* tree's, so
    an import statement would find that tree's copy (or none); the file of
    this checkout is the one ``perf_train.py`` times this tree with.
    """
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "policies" / "training" / "learn_timer.py"
    spec = importlib.util.spec_from_file_location("perf_train_learn_timer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tree", required=True, help="the checkout to time (on PYTHONPATH: its code is imported)")
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
    import experiments

    if Path(experiments.__file__).resolve().parent.parent != tree:
        raise SystemExit(f"run with PYTHONPATH={tree} (and {tree} as the working directory): `experiments` "
                         f"is imported from {Path(experiments.__file__).resolve().parent}, not from that tree")
    timer = _learn_timer()

    import torch
    from hydra import compose, initialize_config_dir
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    try:  # the harness as a library (trees since issue 32)
        from mage_gym.bench.config import plain, quiet_libraries
        from mage_gym.bench.envs import make_env
        from mage_gym.bench.episodes import episode_of, load_episodes, prepare_graphs
        from policies.training.recipe import evaluate, shaping_kwargs
    except ImportError:  # older trees: the same functions under experiments/common
        from experiments.common.config import plain, quiet_libraries  # type: ignore[no-redef]
        from experiments.common.envs import make_env  # type: ignore[no-redef]
        from experiments.common.episodes import episode_of, load_episodes, prepare_graphs  # type: ignore[no-redef]
        from experiments.common.training import evaluate, shaping_kwargs  # type: ignore[no-redef]
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
    # the learner's training settings: train.ppo since issue 32 (one place), policy.ppo.train in older trees
    ptrain = dict(tc.get("ppo") or (cfg["policy"]["ppo"].get("train") or {}))
    algo = ptrain.get("algo", "maskable_ppo")
    render_mode = env_cfg.get("render_mode", "visual")
    import inspect

    if len(inspect.signature(shaping_kwargs).parameters) == 1:  # shaping_kwargs(train.shaping) since issue 32
        shaping_kw = shaping_kwargs(tc.get("shaping", False))
    else:  # older trees: shaping_kwargs(env node, on/off)
        shaping_kw = shaping_kwargs(env_cfg, bool(tc.get("shaping", False)))
    train_cfg = {**cfg, "env": {**env_cfg, **shaping_kw}}
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
                               **timer.timed_learn(model, args.steps), "shaping": bool(tc.get("shaping", False))}
        if val:  # validated at --steps (before the warm run), like perf_train.measure
            _, m = evaluate(model, algo, val, cfg, render_mode, seed=10_000)
            row.update(val_episodes=len(val), val_reward=m["reward"], val_page_recall=m["evidence_page_recall"])
        if args.warm:
            row["warm"] = timer.timed_learn(model, args.steps, reset=False)
    finally:
        vec.close()
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
