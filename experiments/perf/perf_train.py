"""Training speed: environment steps per second of MaskablePPO's ``learn``, split into rollout and update.

Why a separate script: the steps/s that train.py logs include validation
inside ``learn``; this one runs ``learn`` with no callback but a timer, so
the figures are the training loop alone. The learner's network and PPO
hyperparameters (``train.ppo``, conf/training/default.yaml) are used unchanged; the training
envs are built exactly as train.py builds them (oracle reader, shaping per
``train.shaping``). Settings run one after the other, each in a fresh
process (so no setting inherits caches another one warmed), on the same
corpus, with the same seed and step count. A setting is
``kind:n_envs[:legacy]``:

* ``before`` (``--before``, default
  ``subproc:2:legacy+train.ppo.hparams.n_steps=512``): train.py's old
  default path (``train.n_envs`` = 2 cores x 512 steps, ``SubprocVecEnv``), each env with
  its own episode provider (its own copy of every graph) and the caches at
  their library defaults (a few graphs, 128 questions), so most resets on a
  corpus larger than that rebuilt retriever indexes and re-scored the question;
* ``after`` (``--after``, default ``dummy:8``): train.py's envs now
  (:func:`~policies.training.recipe.training_env_factory`: the envs of a
  process share one provider, caches sized for the corpus), its default eight
  envs x 128 steps in this process (``train.vec_env=dummy``; the policy
  forward batched over them): the same 1,024 samples per update as
  ``before``, so PPO learns alike per env step (validation reward at equal
  steps, and the 3-seed curves of ``training_ppo_n_envs``). ``dummy:2+
  train.ppo.hparams.n_steps=512`` is today's code on the old rollout
  shape, which changes only the time;
* optionally more (``--also dummy:1:legacy,dummy:1,dummy:2``; a setting
  collects n_envs x n_steps per update, so another product learns
  differently per env step; a setting may carry its own config overrides
  after ``+``, e.g. ``dummy:2+train.ppo.hparams.n_steps=512``).

``--before-tree DIR`` times ``--before`` in another checkout instead of
this tree's ``legacy`` emulation: the old code itself, its envs built as
its train.py built them, started beside the new one in the same run
(:mod:`experiments.perf.perf_train_tree`; its graphs go to ``--before-cache``;
a checkout from before issue 32 names the learner's settings
``policy.ppo.train.*``, so a ``--before`` override for it takes that form).
That is the honest "before" for a target stated against an older figure:
the legacy emulation runs on today's (faster) env code. ``--warm`` adds a
second timed ``learn(steps)`` per setting on the same model (caches and
question vectors warm), the throughput of a long run.

Per setting: ``vec_setup_s`` (worker start, excluded), ``learn_setup_s``
(``learn`` until the first rollout: first resets), ``rollout_s`` (env
steps + policy forward, between SB3's rollout start and end hooks),
``update_s`` (the rest of ``learn``: gradient epochs), and steps/s over
rollout + update. Then, outside the timed window, the validation reward of
the trained model at these equal env steps (unshaped, ordinary env), since
a faster configuration must not learn worse per step.

Why the update is slow, and how far it is from its arithmetic floor: see
``experiments/perf/perf_update.py``.

Corpora: the synthetic ``tiny`` corpus (generated into the cache when
missing, fast parser), and the real mix (MMLongBench + FinanceBench train
splits, ``env.parser=fast``) when its graphs are already in the cache
(never built here; episodes whose graph is missing are left out and
counted).

Run::

    .venv/bin/python experiments/perf/perf_train.py                       # outputs/perf_train/results.json
    .venv/bin/python experiments/perf/perf_train.py --steps 4096 --corpora synth -- train.shaping=false
    .venv/bin/python experiments/perf/perf_train.py --after subproc:8 --also dummy:2+train.ppo.hparams.n_steps=512
    .venv/bin/python experiments/perf/perf_train.py --corpora real_mix --repeats 3    # medians of 3 interleaved runs
    git archive e7c6e2b | tar -x -C /tmp/tree_before                              # train.py before issue 14
    .venv/bin/python experiments/perf/perf_train.py --corpora real_mix --before dummy:2 --before-tree /tmp/tree_before \
        --before-cache /tmp/cache_before --also dummy:2:legacy+train.ppo.hparams.n_steps=512 --warm --repeats 3
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from policies.training.corpora import compose, corpus_episodes

REPO = Path(__file__).resolve().parents[2]


def median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median steps/s (the lower middle one for an even count), with every run's figures."""
    import statistics

    rate = statistics.median_low([r["steps_per_s"] for r in rows])
    row = dict(next(r for r in rows if r["steps_per_s"] == rate))
    if len(rows) > 1:
        row["runs"] = len(rows)
        for key in ("steps_per_s", "rollout_steps_per_s", "rollout_s", "update_s", "val_reward"):
            if all(key in r for r in rows):
                row[f"{key}_all"] = [r[key] for r in rows]
        if all("warm" in r for r in rows):  # the warm figures' own median, not the one of the cold median's run
            row["warm"] = median_row([r["warm"] for r in rows])
    return row


def split_setting(spec: str) -> tuple[str, list[str]]:
    """``kind:n_envs[:legacy][+override...]`` -> (``kind:n_envs[:legacy]``, [config overrides of this setting]).

    e.g. ``dummy:8+train.ppo.hparams.n_steps=128``: eight envs with 128-step segments, so each update
    still sees 8 x 128 = 1,024 samples as two envs x 512 do.
    """
    base, *overrides = spec.strip().split("+")
    return base, [o for o in overrides if o]


def as_legacy(spec: str) -> str:
    """``spec`` on the legacy code path, its overrides kept: ``dummy:2+a=1`` -> ``dummy:2:legacy+a=1``."""
    base, overrides = split_setting(spec)
    if parse_setting(spec)[2]:
        return spec
    return "+".join([f"{base}:legacy", *overrides])


def parse_setting(spec: str) -> tuple[str, int, bool]:
    """``kind:n_envs[:legacy]`` (any ``+override`` ignored) -> (kind, n_envs, legacy)."""
    parts = split_setting(spec)[0].split(":")
    if len(parts) not in (2, 3) or parts[0] not in ("dummy", "subproc") or (len(parts) == 3 and parts[2] != "legacy"):
        raise ValueError(f"a setting is kind:n_envs[:legacy] with kind dummy or subproc, got {spec!r}")
    return parts[0], int(parts[1]), len(parts) == 3


def measure_isolated(cfg: Mapping[str, Any], train_eps: list[Any], val_eps: list[Any], spec: str, steps: int,
                     torch_threads: int, warm: bool = False) -> dict[str, Any]:
    """:func:`measure` of setting ``spec`` in a fresh (spawned) process: no cache warmed by another setting."""
    import multiprocessing as mp

    kind, n_envs, legacy = parse_setting(spec)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    # a plain (non-daemonic) process: a subproc setting starts worker processes of its own
    proc = ctx.Process(target=_measure_child,
                       args=(queue, cfg, train_eps, val_eps, kind, n_envs, steps, legacy, torch_threads, warm))
    proc.start()
    import queue as queue_mod

    while True:
        try:
            ok, out = queue.get(timeout=5)
            break
        except queue_mod.Empty:
            if not proc.is_alive():
                raise RuntimeError(f"setting {spec}: its process ended without a result (exit {proc.exitcode})")
    proc.join()
    if not ok:
        raise RuntimeError(f"setting {spec} failed:\n{out}")
    return out


def measure_tree(tree: Path, cache: Path, spec: str, steps: int, torch_threads: int, val_episodes: int,
                 warm: bool, overrides: Sequence[str]) -> dict[str, Any]:
    """Setting ``spec`` timed in another checkout ``tree`` (its own code, its graph cache ``cache``).

    Runs :mod:`experiments.perf.perf_train_tree` in a fresh process with ``tree``
    as its working directory and on ``PYTHONPATH``; graphs missing from
    ``cache`` are built there first (untimed).
    """
    import json
    import subprocess

    kind, n_envs, _ = parse_setting(spec)
    env = {**os.environ, "MAGE_GYM_CACHE": str(cache), "PYTHONPATH": str(tree)}
    cmd = [sys.executable, str(REPO / "experiments" / "perf" / "perf_train_tree.py"), "--tree", str(tree), "--steps",
           str(steps), "--n-envs", str(n_envs), "--kind", kind, "--torch-threads", str(torch_threads),
           "--val-episodes", str(val_episodes), *(["--warm"] if warm else []), *overrides]
    proc = subprocess.run(cmd, cwd=str(tree), env=env, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{spec} in {tree} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    row = json.loads(lines[-1])
    print_row(f"{row['vec_env']} x{n_envs} in {tree.name}", row)
    return row


def _measure_child(queue, cfg, train_eps, val_eps, kind, n_envs, steps, legacy, torch_threads, warm) -> None:
    import traceback

    from mage_gym.bench.config import quiet_libraries, set_threads

    try:
        quiet_libraries()
        set_threads(torch_threads)
        queue.put((True, measure(cfg, train_eps, val_eps, kind, n_envs, steps, legacy, warm)))
    except BaseException:  # noqa: BLE001 - reported by the parent
        queue.put((False, traceback.format_exc()))


def measure(cfg: Mapping[str, Any], train_eps: list[Any], val_eps: list[Any], kind: str, n_envs: int,
            steps: int, legacy: bool = False, warm: bool = False) -> dict[str, Any]:
    """One setting: build the envs and a fresh model, time ``learn(steps)``, then validate (untimed).

    ``legacy``: train.py's envs before :func:`~policies.training.recipe.training_env_factory` (a provider per
    env, so a graph copy per env, and caches at their library defaults) and plain ``learn``. ``warm``: then a
    second timed ``learn(steps)`` on the same model (``row["warm"]``).
    """
    from stable_baselines3.common.monitor import Monitor

    from mage_gym.bench.envs import make_env
    from policies.training.corpora import training_setup
    from policies.training.recipe import VAL_SEED, evaluate, make_vec_env, ppo_settings, training_env_factory
    from policies.ppo import build_model

    tc, env_cfg = cfg["train"], cfg["env"]
    ptrain = ppo_settings(tc)
    algo = ptrain.get("algo", "maskable_ppo")
    render_mode = env_cfg.get("render_mode", "visual")
    shaping = bool(tc["shaping"])
    train_cfg, n_docs, n_questions = training_setup(cfg, train_eps)

    def make_legacy() -> Any:  # train.py's envs before they shared a provider and sized the caches
        env = make_env(train_eps, train_cfg, render_mode=render_mode, reader="oracle", max_graphs=min(64, n_docs))
        return Monitor(env)

    make_one = make_legacy if legacy else training_env_factory(train_eps, train_cfg, render_mode, min(64, n_docs),
                                                                n_questions)

    t0 = time.perf_counter()
    vec = make_vec_env(make_one, n_envs, kind)
    vec_setup = time.perf_counter() - t0
    try:
        model = build_model(vec, algo=algo, seed=int(cfg.get("seed", 0)), net=ptrain.get("net"),
                            hparams=ptrain.get("hparams"), device=tc.get("device", "cpu"))
        row: dict[str, Any] = {
            "vec_env": "subproc" if kind == "subproc" and n_envs > 1 else "dummy", "n_envs": n_envs,
            "envs": ("legacy: a provider per env, default caches, plain learn()" if legacy
                     else "shared provider, caches sized for corpus, fast_learn()"),
            "vec_setup_s": vec_setup, **timed_learn(model, steps, fast=not legacy, cfg=cfg), "shaping": shaping}
        if val_eps:  # at equal env steps: before any warm run
            _, m = evaluate(model, algo, val_eps, cfg, render_mode, seed=VAL_SEED)
            row.update(val_episodes=len(val_eps), val_reward=m["reward"], val_page_recall=m["evidence_page_recall"])
        if warm:
            row["warm"] = timed_learn(model, steps, fast=not legacy, cfg=cfg, reset=False)
    finally:
        vec.close()
    print_row(f"{row['vec_env']} x{n_envs}{' legacy' if legacy else ''}", row)
    return row


def print_row(label: str, row: Mapping[str, Any]) -> None:
    warm = row.get("warm")
    print(f"  {label}: {row['steps_per_s']:.0f} steps/s (rollout {row['rollout_s']:.1f} s, update "
          f"{row['update_s']:.1f} s, setup {row['learn_setup_s']:.1f} s)"
          + (f"; warm {warm['steps_per_s']:.0f} steps/s" if warm else "")
          + f"; val reward {row.get('val_reward')}", flush=True)


def timed_learn(model: Any, steps: int, fast: bool, cfg: Mapping[str, Any], reset: bool = True) -> dict[str, Any]:
    """:func:`policies.training.learn_timer.timed_learn` of ``learn`` as train.py runs it now (``fast``:
    :func:`policies.training.fast_learn.learn`) or plain ``model.learn`` (the legacy path)."""
    from policies.training.fast_learn import learn as fast_learn
    from policies.training.learn_timer import plain_learn
    from policies.training.learn_timer import timed_learn as timed

    def learn_fast(m: Any, n: int, callback: Any, reset_num_timesteps: bool) -> Any:
        return fast_learn(m, n, callback, update_threads=cfg["train"].get("update_threads"),
                          reset_num_timesteps=reset_num_timesteps)

    return timed(model, steps, reset, learn_fast if fast else plain_learn)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=8192, help="env steps of each learn() call")
    ap.add_argument("--before", default="subproc:2:legacy+train.ppo.hparams.n_steps=512",
                    help="the reference setting (kind:n_envs[:legacy][+override...])")
    ap.add_argument("--after", default="dummy:8", help="the setting compared with it (train.py's default)")
    ap.add_argument("--also", default="", help="more settings to measure, e.g. subproc:2,dummy:4:legacy")
    ap.add_argument("--corpora", default="synth,real_mix", help="comma list of synth, real_mix")
    ap.add_argument("--synth-root", default=None, help="synthetic corpus (default: $MAGE_GYM_CACHE/synth/tiny_n7_s0)")
    ap.add_argument("--synth-docs", type=int, default=7)
    ap.add_argument("--synth-seed", type=int, default=0)
    ap.add_argument("--val-episodes", type=int, default=16, help="validation episodes per dataset (untimed)")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each setting (interleaved); rows are medians")
    ap.add_argument("--torch-threads", type=int, default=1)
    ap.add_argument("--before-tree", default=None,
                    help="time --before in this other checkout (e.g. `git archive e7c6e2b | tar -x -C DIR`) "
                         "instead of this tree's legacy path; real_mix only (synth: --before with :legacy)")
    ap.add_argument("--before-cache", default=None,
                    help="graph cache of --before-tree (default: DIR/.cache); an older graph version "
                         "deletes newer entries, so never this tree's cache")
    ap.add_argument("--warm", action="store_true",
                    help="after the timed learn(steps), time a second one on the same model (caches warm)")
    ap.add_argument("--out", default="outputs/perf_train/results.json")
    ap.add_argument("overrides", nargs="*", help="train.py config overrides, e.g. train.shaping=false")
    args = ap.parse_args(argv)
    base_overrides = ["logger=none", "env.parser=fast", *args.overrides]
    # each setting's own overrides composed once (a bad one fails here, before any work)
    extra_cfgs: dict[tuple[str, ...], dict[str, Any]] = {}
    for spec in [args.before, args.after, *[x for x in args.also.split(",") if x.strip()]]:
        parse_setting(spec)
        extra = tuple(split_setting(spec)[1])
        if extra and extra not in extra_cfgs:
            extra_cfgs[extra] = compose([*base_overrides, *extra])
    from mage_gym.bench.config import quiet_libraries, set_threads
    from mage_gym.bench.results import write_json
    from mage_gym.paths import cache_root

    quiet_libraries()
    set_threads(args.torch_threads)
    if args.synth_root is None:
        args.synth_root = str(cache_root() / "synth" / f"tiny_n{args.synth_docs}_s{args.synth_seed}")
    cfg = compose(base_overrides)
    out: dict[str, Any] = {
        "command": " ".join([Path(sys.executable).name, "experiments/perf/perf_train.py", *(argv or sys.argv[1:])]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "loadavg_start": os.getloadavg()},
        "steps": args.steps, "hparams": (cfg["train"].get("ppo") or {}).get("hparams"),
        "net": (cfg["train"].get("ppo") or {}).get("net"), "corpora": {}}
    for name in [c.strip() for c in args.corpora.split(",") if c.strip()]:
        print(f"[{name}]", flush=True)
        train, val, desc = corpus_episodes(name, cfg, Path(args.synth_root), args.synth_docs, args.synth_seed,
                                            args.val_episodes)
        if not train:
            out["corpora"][name] = {**desc, "skipped": "no training episodes with a cached graph"}
            print("  skipped: no training episodes with a cached graph", flush=True)
            continue
        res = {**desc, "train_episodes": len(train), "train_documents": len({e.source for e in train}),
               "val_episodes": len(val)}
        also = list(dict.fromkeys(x.strip() for x in args.also.split(",") if x.strip()))
        tree = Path(args.before_tree).resolve() if args.before_tree and name == "real_mix" else None
        if tree is not None:
            res["before_tree"] = str(tree)
        # no other tree for this corpus: the before code path emulated in this tree
        before = as_legacy(args.before) if args.before_tree and tree is None else args.before
        # a setting is (spec, in the other tree?): the before setting in another tree is its own setting even when
        # its spec equals an after/also spec of this tree; settings shared by several rows run once
        before_key, after_key = (before, tree is not None), (args.after, False)
        settings = list(dict.fromkeys([before_key, after_key, *((item, False) for item in also)]))
        runs: dict[tuple[str, bool], list[dict[str, Any]]] = {key: [] for key in settings}
        for r in range(args.repeats):  # interleaved, the order reversed every other round
            for spec, other_tree in (settings if r % 2 == 0 else settings[::-1]):
                base, extra = split_setting(spec)
                if other_tree:
                    cache = Path(args.before_cache or tree / ".cache").resolve()
                    row = measure_tree(tree, cache, base, args.steps, args.torch_threads, args.val_episodes,
                                       args.warm, [*args.overrides, *extra])
                else:
                    row = measure_isolated(extra_cfgs.get(tuple(extra), cfg), train, val, base, args.steps,
                                           args.torch_threads, args.warm)
                runs[(spec, other_tree)].append({**row, "overrides": extra} if extra else row)

        res["before"] = median_row(runs[before_key])
        res["after"] = median_row(runs[after_key])
        res["speedup"] = res["after"]["steps_per_s"] / max(1e-9, res["before"]["steps_per_s"])
        if args.warm:
            res["speedup_warm"] = res["after"]["warm"]["steps_per_s"] / max(1e-9, res["before"]["warm"]["steps_per_s"])
        for item in also:
            res.setdefault("also", {})[item] = median_row(runs[(item, False)])
        out["corpora"][name] = res
    out["machine"]["loadavg_end"] = os.getloadavg()
    path = write_json(Path(args.out), out)
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
