"""Train a learned controller (MaskablePPO over the slot observation) and evaluate it on held-out documents.

Run (from the repo root):

    .venv/bin/python experiments/train.py dataset=synth dataset.root=data/synth/train train.total_timesteps=50000
    .venv/bin/python experiments/train.py dataset=mmlongbench seed=1 logger=none
    .venv/bin/python experiments/train.py -m seed=0,1,2          # three seeds (Hydra multirun)
    .venv/bin/python experiments/train.py dataset=synth dataset.root=... 'train.mix=[mmlongbench,financebench]'


Readable top to bottom (CleanRL style): episodes of the train split (only
those usable for training: answerable ones need gold on the page), graphs from
the cache, ``n_envs`` environments with the oracle reader, the slot-set
network, an optional behaviour-cloning warm start from a rule teacher
(``train.bc``), ``model.learn`` with a callback that shows progress, logs steps per
second and evaluates the current policy on ``train.eval_episodes`` episodes of
the validation split (other documents) every ``train.eval_freq`` steps.

Writes into the run directory (``outputs/train/<dataset>__<policy>__<seed>__<time>``):
``checkpoint.zip`` (+ ``checkpoint.json``: algorithm, K, render mode, config) - the
checkpoint with the best validation reward (model selection on val, never on test;
``checkpoint_last.zip`` is the final one), ``results.json`` (documented shape: the
selected policy on the validation episodes),
``learning_curve.json`` / ``learning_curve.png`` and ``train_summary.json``.
"""
from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any, Mapping

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402
import hydra  # noqa: E402
import numpy as np  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

log = logging.getLogger("train")


def evaluate(model: Any, algo: str, episodes: list[Any], cfg: Mapping[str, Any], render_mode: str | None,
             seed: int = 0) -> tuple[list[Any], dict[str, Any]]:
    """The current model, acting deterministically, on ``episodes`` (oracle reader)."""
    from policies.ppo import PPOPolicy
    from policies.runner import run_episode

    policy = PPOPolicy(model=model, algo=algo, render_mode=render_mode)
    env = C.make_env(episodes, cfg, render_mode=render_mode, reader="oracle", max_graphs=16)
    try:
        results = [run_episode(env, policy, C.episode_of(e).episode_id, seed=seed + i) for i, e in enumerate(episodes)]
    finally:
        env.close()
    return results, C.summarise(results, {C.episode_of(e).episode_id: C.episode_of(e) for e in episodes},
                                answers=False)


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
                row.update({f"val_{k}": m[k] for k in ("reward", "evidence_page_recall", "element_recall",
                                                      "evidence_all_covered", "tokens_rendered")})
            curve.append(row)
            if on_eval is not None:
                on_eval(self.model, row)
            logger.log({k: v for k, v in row.items() if k != "timesteps"}, step=n)
            self.bar.set_postfix(sps=f"{sps:.0f}", val_reward=C.fmt(row.get("val_reward")),
                                 train_reward=C.fmt(row.get("train_reward")))
            log.info("step %d: %s", n, {k: C.fmt(v) for k, v in row.items()})

        def _on_training_end(self) -> None:
            self.bar.n = min(self.num_timesteps, total)
            self.bar.close()

    return TrainCallback()


def warm_start(model: Any, bc: Mapping[str, Any], train_eps: list[Any], cfg: Mapping[str, Any],
               render_mode: str, seed: int) -> dict[str, Any] | None:
    """Behaviour cloning of ``bc.teacher`` (conf/policy/<teacher>.yaml) on ``bc.episodes`` training episodes."""
    if not bc.get("enabled"):
        return None
    from benchmark import policy_options

    from policies import get_policy
    from policies.imitation import agreement, behaviour_clone, collect_demos

    name = bc.get("teacher", "heuristic")
    opts = policy_options(name, None)
    for key in ("limit", "only_base_budget"):
        opts.pop(key, None)
    opts["render_mode"] = render_mode
    teacher = get_policy(name, **opts)
    ids = [C.episode_of(e).episode_id for e in train_eps]
    rng = np.random.default_rng(seed)
    n = int(bc.get("episodes", len(ids)))
    pick = list(rng.permutation(ids)[:n]) if n <= len(ids) else list(rng.choice(ids, size=n))
    env = C.make_env(train_eps, cfg, render_mode=render_mode, reader="oracle", max_graphs=64)
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


def train(cfg: Mapping[str, Any], out: Path, logger: Any = None, train_episodes: list[Any] | None = None,
          val_episodes: list[Any] | None = None) -> dict[str, Any]:
    """Train per ``cfg`` (plain dict of the train config); returns the summary written to ``out``.

    ``train_episodes``/``val_episodes`` replace the dataset's splits (e.g. pre-built pairs in tests).
    """
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    from policies.ppo import build_model, save_checkpoint

    logger = logger or C.NullLogger()
    tc, pc, ds = cfg["train"], dict(cfg["policy"]), cfg["dataset"]
    seed = int(cfg.get("seed", 0))
    C.set_threads(cfg.get("torch_threads"))
    ptrain = dict(pc.get("train") or {})
    algo = ptrain.get("algo", "maskable_ppo")
    render_mode = pc.get("render_mode") or cfg["env"].get("render_mode", "visual")
    env_cfg = cfg["env"]
    parser = env_cfg.get("parser", "layout")
    workers = int(cfg.get("graph_workers", 1))

    sources = [ds] + [{"name": m, "root": None, "seed": ds.get("seed", 0)} if isinstance(m, str) else dict(m)
                      for m in (tc.get("mix") or [])]  # other datasets trained on together (same splits)
    if train_episodes is None:
        train_episodes = [e for d in sources for e in C.load_episodes(d, split=tc["split"], limit=None,
                                                                       usable_only=True)]
    if val_episodes is None:
        val_episodes = [e for d in sources for e in C.load_episodes(d, split=tc["eval_split"],
                                                                     limit=tc.get("eval_episodes"))]
    train_eps = C.prepare_graphs(train_episodes, parser, workers, env_cfg.get("graph_kwargs"))
    val_eps = C.prepare_graphs(val_episodes, parser, workers, env_cfg.get("graph_kwargs"))
    if not train_eps:
        raise ValueError(f"no training episodes in {ds['name']} split {tc['split']!r}")
    n_docs = len({C.episode_of(e).source for e in train_eps})
    log.info("train: %d episodes on %d documents; eval: %d episodes (%s)", len(train_eps), n_docs, len(val_eps),
             tc["eval_split"])

    info_keys = ("evidence_page_recall", "element_recall", "tokens_rendered")

    # Potential-based shaping (phi = gold coverage of the state) densifies the training signal without changing
    # the optimal policy; evaluation envs keep the plain terminal reward.
    train_cfg = {**cfg, "env": {**env_cfg, "reward": {**dict(env_cfg.get("reward") or {}),
                                                      "shaping": bool(tc.get("shaping", False))}}}

    def make_one() -> Any:
        env = C.make_env(train_eps, train_cfg, render_mode=render_mode, reader="oracle", max_graphs=min(64, n_docs))
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
            row.update({f"val_{k}": m[k] for k in ("reward", "evidence_page_recall", "element_recall",
                                                  "evidence_all_covered", "tokens_rendered")})
            keep_best(model, row)
        curve.append(row)
        log.info("after behaviour cloning: %s", {k: C.fmt(v) for k, v in row.items() if k != "bc"})
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
        runs.append(C.make_run("ppo", env_cfg.get("budget") or {}, ds["name"], tc["eval_split"], final))
    C.write_results(out / "results.json", runs)
    C.write_json(out / "learning_curve.json", curve)
    plot = save_curve(curve, out / "learning_curve.png")
    summary = {"checkpoint": str(ckpt), "selected_timesteps": best["timesteps"], "best_val_reward": (
                   best["reward"] if best["timesteps"] is not None else None), "algo": algo, "seed": seed, "render_mode": render_mode,
               "timesteps": int(model.num_timesteps), "train_seconds": train_s,
               "steps_per_s": model.num_timesteps / max(1e-9, train_s), "train_episodes": len(train_eps),
               "train_documents": n_docs, "eval_episodes": len(val_eps), "final_eval": final,
               "learning_curve": curve}
    C.write_json(out / "train_summary.json", summary)
    logger.summary({"steps_per_s": summary["steps_per_s"], **{f"final/{k}": v for k, v in (final or {}).items()}})
    if plot is not None:
        logger.images({"learning_curve": plot})
    return summary


def save_curve(curve: list[dict[str, Any]], path: Path) -> Path | None:
    if not curve:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
    x = [r["timesteps"] for r in curve]
    for key, label in (("train_reward", "train (rolling)"), ("val_reward", "validation")):
        pts = [(a, r.get(key)) for a, r in zip(x, curve) if r.get(key) is not None]
        if pts:
            ax[0].plot(*zip(*pts), marker="o", label=label)
    pts = [(a, r.get("val_evidence_page_recall")) for a, r in zip(x, curve) if r.get("val_evidence_page_recall") is not None]
    if pts:
        ax[1].plot(*zip(*pts), marker="o", label="val evidence page recall")
    pts = [(a, r.get("val_element_recall")) for a, r in zip(x, curve) if r.get("val_element_recall") is not None]
    if pts:
        ax[1].plot(*zip(*pts), marker="s", label="val element recall")
    for a, t in zip(ax, ("reward", "evidence")):
        a.set_xlabel("environment steps")
        a.set_title(t)
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


@hydra.main(version_base=None, config_path="../conf", config_name="train")
def main(cfg: DictConfig) -> None:
    out = C.run_dir()
    c = C.plain(cfg)
    logger = C.make_logger(c, C.run_name(c["dataset"]["name"], c["policy"]["name"], c.get("seed", 0)), "train", out)
    try:
        summary = train(c, out, logger)
    finally:
        logger.finish()
    print(f"checkpoint: {summary['checkpoint']}  ({summary['steps_per_s']:.0f} steps/s)")
    if summary["final_eval"]:
        print({k: C.fmt(v) for k, v in summary["final_eval"].items()})
    print(f"results: {out / 'results.json'}")


if __name__ == "__main__":
    main()
