"""Train the learned controller (slot-set network) with model selection on validation.

Three recipes (``train.algo``), each readable top to bottom in :func:`train`:

- ``ppo``: MaskablePPO, optionally warm-started by behaviour cloning of a
  rule teacher (``train.bc``, options ``policy.<teacher>``);
- ``dagger``: imitation of the privileged oracle (:mod:`policies.dagger`):
  rounds of student rollouts on a privileged env held here, labels from the
  oracle, aggregate, refit; stops when validation reward stops improving;
- ``dagger_ppo``: ``dagger``, then MaskablePPO fine-tuning from its best
  round (``train.init=<checkpoint>`` starts any recipe from saved weights).

Common to all: episodes of the train split (only those usable for training:
answerable ones need gold on the page; ``dataset.limit`` caps them) and of
the validation split (other documents; ``train.eval_episodes`` of them),
graphs from the cache, ``train.n_envs`` PPO environments (default 8 x
``n_steps`` 128 = 1,024 samples per update whatever the machine; by default
all in this process sharing one episode provider and graph cache, which
measured faster than one worker process per env on the real mix with
identical learning (``experiments/perf_train.py``); ``train.vec_env=subproc``
gives ``SubprocVecEnv``) with the oracle reader and optional potential-based
shaping (``train.shaping``), periodic validation every ``train.eval_freq``
steps keeping the best. Validation envs are never privileged nor shaped:
every reported reward is the plain terminal one, and ``results.json`` says
whether training used shaping (its ``training`` block).

Without validation episodes there is nothing to select on: training stops
with a :class:`ConfigError` unless ``train.allow_no_validation`` is true, in
which case the last policy is kept and every output says so.
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from experiments.common.benchmarking import play_episodes
from experiments.common.config import ConfigError, check_parser, set_threads
from experiments.common.envs import make_env
from experiments.common.fast_learn import learn as fast_learn
from experiments.common.fast_learn import usable_cores
from experiments.common.episodes import episode_of, load_episodes, prepare_graphs
from experiments.common.metrics import summarise
from experiments.common.plots import save_curve
from experiments.common.policy_options import BENCHMARK_OPTIONS, checkpoint_identity, policy_options
from experiments.common.results import fmt, make_run, write_json, write_results
from experiments.common.tracking import NullLogger

log = logging.getLogger("experiments.train")

#: the learned policy train.py trains (its options: policy.ppo)
LEARNER = "ppo"
#: train.algo: what trains it
RECIPES: tuple[str, ...] = ("ppo", "dagger", "dagger_ppo")
#: the privileged teacher DAgger imitates
TEACHER = "oracle"
#: validation episodes are reset with VAL_SEED + i, the same for every policy and every evaluation
VAL_SEED = 10_000
VAL_KEYS = ("reward", "evidence_page_recall", "element_recall", "evidence_all_covered", "tokens_rendered")


def evaluate(model: Any, algo: str, episodes: list[Any], cfg: Mapping[str, Any], render_mode: str | None,
             seed: int = 0) -> tuple[list[Any], dict[str, Any]]:
    """The current model, acting deterministically, on ``episodes`` (oracle reader; an ordinary env: never
    privileged, never shaped, whatever the config says)."""
    from policies.ppo import PPOPolicy

    policy = PPOPolicy(model=model, algo=algo, render_mode=render_mode)
    plain_env = {k: v for k, v in cfg["env"].items() if k not in ("privileged", "shaping")}
    env = make_env(episodes, {**cfg, "env": plain_env}, render_mode=render_mode, reader="oracle", max_graphs=16)
    try:
        results = play_episodes(env, policy, episodes, seed=seed, progress=False)
    finally:
        env.close()
    return results, summarise(results, {episode_of(e).episode_id: episode_of(e) for e in episodes}, answers=False)


def make_callback(total: int, eval_freq: int, eval_fn: Any, logger: Any, curve: list[dict[str, Any]],
                  on_eval: Any = None, offset: int = 0) -> Any:
    """SB3 callback: tqdm progress, steps/s, rolling training reward, periodic validation (``on_eval(model, row)``).

    ``offset``: environment steps spent before this ``learn`` (imitation rollouts), added to each row's
    ``timesteps`` so the learning curve counts every environment step of the run."""
    from stable_baselines3.common.callbacks import BaseCallback
    from mage_gym.progress import progress_bar

    class TrainCallback(BaseCallback):
        def _on_training_start(self) -> None:
            self.t0 = time.perf_counter()
            self.bar = progress_bar(total=total, desc="train", unit="step")
            self.next_eval = eval_freq
            self.final_done = False

        def _on_step(self) -> bool:
            n = self.num_timesteps
            self.bar.update(min(n, total) - self.bar.n)  # update(), not n=: the bar redraws (or logs) as it goes
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
            row: dict[str, Any] = {"timesteps": offset + n, "stage": "ppo", "steps_per_s": sps,
                                   "wall_s": time.perf_counter() - self.t0,
                                   "train_reward": (sum(e["r"] for e in eps) / len(eps)) if eps else None}
            if eval_fn is not None:
                _, m = eval_fn(self.model)
                row.update({f"val_{k}": m[k] for k in VAL_KEYS})
            curve.append(row)
            if on_eval is not None:
                on_eval(self.model, row)
            logger.log({k: v for k, v in row.items() if k not in ("timesteps", "stage")}, step=offset + n)
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
    tc = cfg["train"]
    recipe = recipe_of(tc)
    bc = dict(tc.get("bc") or {})
    if bc.get("enabled") and recipe == "ppo":
        policy_options(cfg, bc.get("teacher", "heuristic"))
    if recipe != "ppo":
        from policies.dagger import DaggerConfig

        DaggerConfig.coerce(tc.get("dagger"))
        algo = dict(policy_options(cfg, LEARNER).get("train") or {}).get("algo", "maskable_ppo")
        if algo != "maskable_ppo":
            raise ConfigError(f"train.algo={recipe} fits a masked policy: policy.ppo.train.algo must be maskable_ppo, "
                              f"not {algo!r}")
    if tc.get("vec_env", "subproc") not in ("subproc", "dummy"):
        raise ConfigError(f"train.vec_env must be subproc or dummy, got {tc.get('vec_env')!r}")
    if tc.get("init") and not Path(str(tc["init"])).expanduser().with_suffix(".zip").is_file():
        raise ConfigError(f"train.init: no checkpoint at {tc['init']}")


def recipe_of(tc: Mapping[str, Any]) -> str:
    """``train.algo`` (default ``ppo``), checked."""
    recipe = str(tc.get("algo") or "ppo")
    if recipe not in RECIPES:
        raise ConfigError(f"train.algo must be one of {list(RECIPES)}, got {recipe!r}")
    return recipe


def n_envs_of(tc: Mapping[str, Any]) -> int:
    """``train.n_envs``; null means one env per core available to this process."""
    n = tc.get("n_envs")
    if n is None:
        return usable_cores()
    return max(1, int(n))


def make_vec_env(make_one: Any, n_envs: int, kind: str = "subproc", start_method: str | None = None) -> Any:
    """``n_envs`` training envs: one worker process each (``SubprocVecEnv``) or all in this process (``dummy``,
    and always for a single env: a worker would only add a pipe round trip per step)."""
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    if kind == "dummy" or n_envs == 1:
        return DummyVecEnv([make_one for _ in range(n_envs)])
    return SubprocVecEnv([_in_worker(make_one) for _ in range(n_envs)], start_method=start_method)


def reserve_training_caches(n_graphs: int, n_questions: int) -> None:
    """Size this process's per-graph and per-question caches for a training corpus (call where the envs live).

    Why: a training env cycles through all its documents and questions, while
    the caches default to a few graphs (retriever indexes, graph index, page
    views) and 128 questions; on a corpus larger than that, most resets
    rebuilt a BM25 index and re-scored the question (the largest share of
    rollout time on the real mix). Caches are pure functions of their keys:
    nothing a policy sees changes.
    """
    from mage_gym.env.relevance import reserve_questions
    from mage_gym.retrieval.cache import reserve_graphs

    reserve_graphs(2 * n_graphs)  # each graph and its page-only view (SearchEvidence scores pages on the view)
    reserve_questions(n_questions)


def training_env_factory(train_eps: list[Any], train_cfg: Mapping[str, Any], render_mode: str, max_graphs: int,
                         n_questions: int, info_keys: tuple[str, ...] = ()) -> Any:
    """``make_one`` for the PPO vec env: a monitored ``MageRAG-v0`` on ``train_eps`` (oracle reader).

    All envs built in one process share one episode provider, so each
    document graph is loaded once per process and the caches keyed by graph
    (retriever indexes, graph index, relevance) serve every env; caches are
    sized for the corpus (:func:`reserve_training_caches`). With eight envs
    in one process and a provider each, a 31-document corpus meant eight
    copies of every graph and an index rebuilt at most resets. Each env keeps
    its own seeded episode draw; what it observes does not change.
    """
    shared: dict[int, Any] = {}  # process id -> provider (a worker process builds its own)

    def make_one() -> Any:
        import gymnasium as gym
        from stable_baselines3.common.monitor import Monitor

        import mage_gym.env  # noqa: F401 - registers MageRAG-v0
        from experiments.common.envs import env_kwargs
        from mage_gym.env.episodes import as_provider

        reserve_training_caches(max_graphs, n_questions)
        kw = env_kwargs(train_cfg, render_mode, "oracle")
        kw["max_graphs"] = max_graphs
        provider = shared.get(os.getpid())
        if provider is None:
            provider = shared[os.getpid()] = as_provider(
                list(train_eps), parser=kw.get("parser", "layout"), max_graphs=max_graphs,
                graph_kwargs=kw.get("graph_kwargs"))
        env = gym.make("MageRAG-v0", episodes=provider, **kw)
        return Monitor(env, info_keywords=info_keys)

    return make_one


def _in_worker(make_one: Any) -> Any:
    def build() -> Any:
        set_threads(1)  # one env per core: torch (and its thread pool) must not take the others
        return make_one()

    return build


def init_weights(model: Any, path: str | Path, K: int, render_mode: str) -> dict[str, Any]:
    """Copy the policy weights of checkpoint ``path`` into ``model`` after checking its sidecar (features,
    graph version, observation keys, K and render mode must match the training envs)."""
    from policies.ppo import algo_class, check_sidecar, read_meta

    path = Path(str(path)).expanduser().with_suffix(".zip")
    meta = read_meta(path)
    check_sidecar(meta, K=K, render_mode=render_mode, observation_keys=list(model.observation_space.spaces),
                  source=f"train.init checkpoint {path}")
    cls, _ = algo_class(meta.get("algo", "maskable_ppo"))
    src = cls.load(str(path), device=model.device)
    model.policy.load_state_dict(src.policy.state_dict())
    return {"path": str(path), "timesteps": meta.get("timesteps"), "recipe": meta.get("recipe")}


def imitate(model: Any, train_eps: list[Any], val_eps: list[Any], cfg: Mapping[str, Any], render_mode: str,
            seed: int, eval_fn: Any, on_round: Any) -> dict[str, Any]:
    """DAgger from the oracle (:func:`policies.dagger.run_dagger`) on a privileged, unshaped env of the
    training episodes; then, on the validation episodes, the student's on-policy agreement with the
    teacher and the teacher's own metrics (a privileged env again: the teacher needs the gold)."""
    from policies.dagger import on_policy_agreement, run_dagger
    from policies.oracle import OraclePolicy

    tc = cfg["train"]
    privileged = {**cfg, "env": {**cfg["env"], "privileged": True}}
    n_docs = len({episode_of(e).source for e in train_eps})
    env = make_env(train_eps, privileged, render_mode=render_mode, reader="oracle", max_graphs=min(64, n_docs))
    t0 = time.perf_counter()
    try:
        teacher = OraclePolicy(env, render_mode=render_mode)
        ids = [episode_of(e).episode_id for e in train_eps]
        out = run_dagger(model, env, teacher, ids, tc.get("dagger"), seed=seed, validate=eval_fn, on_round=on_round)
    finally:
        env.close()
    out["seconds"] = time.perf_counter() - t0
    if val_eps:
        venv = make_env(val_eps, privileged, render_mode=render_mode, reader="oracle", max_graphs=16)
        try:
            teacher = OraclePolicy(venv, render_mode=render_mode)
            val_ids = [episode_of(e).episode_id for e in val_eps]
            out["val_agreement"] = on_policy_agreement(venv, model, teacher, val_ids, seed=VAL_SEED)
            results = play_episodes(venv, teacher, val_eps, seed=VAL_SEED, progress=False)
        finally:
            venv.close()
        out["teacher_val"] = summarise(results, {episode_of(e).episode_id: episode_of(e) for e in val_eps},
                                       answers=False)
    log.info("DAgger: %d rounds, best %s (val reward %s), stopped by %s", len(out["rounds"]), out["best_round"],
             fmt(out["best_val_reward"]), out["stopped"])
    return out


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
    from policies.ppo import build_model, save_checkpoint

    check_config(cfg)
    logger = logger or NullLogger()
    tc, ds, env_cfg = cfg["train"], cfg["dataset"], cfg["env"]
    recipe = recipe_of(tc)
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
    n_questions = sum(len(getattr(episode_of(e), "turns", None) or (1,)) for e in train_eps)
    log.info("train (%s): %d episodes on %d documents; eval: %d episodes (%s)", recipe, len(train_eps), n_docs,
             len(val_eps), tc["eval_split"])

    info_keys = ("evidence_page_recall", "element_recall", "tokens_rendered")
    runs_ppo = recipe != "dagger"
    shaping = bool(tc.get("shaping", False)) and runs_ppo

    # Potential-based shaping (phi = gold coverage of the state) densifies the training signal without changing
    # the optimal policy. It reads gold, so only the training envs are privileged (the policy still sees only the
    # observation); evaluation envs keep the plain terminal reward and sealed gold.
    train_cfg = {**cfg, "env": {**env_cfg, **shaping_kwargs(env_cfg, shaping)}}

    make_one = training_env_factory(train_eps, train_cfg, render_mode, min(64, n_docs), n_questions, info_keys)

    # DAgger alone needs no PPO envs: one in-process env gives the model its spaces and is never stepped by SB3.
    n_envs = n_envs_of(tc) if runs_ppo else 1
    vec_kind = str(tc.get("vec_env", "subproc")) if n_envs > 1 else "dummy"
    vec = make_vec_env(make_one, n_envs, vec_kind, tc.get("start_method"))
    model = build_model(vec, algo=algo, seed=seed, net=ptrain.get("net"), hparams=ptrain.get("hparams"),
                        device=tc.get("device", "cpu"))
    curve: list[dict[str, Any]] = []
    eval_fn = (lambda m: evaluate(m, algo, val_eps, cfg, render_mode, seed=VAL_SEED)) if val_eps else None
    K = int(vec.observation_space["nodes"].shape[0])
    name = tc.get("checkpoint_name", "checkpoint")
    meta = {"render_mode": render_mode, "seed": seed, "dataset": ds["name"], "recipe": recipe, "shaping": shaping,
            "config": cfg}
    best = {"reward": -float("inf"), "timesteps": None}

    def keep_best(m: Any, row: dict[str, Any]) -> None:
        """Model selection on the validation split: the checkpoint with the best validation reward."""
        r = row.get("val_reward")
        if r is not None and r > best["reward"]:
            best.update(reward=r, timesteps=row["timesteps"])
            save_checkpoint(m, out / f"{name}_best.zip", algo, K, extra={**meta, "timesteps": row["timesteps"]})

    init = init_weights(model, tc["init"], K, render_mode) if tc.get("init") else None
    if init is not None:
        log.info("initialised from %s", init["path"])
    bc = None
    if recipe == "ppo":
        bc = warm_start(model, dict(tc.get("bc") or {}), train_eps, cfg, render_mode, seed)
    if bc is not None or init is not None:
        row = {"timesteps": 0, "steps_per_s": None, "wall_s": 0.0, "train_reward": None, "stage": "start",
               **({"bc": bc} if bc is not None else {})}
        if eval_fn is not None:
            _, m = eval_fn(model)
            row.update({f"val_{k}": m[k] for k in VAL_KEYS})
            keep_best(model, row)
        curve.append(row)
        log.info("start: %s", {k: fmt(v) for k, v in row.items() if k != "bc"})

    imitation = None
    offset = 0  # environment steps spent before PPO (DAgger's rollouts): the learning curve's x axis counts them
    if recipe != "ppo":
        def dagger_row(m: Any, r: dict[str, Any]) -> None:
            row = {"timesteps": r["env_steps"], "steps_per_s": None, "wall_s": None, "train_reward": None,
                   "stage": "dagger", **{k: v for k, v in r.items() if k.startswith("val_")},
                   "dagger": {k: v for k, v in r.items() if not k.startswith("val_")}}
            curve.append(row)
            keep_best(m, row)
            logger.log({k: v for k, v in row.items() if k.startswith("val_")}, step=row["timesteps"])
            shown = {**row["dagger"], **row}
            log.info("DAgger round %d: %s", r["round"], {k: fmt(shown.get(k)) for k in (
                "beta", "aggregate", "rollout_agreement", "val_reward", "val_evidence_page_recall")})

        validate = None
        if eval_fn is not None:
            def validate(m: Any) -> dict[str, Any]:
                return {f"val_{k}": v for k, v in eval_fn(m)[1].items() if k in VAL_KEYS}

        imitation = imitate(model, train_eps, val_eps, cfg, render_mode, seed, validate, dagger_row)
        offset = int(imitation["env_steps"])
        save_checkpoint(model, out / f"{name}_dagger.zip", algo, K,
                        extra={**meta, "recipe": "dagger", "shaping": False, "timesteps": offset})

    t0 = time.perf_counter()
    if runs_ppo:
        total = int(tc["total_timesteps"])
        fast_learn(model, total, make_callback(total, int(tc["eval_freq"]), eval_fn, logger, curve,
                                               on_eval=keep_best, offset=offset),
                   update_threads=tc.get("update_threads"))
    train_s = time.perf_counter() - t0
    timesteps = offset + (int(model.num_timesteps) if runs_ppo else 0)
    last = save_checkpoint(model, out / f"{name}_last.zip", algo, K, extra={**meta, "timesteps": timesteps})
    vec.close()
    # The checkpoint benchmarks use: best on validation when validation ran, else the last one.
    chosen = out / f"{name}_best.zip" if best["timesteps"] is not None else last
    ckpt = out / f"{name}.zip"
    for suffix in (".zip", ".json"):
        ckpt.with_suffix(suffix).write_bytes(chosen.with_suffix(suffix).read_bytes())

    training = {"recipe": recipe, "shaping": shaping, "reported_reward": "unshaped (plain terminal reward)",
                "n_envs": n_envs if runs_ppo else 0, "vec_env": vec_kind if runs_ppo else None,
                "n_steps": int(model.n_steps) if runs_ppo else None,  # per env: n_envs x n_steps samples per update
                "init": init["path"] if init else None, "selected_timesteps": best["timesteps"]}
    runs = []
    final = None
    if val_eps:
        from policies.ppo import PPOPolicy

        chosen_model = PPOPolicy(checkpoint=str(ckpt)).model
        results, final = evaluate(chosen_model, algo, val_eps, cfg, render_mode, seed=VAL_SEED)
        if imitation is not None:
            # the student of the imitation report is DAgger's (after dagger_ppo's PPO stage the chosen
            # checkpoint may be a PPO one: its agreement was never measured, its gap would mislabel PPO's)
            student = final if recipe == "dagger" else evaluate(
                PPOPolicy(checkpoint=str(out / f"{name}_dagger.zip")).model, algo, val_eps, cfg, render_mode,
                seed=VAL_SEED)[1]
            training["imitation"] = imitation_report(imitation, student)
        runs.append(make_run(LEARNER, env_cfg.get("budget") or {}, ds["name"], tc["eval_split"], final,
                             checkpoint=checkpoint_identity(ckpt), training=training))
        if imitation is not None and imitation.get("teacher_val"):
            runs.append(make_run(TEACHER, env_cfg.get("budget") or {}, ds["name"], tc["eval_split"],
                                 imitation["teacher_val"], privileged=True))
    write_results(out / "results.json", runs)
    write_json(out / "learning_curve.json", curve)
    plot = save_curve(curve, out / "learning_curve.png")
    summary = {"checkpoint": str(ckpt), "checkpoint_sha256": checkpoint_identity(ckpt)["sha256"],
               "selection": "best_validation_reward" if best["timesteps"] is not None else "last (no validation)",
               "selected_timesteps": best["timesteps"], "best_val_reward": (
                   best["reward"] if best["timesteps"] is not None else None), "algo": algo, "recipe": recipe,
               "shaping": shaping, "seed": seed, "render_mode": render_mode, "timesteps": timesteps,
               "train_seconds": train_s,
               "steps_per_s": (model.num_timesteps / max(1e-9, train_s)) if runs_ppo else None,
               "n_envs": training["n_envs"], "vec_env": training["vec_env"], "train_episodes": len(train_eps),
               "train_documents": n_docs, "eval_episodes": len(val_eps), "final_eval": final,
               "imitation": imitation, "training": training, "learning_curve": curve}
    write_json(out / "train_summary.json", summary)
    logger.summary({"steps_per_s": summary["steps_per_s"], **{f"final/{k}": v for k, v in (final or {}).items()}})
    if plot is not None:
        logger.images({"learning_curve": plot})
    return summary


def imitation_report(imitation: Mapping[str, Any], student_val: Mapping[str, Any]) -> dict[str, Any]:
    """What results.json says about the imitation: on the validation episodes, the student's on-policy action
    agreement with the teacher (against chance), and the teacher-minus-student gap in recall, support and tokens
    (the student on the ordinary validation env, the teacher on a privileged one; same episodes and seeds)."""
    teacher = imitation.get("teacher_val") or {}
    agree = imitation.get("val_agreement") or {}

    def gap(key: str) -> float | None:
        t, s = teacher.get(key), student_val.get(key)
        return None if t is None or s is None else float(t) - float(s)

    return {"teacher": TEACHER, "rounds": len(imitation["rounds"]), "best_round": imitation["best_round"],
            "stopped": imitation["stopped"], "env_steps": imitation["env_steps"],
            "val_agreement": agree.get("agreement"), "val_agreement_chance": agree.get("chance"),
            "val_agreement_steps": agree.get("steps"),
            "teacher_val_page_recall": teacher.get("evidence_page_recall"),
            "student_val_page_recall": student_val.get("evidence_page_recall"),
            "page_recall_gap": gap("evidence_page_recall"), "element_recall_gap": gap("element_recall"),
            "support_gap": gap("support"), "tokens_gap": gap("tokens_rendered")}
