"""DAgger: imitation of the privileged oracle on the states the student itself reaches.

Why DAgger and not behaviour cloning alone: a student cloned on the
teacher's trajectories drifts, after its first mistake, into states the
teacher never visited, where it has no label (Ross, Gordon and Bagnell,
2011). Here every round rolls out the current student - taking the
teacher's action instead with a probability ``beta`` that decays from round
to round - and the teacher labels each visited state with what *it* would
do; the labelled states are added to the aggregate, and the student's
per-slot action head (with the slot-set extractor under it) is refitted by
cross-entropy over the valid actions (:func:`policies.imitation.behaviour_clone`).

Labels are action *sets* when the teacher can say which actions it accepts
equally (``teacher.choices``, the oracle's ties: two gold pages in the slots
are equally good, and which one the greedy rule names first is not in the
observation); the loss is then ``-log`` of the probability mass on the set,
and agreement means the student's action is in it.

Every round plays every training episode by default (``episodes_per_round``
null): with about 1.5 teacher steps per episode, a few dozen episodes per
round gave a few hundred labelled states, far too few to generalise.

Who sees what: the rollouts run on a **privileged** env that the training
code holds, because the teacher (:class:`~policies.oracle.OraclePolicy`
bound to that env) reads gold through its privileged view. The student is
fed only what an ordinary env gives any policy: the numeric observation
arrays and the action mask (:func:`student_action`). The aggregate keeps
exactly those arrays plus the teacher's action; no gold field is stored.
Model selection is the caller's: ``validate(model)`` should play the student
on an ordinary (non-privileged) validation env and return ``val_reward``.
"""
from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from policies.base import EnvInfo, Policy


@dataclass(frozen=True)
class DaggerConfig:
    """Rounds and fitting of :func:`run_dagger` (``train.dagger.*`` in conf/training/default.yaml)."""

    rounds: int = 5                 # at most this many collect-aggregate-fit rounds
    episodes_per_round: int | None = None  # training episodes the (mixed) student plays per round (None: all)
    beta0: float = 1.0              # teacher-mixing probability in round 0 (1.0: round 0 is pure cloning)
    beta_decay: float = 0.5         # beta of round r = beta0 * beta_decay ** r
    updates: int = 200              # minibatch gradient steps on the aggregate per round
    batch_size: int = 256
    lr: float = 1e-3
    weight_decay: float = 0.01      # AdamW weight decay of the fit
    question_dropout: float = 0.5   # share of fitted samples whose question embedding is zeroed
    act_weight: float = 1.0         # loss weight of states the teacher acts in (label set without Stop) vs stops
    patience: int = 3               # stop after this many rounds without a better validation reward
    max_aggregate: int = 200_000    # labelled states kept (the oldest are dropped beyond this)

    @classmethod
    def coerce(cls, cfg: "DaggerConfig | Mapping[str, Any] | None") -> "DaggerConfig":
        if isinstance(cfg, cls):
            return cfg
        cfg = dict(cfg or {})
        names = {f.name for f in fields(cls)}
        unknown = set(cfg) - names
        if unknown:
            raise ValueError(f"unknown DAgger options {sorted(unknown)}; expected some of {sorted(names)}")
        return cls(**cfg)

    def beta(self, round_index: int) -> float:
        return float(self.beta0) * float(self.beta_decay) ** int(round_index)


def student_action(model: Any, obs: Mapping[str, np.ndarray], mask: np.ndarray, deterministic: bool = True) -> int:
    """The student's action from the public observation and the mask - its only inputs."""
    action, _ = model.predict(dict(obs), action_masks=np.asarray(mask, dtype=bool), deterministic=deterministic)
    return int(np.asarray(action).reshape(-1)[0])


def teacher_labels(teacher: Policy, obs: Mapping[str, np.ndarray], mask: np.ndarray) -> list[int]:
    """The teacher's action first, then every other action it accepts equally (``teacher.choices`` when it has
    one, e.g. the oracle's ties), else just its action."""
    choices = getattr(teacher, "choices", None)
    if choices is None:
        return [int(teacher.act(obs, None, mask))]
    _, actions = choices(obs, mask)
    return [int(a) for a in actions]


def collect_round(env: Any, model: Any, teacher: Policy, episode_ids: Sequence[str], beta: float, seed: int,
                  rng: np.random.Generator, desc: str | None = None) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Play ``episode_ids`` on the privileged ``env``: at each state the teacher labels, the student proposes,
    and the executed action is the teacher's with probability ``beta``, else the student's.

    Returns the labelled states (``obs/<key>``, ``masks``, ``actions`` = the
    teacher's labels, ``label_sets`` = bool [n, n_actions], every action the
    teacher accepts equally) and round statistics: ``agreement`` (student
    proposal in the label set, before this round's fit), ``agreement_exact``
    (equal to the teacher's own action), ``chance`` (a uniform choice among
    valid actions), ``label_set_size`` (mean), ``teacher_share``. With ``desc``, a progress bar over the
    episodes (a round over every training episode takes minutes).
    """
    from mage_gym.progress import progress_bar

    action_masks = env.get_wrapper_attr("action_masks")
    rows: dict[str, list[np.ndarray]] = {}
    masks, labels, sets = [], [], []
    agree = exact = teacher_moves = 0
    set_size = 0
    chance = 0.0
    for i, eid in enumerate(progress_bar(episode_ids, desc=desc, unit="ep", disable=desc is None, leave=False)):
        obs, _ = env.reset(seed=seed + i, options={"episode_id": eid})
        teacher.reset(EnvInfo.from_env(env, seed=seed + i))
        done = False
        while not done:
            mask = np.asarray(action_masks(), dtype=bool)
            accepted = teacher_labels(teacher, obs, mask)
            label = accepted[0]
            proposal = student_action(model, obs, mask)
            for k, v in obs.items():
                rows.setdefault(k, []).append(np.asarray(v))
            masks.append(mask)
            labels.append(label)
            row = np.zeros(len(mask), dtype=bool)
            row[accepted] = True
            sets.append(row)
            set_size += len(accepted)
            agree += bool(row[proposal])
            exact += proposal == label
            chance += len(accepted) / max(1, int(mask.sum()))
            take_teacher = bool(rng.random() < beta)
            teacher_moves += take_teacher
            obs, _, term, trunc, _ = env.step(label if take_teacher else proposal)
            done = bool(term or trunc)
    n = len(labels)
    demos = {f"obs/{k}": np.stack(v) for k, v in rows.items()}
    demos["masks"] = np.stack(masks) if masks else np.zeros((0, 0), dtype=bool)
    demos["actions"] = np.asarray(labels, dtype=np.int64)
    demos["label_sets"] = np.stack(sets) if sets else np.zeros((0, 0), dtype=bool)
    stats = {"steps": n, "agreement": agree / max(1, n), "agreement_exact": exact / max(1, n),
             "chance": chance / max(1, n), "label_set_size": set_size / max(1, n),
             "teacher_share": teacher_moves / max(1, n), "episodes": len(episode_ids)}
    return demos, stats


def aggregate(data: dict[str, np.ndarray] | None, new: dict[str, np.ndarray], cap: int) -> dict[str, np.ndarray]:
    """``data`` + ``new`` (same keys), keeping the newest ``cap`` labelled states."""
    if data is None or len(data["actions"]) == 0:
        out = dict(new)
    elif len(new["actions"]) == 0:
        out = dict(data)
    else:
        out = {k: np.concatenate([data[k], new[k]]) for k in data}
    n = len(out["actions"])
    return {k: v[n - cap:] for k, v in out.items()} if n > cap else out


def on_policy_agreement(env: Any, model: Any, teacher: Policy, episode_ids: Sequence[str],
                        seed: int) -> dict[str, float]:
    """The student alone (``beta`` = 0) on ``episode_ids`` of a privileged env: how often its action equals
    the teacher's label at the states it reaches, against chance. Nothing is kept for training."""
    _, stats = collect_round(env, model, teacher, episode_ids, beta=0.0, seed=seed, rng=np.random.default_rng(0))
    return {"agreement": stats["agreement"], "agreement_exact": stats["agreement_exact"], "chance": stats["chance"],
            "label_set_size": stats["label_set_size"], "steps": stats["steps"]}


def run_dagger(model: Any, env: Any, teacher: Policy, episode_ids: Sequence[str],
               cfg: DaggerConfig | Mapping[str, Any] | None = None, seed: int = 0,
               validate: Callable[[Any], Mapping[str, Any]] | None = None,
               on_round: Callable[[Any, dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """DAgger rounds on ``model.policy`` (a maskable SB3 policy) with ``teacher`` bound to the privileged ``env``.

    ``validate(model)`` (optional) returns a mapping with ``val_reward``; with
    it, training stops after ``patience`` rounds without improvement and the
    model ends with the weights of its best round. ``on_round(model, row)``
    sees each round's row (e.g. to save a checkpoint). Returns the config,
    one row per round, the best round and why training stopped.
    """
    from policies.imitation import agreement, behaviour_clone

    cfg = DaggerConfig.coerce(cfg)
    ids = list(episode_ids)
    if not ids:
        raise ValueError("DAgger needs training episodes")
    rng = np.random.default_rng(seed)
    data: dict[str, np.ndarray] | None = None
    history: list[dict[str, Any]] = []
    best_reward, best_round, best_state, since = -float("inf"), None, None, 0
    env_steps = 0
    stopped = "rounds"
    for r in range(int(cfg.rounds)):
        beta = cfg.beta(r)
        n = len(ids) if cfg.episodes_per_round is None else int(cfg.episodes_per_round)
        pick = list(rng.permutation(ids)[:n]) if n <= len(ids) else list(rng.choice(ids, size=n))
        demos, stats = collect_round(env, model, teacher, pick, beta, seed=seed + 1_000_003 * (r + 1), rng=rng,
                                     desc=f"DAgger round {r + 1}/{int(cfg.rounds)}")
        env_steps += int(stats["steps"])
        data = aggregate(data, demos, int(cfg.max_aggregate))
        losses = behaviour_clone(model, data, updates=int(cfg.updates), batch_size=int(cfg.batch_size),
                                 lr=float(cfg.lr), seed=seed + r, log_every=max(1, int(cfg.updates)),
                                 weight_decay=float(cfg.weight_decay), question_dropout=float(cfg.question_dropout),
                                 act_weight=float(cfg.act_weight))
        row: dict[str, Any] = {"round": r, "beta": beta, "env_steps": env_steps, "aggregate": len(data["actions"]),
                               "loss": losses[-1] if losses else None, "fit_agreement": agreement(model, data),
                               **{f"rollout_{k}": v for k, v in stats.items()}}
        if validate is not None:
            row.update(validate(model))
        history.append(row)
        if on_round is not None:
            on_round(model, row)
        score = row.get("val_reward")
        if score is None:
            continue
        if score > best_reward:
            best_reward, best_round, since = float(score), r, 0
            best_state = copy.deepcopy(model.policy.state_dict())
        else:
            since += 1
            if since >= int(cfg.patience):
                stopped = "patience"
                break
    if best_state is not None:
        model.policy.load_state_dict(best_state)
    return {"config": asdict(cfg), "rounds": history, "best_round": best_round,
            "best_val_reward": best_reward if best_round is not None else None, "stopped": stopped,
            "env_steps": env_steps}
