"""Train the learned controller (MaskablePPO over the slot observation) with model selection on validation.

The recipe, top to bottom in :func:`train`: episodes of the train split
(only those usable for training: answerable ones need gold on the page;
``dataset.limit`` caps them) and of the validation split (other documents;
``train.eval_episodes`` of them), graphs from the cache, ``n_envs``
environments with the oracle reader and potential-based shaping, the
slot-set network, an optional behaviour-cloning warm start from a rule
teacher (``train.bc``, options ``policy.<teacher>``), ``model.learn`` with a
callback that shows progress, logs steps per second and evaluates on the
validation episodes every ``train.eval_freq`` steps, keeping the best.

Without validation episodes there is nothing to select on: training stops
with a :class:`ConfigError` unless ``train.allow_no_validation`` is true, in
which case the last policy is kept and every output says so.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from experiments.common.benchmarking import play_episodes
from experiments.common.config import ConfigError, check_parser, set_threads
from experiments.common.envs import make_env
from experiments.common.episodes import episode_of, load_episodes, prepare_graphs
from experiments.common.metrics import summarise
from experiments.common.plots import save_curve
from experiments.common.policy_options import BENCHMARK_OPTIONS, checkpoint_identity, policy_options
from experiments.common.results import fmt, make_run, write_json, write_results
from experiments.common.tracking import NullLogger

log = logging.getLogger("experiments.train")

#: the learned policy train.py trains (its options: policy.ppo)
LEARNER = "ppo"
VAL_KEYS = ("reward", "evidence_page_recall", "element_recall", "evidence_all_covered", "tokens_rendered")


def evaluate(model: Any, algo: str, episodes: list[Any], cfg: Mapping[str, Any], render_mode: str | None,
             seed: int = 0) -> tuple[list[Any], dict[str, Any]]:
    """The current model, acting deterministically, on ``episodes`` (oracle reader)."""
    from policies.ppo import PPOPolicy

    policy = PPOPolicy(model=model, algo=algo, render_mode=render_mode)
    env = make_env(episodes, cfg, render_mode=render_mode, reader="oracle", max_graphs=16)
    try:
        results = play_episodes(env, policy, episodes, seed=seed, progress=False)
    finally:
        env.close()
    return results, summarise(results, {episode_of(e).episode_id: episode_of(e) for e in episodes}, answers=False)


def make_callback(total: int, eval_freq: int, eval_fn: Any, logger: Any, curve: list[dict[str, Any]],
                  on_eval: Any = None) -> Any:
    """SB3 callback: tqdm progress, steps/s, rolling training reward, periodic validation (``on_eval(model, row)``)."""
    from stable_baselines3.common.callbacks import BaseCallback
    from tqdm import tqdm

    class TrainCallback(BaseCallback):
        def _on_training_start(self) -> None:
            self.t0 = time.perf_counter()
            self.bar = tqdm(total=total, desc="train", unit="step")
            self.next_eval = eval_freq
            self.final_done = False

        def _on_step(self) -> bool:
            n = self.num_timesteps
            self.bar.n = min(n, total)
            if n >= total:  # SB3 finishes the current rollout past `total`: evaluate once, then stop
                if not self.final_done:
                    self.final_done = True
                    self._evaluate(n)
                return False
            if n >= self.next_eval:
                self.next_eval += eval_freq
                self._evaluate(n)
            return True

        def _evaluate(self, n: int) -> None:
            sps = n / max(1e-9, time.perf_counter() - self.t0)
            eps = [e for e in self.model.ep_info_buffer]
            row: dict[str, Any] = {"timesteps": n, "steps_per_s": sps, "wall_s": time.perf_counter() - self.t0,
                                   "train_reward": (sum(e["r"] for e in eps) / len(eps)) if eps else None}
            if eval_fn is not None:
                _, m = eval_fn(self.model)
                row.update({f"val_{k}": m[k] for k in VAL_KEYS})
            curve.append(row)
            if on_eval is not None:
                on_eval(self.model, row)
            logger.log({k: v for k, v in row.items() if k != "timesteps"}, step=n)
            self.bar.set_postfix(sps=f"{sps:.0f}", val_reward=fmt(row.get("val_reward")),
                                 train_reward=fmt(row.get("train_reward")))
            log.info("step %d: %s", n, {k: fmt(v) for k, v in row.items()})

        def _on_training_end(self) -> None:
            self.bar.n = min(self.num_timesteps, total)
            self.bar.close()

    return TrainCallback()


def warm_start(model: Any, bc: Mapping[str, Any], train_eps: list[Any], cfg: Mapping[str, Any],
               render_mode: str, seed: int) -> dict[str, Any] | None:
    """Behaviour cloning of ``bc.teacher`` (options ``policy.<teacher>``) on ``bc.episodes`` training episodes."""
    if not bc.get("enabled"):
        return None
    from policies import get_policy
    from policies.imitation import agreement, behaviour_clone, collect_demos

    name = bc.get("teacher", "heuristic")
    opts = policy_options(cfg, name)
    for key in BENCHMARK_OPTIONS:
        opts.pop(key, None)
    opts["render_mode"] = render_mode
    teacher = get_policy(name, **opts)
    ids = [episode_of(e).episode_id for e in train_eps]
    rng = np.random.default_rng(seed)
    n = int(bc.get("episodes", len(ids)))
    pick = list(rng.permutation(ids)[:n]) if n <= len(ids) else list(rng.choice(ids, size=n))
    env = make_env(train_eps, cfg, render_mode=render_mode, reader="oracle", max_graphs=64)
    t0 = time.perf_counter()
    try:
        demos = collect_demos(env, teacher, pick, seed=seed)
    finally:
        env.close()
    losses = behaviour_clone(model, demos, updates=int(bc.get("updates", 1000)),
                             batch_size=int(bc.get("batch_size", 256)), lr=float(bc.get("lr", 1e-3)), seed=seed)
    out = {"teacher": name, "episodes": len(pick), "steps": int(len(demos["actions"])), "losses": losses,
           "agreement": agreement(model, demos), "seconds": time.perf_counter() - t0}
    log.info("behaviour cloning of %s: %d steps, loss %s, agreement %.3f", name, out["steps"],
             [round(x, 3) for x in losses], out["agreement"])
    return out


def shaping_kwargs(env_cfg: Mapping[str, Any], shaping: bool) -> dict[str, Any]:
    """``MageRAG-v0`` keywords for potential-based shaping (``env.reward.shaping_gamma``/``shaping_scale``), or none."""
    if not shaping:
        return {}
    reward = dict(env_cfg.get("reward") or {})
    return {"privileged": True, "shaping": {"gamma": float(reward.get("shaping_gamma", 1.0)),
                                           "scale": float(reward.get("shaping_scale", 1.0))}}


def check_config(cfg: Mapping[str, Any]) -> None:
    """The options that would otherwise fail late: the parser, the learner's and the teacher's options."""
    check_parser(cfg["env"].get("parser", "layout"))
    policy_options(cfg, LEARNER)
    bc = dict(cfg["train"].get("bc") or {})
    if bc.get("enabled"):
        policy_options(cfg, bc.get("teacher", "heuristic"))


def split_episodes(cfg: Mapping[str, Any]) -> tuple[list[Any], list[Any]]:
    """(training episodes, validation episodes) of ``dataset`` and ``train.mix``, before graphs are built.

    Training: split ``train.split``, usable for training only, at most
    ``dataset.limit`` of the main dataset (a ``mix`` entry may set its own
    ``limit``). Validation: split ``train.eval_split``, at most
    ``train.eval_episodes`` per dataset.
    """
    tc, ds = cfg["train"], cfg["dataset"]
    sources = [ds] + [{"name": m, "root": None, "seed": ds.get("seed", 0)} if isinstance(m, str) else dict(m)
                      for m in (tc.get("mix") or [])]  # other datasets trained on together (same splits)
    train_eps = [e for d in sources for e in load_episodes(d, split=tc["split"], usable_only=True)]
    val_eps = [e for d in sources for e in load_episodes(d, split=tc["eval_split"], limit=tc.get("eval_episodes"))]
    return train_eps, val_eps


def train(cfg: Mapping[str, Any], out: Path, logger: Any = None, train_episodes: list[Any] | None = None,
          val_episodes: list[Any] | None = None) -> dict[str, Any]:
    """Train per ``cfg`` (the composed train config as plain containers); returns the summary written to ``out``.

    ``train_episodes``/``val_episodes`` replace the dataset's splits (e.g. pre-built pairs in tests).
    """
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    from policies.ppo import build_model, save_checkpoint

    check_config(cfg)
    logger = logger or NullLogger()
    tc, ds, env_cfg = cfg["train"], cfg["dataset"], cfg["env"]
    pc = policy_options(cfg, LEARNER)
    seed = int(cfg.get("seed", 0))
    set_threads(cfg.get("torch_threads"))
    ptrain = dict(pc.get("train") or {})
    algo = ptrain.get("algo", "maskable_ppo")
    render_mode = pc.get("render_mode") or env_cfg.get("render_mode", "visual")
    parser = env_cfg.get("parser", "layout")
    workers = int(cfg.get("graph_workers", 1))

    if train_episodes is None or val_episodes is None:
        loaded_train, loaded_val = split_episodes(cfg)
        train_episodes = loaded_train if train_episodes is None else train_episodes
        val_episodes = loaded_val if val_episodes is None else val_episodes
    train_eps = prepare_graphs(train_episodes, parser, workers, env_cfg.get("graph_kwargs"))
    val_eps = prepare_graphs(val_episodes, parser, workers, env_cfg.get("graph_kwargs"))
    if not train_eps:
        raise ConfigError(f"no training episodes in {ds['name']} split {tc['split']!r}")
    if not val_eps:
        msg = (f"no validation episodes in {ds['name']} split {tc['eval_split']!r}: the policy cannot be selected "
               "on held-out documents")
        if not tc.get("allow_no_validation", False):
            raise ConfigError(msg + "; choose another train.eval_split, or set train.allow_no_validation=true to "
                              "train anyway and keep the last policy")
        log.warning("!" * 20 + " %s; train.allow_no_validation=true: keeping the LAST policy, unselected " + "!" * 20,
                    msg)
    n_docs = len({episode_of(e).source for e in train_eps})
    log.info("train: %d episodes on %d documents; eval: %d episodes (%s)", len(train_eps), n_docs, len(val_eps),
             tc["eval_split"])

    info_keys = ("evidence_page_recall", "element_recall", "tokens_rendered")

    # Potential-based shaping (phi = gold coverage of the state) densifies the training signal without changing
    # the optimal policy. It reads gold, so only the training envs are privileged (the policy still sees only the
    # observation); evaluation envs keep the plain terminal reward and sealed gold.
    train_cfg = {**cfg, "env": {**env_cfg, **shaping_kwargs(env_cfg, bool(tc.get("shaping", False)))}}

    def make_one() -> Any:
        env = make_env(train_eps, train_cfg, render_mode=render_mode, reader="oracle", max_graphs=min(64, n_docs))
        return Monitor(env, info_keywords=info_keys)

    vec = DummyVecEnv([make_one for _ in range(int(tc.get("n_envs", 1)))])
    model = build_model(vec, algo=algo, seed=seed, net=ptrain.get("net"), hparams=ptrain.get("hparams"),
                        device=tc.get("device", "cpu"))
    curve: list[dict[str, Any]] = []
    eval_fn = (lambda m: evaluate(m, algo, val_eps, cfg, render_mode, seed=10_000)) if val_eps else None
    K = int(vec.observation_space["nodes"].shape[0])
    name = tc.get("checkpoint_name", "checkpoint")
    meta = {"render_mode": render_mode, "seed": seed, "dataset": ds["name"], "config": cfg}
    best = {"reward": -float("inf"), "timesteps": None}

    def keep_best(m: Any, row: dict[str, Any]) -> None:
        """Model selection on the validation split: the checkpoint with the best validation reward."""
        r = row.get("val_reward")
        if r is not None and r > best["reward"]:
            best.update(reward=r, timesteps=row["timesteps"])
            save_checkpoint(m, out / f"{name}_best.zip", algo, K, extra={**meta, "timesteps": row["timesteps"]})

    bc = warm_start(model, dict(tc.get("bc") or {}), train_eps, cfg, render_mode, seed)
    if bc is not None:
        row = {"timesteps": 0, "steps_per_s": None, "wall_s": 0.0, "train_reward": None, "bc": bc}
        if eval_fn is not None:
            _, m = eval_fn(model)
            row.update({f"val_{k}": m[k] for k in VAL_KEYS})
            keep_best(model, row)
        curve.append(row)
        log.info("after behaviour cloning: %s", {k: fmt(v) for k, v in row.items() if k != "bc"})
    total = int(tc["total_timesteps"])
    t0 = time.perf_counter()
    model.learn(total_timesteps=total,
                callback=make_callback(total, int(tc["eval_freq"]), eval_fn, logger, curve, on_eval=keep_best))
    train_s = time.perf_counter() - t0
    last = save_checkpoint(model, out / f"{name}_last.zip", algo, K,
                           extra={**meta, "timesteps": int(model.num_timesteps)})
    vec.close()
    # The checkpoint benchmarks use: best on validation when validation ran, else the last one.
    chosen = out / f"{name}_best.zip" if best["timesteps"] is not None else last
    ckpt = out / f"{name}.zip"
    for suffix in (".zip", ".json"):
        ckpt.with_suffix(suffix).write_bytes(chosen.with_suffix(suffix).read_bytes())

    runs = []
    final = None
    if val_eps:
        from policies.ppo import PPOPolicy

        chosen_model = PPOPolicy(checkpoint=str(ckpt)).model
        results, final = evaluate(chosen_model, algo, val_eps, cfg, render_mode, seed=10_000)
        runs.append(make_run(LEARNER, env_cfg.get("budget") or {}, ds["name"], tc["eval_split"], final,
                             checkpoint=checkpoint_identity(ckpt)))
    write_results(out / "results.json", runs)
    write_json(out / "learning_curve.json", curve)
    plot = save_curve(curve, out / "learning_curve.png")
    summary = {"checkpoint": str(ckpt), "checkpoint_sha256": checkpoint_identity(ckpt)["sha256"],
               "selection": "best_validation_reward" if best["timesteps"] is not None else "last (no validation)",
               "selected_timesteps": best["timesteps"], "best_val_reward": (
                   best["reward"] if best["timesteps"] is not None else None), "algo": algo, "seed": seed,
               "render_mode": render_mode, "timesteps": int(model.num_timesteps), "train_seconds": train_s,
               "steps_per_s": model.num_timesteps / max(1e-9, train_s), "train_episodes": len(train_eps),
               "train_documents": n_docs, "eval_episodes": len(val_eps), "final_eval": final,
               "learning_curve": curve}
    write_json(out / "train_summary.json", summary)
    logger.summary({"steps_per_s": summary["steps_per_s"], **{f"final/{k}": v for k, v in (final or {}).items()}})
    if plot is not None:
        logger.images({"learning_curve": plot})
    return summary
