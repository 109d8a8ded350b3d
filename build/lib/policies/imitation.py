"""Behaviour cloning warm start: teach the slot network a teacher policy's moves before PPO.

Why: under the oracle reader the gains over simply stopping are a few
well-chosen activations per episode; from scratch, PPO mostly learns to stop
(measured: see README). Cloning a rule teacher (``heuristic``) first gives PPO
a sensible starting policy over the same observation, which it then refines
with its own reward. The teacher acts through the same loop and public API as
any policy; only its (observation, mask, action) triples are kept.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from policies.base import EnvInfo, Policy


def collect_demos(env: Any, teacher: Policy, episode_ids: Sequence[str], seed: int = 0,
                  progress: bool = True) -> dict[str, np.ndarray]:
    """Run ``teacher`` (a step-level policy) on ``episode_ids``; stack its observations, masks and actions."""
    from mage_gym.progress import progress_bar

    if teacher.level != "step":
        raise ValueError("behaviour cloning needs a step-level teacher (flat actions)")
    action_masks = env.get_wrapper_attr("action_masks")
    obs_rows: dict[str, list[np.ndarray]] = {}
    masks, actions = [], []
    for i, eid in enumerate(progress_bar(episode_ids, desc="demos", unit="ep", disable=not progress)):
        obs, _ = env.reset(seed=seed + i, options={"episode_id": eid})
        teacher.reset(EnvInfo.from_env(env, seed=seed + i))
        done = False
        while not done:
            mask = action_masks()
            a = int(teacher.act(obs, None, mask))
            for k, v in obs.items():
                obs_rows.setdefault(k, []).append(np.asarray(v))
            masks.append(mask)
            actions.append(a)
            obs, _, term, trunc, _ = env.step(a)
            done = bool(term or trunc)
    out = {f"obs/{k}": np.stack(v) for k, v in obs_rows.items()}
    out["masks"] = np.stack(masks)
    out["actions"] = np.asarray(actions, dtype=np.int64)
    return out


def behaviour_clone(model: Any, demos: dict[str, np.ndarray], updates: int = 1000, batch_size: int = 256,
                    lr: float = 1e-3, seed: int = 0, log_every: int = 100, weight_decay: float = 0.0,
                    question_dropout: float = 0.0, act_weight: float = 1.0) -> list[float]:
    """Maximise the masked log-likelihood of the demo actions under ``model.policy`` for ``updates``
    minibatch steps (a few hundred demo steps need many passes); returns the mean loss per ``log_every``.

    With ``demos["label_sets"]`` (bool [n, n_actions]: every action the teacher accepts equally) the
    likelihood is that of the set, ``log sum_{a in set} p(a)``: the student is not taught a tie-break.

    Regularisers against memorising a few hundred questions (the student fits its training states
    almost perfectly while agreeing with the teacher on far fewer validation states): ``weight_decay``
    (AdamW) and ``question_dropout``, the share of samples whose question embedding is zeroed in a
    minibatch, so the decision must also stand on the per-slot signals (relevance, links, cues).

    ``act_weight``: the loss weight of states where the teacher does not stop (its label set excludes
    Stop, action 0) relative to states where it stops. Most labelled states are stops, so an unweighted
    fit learns to stop early; a weight above 1 counts the rarer "acting is right" states more."""
    import torch as th

    policy = model.policy
    n = len(demos["actions"])
    if n == 0:
        return []
    keys = [k[len("obs/"):] for k in demos if k.startswith("obs/")]
    opt = th.optim.AdamW(policy.parameters(), lr=lr, weight_decay=float(weight_decay))
    rng = np.random.default_rng(seed)
    losses, window = [], []
    policy.set_training_mode(True)
    for step in range(int(updates)):
        idx = rng.choice(n, size=min(batch_size, n), replace=False)
        obs = {k: th.as_tensor(demos[f"obs/{k}"][idx], device=policy.device) for k in keys}
        if question_dropout > 0 and "question" in obs:
            keep = th.as_tensor(rng.random(len(idx)) >= question_dropout, device=policy.device)
            obs["question"] = obs["question"] * keep.unsqueeze(-1).to(obs["question"].dtype)
        dist = _distribution(policy, obs, demos["masks"][idx])
        if "label_sets" in demos:
            nll = -set_log_prob(dist, th.as_tensor(demos["label_sets"][idx], device=policy.device))
            acting = ~demos["label_sets"][idx][:, 0]
        else:
            acts = th.as_tensor(demos["actions"][idx], device=policy.device)
            nll = -dist.log_prob(acts)
            acting = demos["actions"][idx] != 0
        if act_weight != 1.0:
            w = th.as_tensor(np.where(acting, float(act_weight), 1.0), dtype=nll.dtype, device=policy.device)
            loss = (nll * w).sum() / w.sum()
        else:
            loss = nll.mean()
        opt.zero_grad()
        loss.backward()
        th.nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
        opt.step()
        window.append(float(loss.detach()))
        if len(window) == log_every or step == updates - 1:
            losses.append(float(np.mean(window)))
            window = []
    policy.set_training_mode(False)
    return losses


def _distribution(policy: Any, obs: Any, masks: np.ndarray) -> Any:
    try:
        return policy.get_distribution(obs, action_masks=masks)  # sb3-contrib maskable policies
    except TypeError:
        return policy.get_distribution(obs)


def set_log_prob(dist: Any, label_sets: Any) -> Any:
    """``log sum_{a in set} p(a)`` per row of a (masked) categorical distribution (SB3 wrapper)."""
    import torch as th

    logp = th.log_softmax(dist.distribution.logits, dim=-1)
    return th.logsumexp(logp.masked_fill(~label_sets.bool(), -float("inf")), dim=-1)


def agreement(model: Any, demos: dict[str, np.ndarray], limit: int = 4096) -> float:
    """Share of demo steps where the model's deterministic masked action equals the teacher's (is in the
    teacher's label set, when the demos have one)."""
    import torch as th

    policy = model.policy
    n = min(limit, len(demos["actions"]))
    if n == 0:
        return float("nan")
    keys = [k[len("obs/"):] for k in demos if k.startswith("obs/")]
    obs = {k: th.as_tensor(demos[f"obs/{k}"][:n], device=policy.device) for k in keys}
    with th.no_grad():
        dist = _distribution(policy, obs, demos["masks"][:n])
        pred = dist.get_actions(deterministic=True).cpu().numpy()
    if "label_sets" in demos:
        return float(np.mean(demos["label_sets"][:n][np.arange(n), pred]))
    return float(np.mean(pred == demos["actions"][:n]))
