"""Networks for a set of node slots: a features extractor and a per-slot action head.

Why not SB3's default ``CombinedExtractor`` + linear head: the observation is
a *set* of up to K candidate nodes and the actions address those slots, so
the same node must get the same logits whichever slot it sits in. Here

- :class:`SlotSetExtractor` embeds every slot with one shared MLP (node
  features + a learned projection of the question embedding), pools the set
  (masked mean, masked max and question-conditioned attention), mixes the pool
  with the budget/progress vector into a global context, and re-embeds every
  slot with that context;
- :class:`SlotActionHead` scores the slot operations of each slot with one
  shared linear layer and Stop from the global context, placed in the
  environment's flat action space by :class:`~mage_gym.env.ActionLayout`.

The extractor's output is ``[K * slot_dim + global_dim]`` so SB3's value
network (an MLP) can read it unchanged; the policy classes below swap only the
action head (:class:`MaskableSlotPolicy`, :class:`SlotPolicy`). Imported
lazily (torch) by :mod:`policies.ppo`.
"""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch as th
from torch import nn
from torch.nn import functional as F

from sb3_contrib.common.maskable.policies import MaskableMultiInputActorCriticPolicy
from stable_baselines3.common.policies import MultiInputActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

from mage_gym.env.actions import ActionLayout


def _mlp(sizes: list[int], last_act: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if last_act or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _split_linear(layer: nn.Linear, per_slot: th.Tensor, per_sample: th.Tensor) -> th.Tensor:
    """``layer(cat([per_slot, per_sample broadcast over slots], -1))`` without building the concatenation.

    Why: the per-sample part (question, global context) is the same for all
    K slots, so its product with its block of the weight is computed once
    per sample instead of K times, and no [B, K, ...] copy of it is made;
    the result is the same up to float rounding (a sum of the two blocks).
    """
    d = per_slot.shape[-1]
    w = layer.weight
    return F.linear(per_slot, w[:, :d]) + F.linear(per_sample, w[:, d:], layer.bias).unsqueeze(-2)


class SlotSetExtractor(BaseFeaturesExtractor):
    """Dict observation (nodes, slot_mask, budget, progress, question) -> per-slot + global features.

    ``pooling``: any of ``mean``, ``max``, ``attention`` (joined with ``+``).
    ``use_question``: False makes the network blind to the question embedding (its projection is replaced by
    zeros, in training and acting alike): the per-slot relevance columns already carry the question, and an
    imitation student fitted on a few hundred questions memorised them through the 384-d embedding
    (near-perfect agreement on training states, far lower on validation).
    """

    def __init__(self, observation_space: gym.spaces.Dict, hidden: int = 64, slot_dim: int = 16,
                 global_dim: int = 64, question_dim: int = 32, pooling: str = "mean+max+attention",
                 use_question: bool = True) -> None:
        K, F = observation_space["nodes"].shape
        q_in = observation_space["question"].shape[0]
        ctx_in = observation_space["budget"].shape[0] + observation_space["progress"].shape[0]
        pools = [p for p in pooling.split("+") if p]
        if not pools or any(p not in ("mean", "max", "attention") for p in pools):
            raise ValueError(f"pooling must combine mean, max, attention with '+', got {pooling!r}")
        super().__init__(observation_space, features_dim=K * slot_dim + global_dim)
        self.K, self.slot_dim, self.global_dim, self.pools = K, slot_dim, global_dim, pools
        self.use_question = bool(use_question)
        self.q_proj = nn.Sequential(nn.Linear(q_in, question_dim), nn.Tanh())
        self.slot_enc = _mlp([F + question_dim, hidden, hidden])
        if "attention" in pools:
            self.att_query = nn.Linear(question_dim + ctx_in, hidden)
        self.global_enc = _mlp([len(pools) * hidden + question_dim + ctx_in, global_dim])
        self.slot_out = _mlp([hidden + global_dim, hidden, slot_dim])
        # The layers after the first of each per-slot MLP (a tuple: not registered twice, so checkpoints keep
        # their keys). The first layers read [per-slot part, per-sample part] and are applied split (see forward).
        self._enc_rest = tuple(self.slot_enc)[1:]
        self._out_rest = tuple(self.slot_out)[1:]

    def forward(self, obs: dict[str, th.Tensor]) -> th.Tensor:
        nodes, mask = obs["nodes"].float(), obs["slot_mask"].float()
        B, K, _ = nodes.shape
        q = self.q_proj(obs["question"].float())
        if not self.use_question:
            q = th.zeros_like(q)
        ctx = th.cat([obs["budget"].float(), obs["progress"].float()], dim=-1)
        h = _split_linear(self.slot_enc[0], nodes, q)  # = slot_enc[0](cat([nodes, q per slot]))
        for layer in self._enc_rest:
            h = layer(h)
        m = mask.unsqueeze(-1)
        count = m.sum(dim=1).clamp(min=1.0)
        pooled = []
        for p in self.pools:
            if p == "mean":
                pooled.append((h * m).sum(dim=1) / count)
            elif p == "max":
                top = th.where(m > 0, h, th.full_like(h, -1e4)).max(dim=1).values
                pooled.append(top * (mask.sum(dim=1, keepdim=True) > 0).float())
            else:
                query = self.att_query(th.cat([q, ctx], dim=-1))
                scores = (h * query.unsqueeze(1)).sum(-1) / h.shape[-1] ** 0.5
                scores = scores.masked_fill(mask < 0.5, -1e4)
                w = th.softmax(scores, dim=1) * mask
                w = w / w.sum(dim=1, keepdim=True).clamp(min=1e-6)
                pooled.append((w.unsqueeze(-1) * h).sum(dim=1))
        g = self.global_enc(th.cat(pooled + [q, ctx], dim=-1))
        s = _split_linear(self.slot_out[0], h, g)  # = slot_out[0](cat([h, g per slot]))
        for layer in self._out_rest:
            s = layer(s)
        s = s * m
        return th.cat([s.reshape(B, K * self.slot_dim), g], dim=-1)


class SlotActionHead(nn.Module):
    """Features ``[K*slot_dim + global_dim]`` -> logits ``[ActionLayout(K).n]`` (the env's flat action order)."""

    def __init__(self, K: int, slot_dim: int, global_dim: int) -> None:
        super().__init__()
        layout = ActionLayout(K)
        self.K, self.slot_dim, self.n_actions, self.stop_index = K, slot_dim, layout.n, layout.STOP
        # flat action id of (slot k, operation j), in the order the per-slot logits come out
        self.register_buffer("slot_ids", th.as_tensor(layout.slot_action_ids().T.reshape(-1)), persistent=False)
        self.slot_logits = nn.Linear(slot_dim + global_dim, layout.n_slot_ops)
        self.stop_logit = nn.Linear(global_dim, 1)
        for layer in (self.slot_logits, self.stop_logit):
            nn.init.orthogonal_(layer.weight, gain=0.01)
            nn.init.zeros_(layer.bias)

    def forward(self, features: th.Tensor) -> th.Tensor:
        B = features.shape[0]
        s = features[:, : self.K * self.slot_dim].reshape(B, self.K, self.slot_dim)
        g = features[:, self.K * self.slot_dim:]
        per_slot = _split_linear(self.slot_logits, s, g)  # = slot_logits(cat([s, g per slot]))
        logits = features.new_empty(B, self.n_actions)
        logits[:, self.stop_index] = self.stop_logit(g).squeeze(-1)
        logits[:, self.slot_ids] = per_slot.reshape(B, -1)
        return logits


def _swap_head(policy: Any, lr_schedule: Any) -> None:
    """Replace the linear action net by :class:`SlotActionHead` and rebuild the optimizer."""
    fe = policy.features_extractor
    if not isinstance(fe, SlotSetExtractor):
        return
    if policy.mlp_extractor.latent_dim_pi != fe.features_dim:
        raise ValueError("the slot action head needs net_arch with an empty pi part (pi=[])")
    policy.action_net = SlotActionHead(fe.K, fe.slot_dim, fe.global_dim)
    policy.optimizer = policy.optimizer_class(policy.parameters(), lr=lr_schedule(1), **policy.optimizer_kwargs)


class MaskableSlotPolicy(MaskableMultiInputActorCriticPolicy):
    """sb3-contrib MaskablePPO policy with :class:`SlotActionHead` (use with :class:`SlotSetExtractor`)."""

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        _swap_head(self, lr_schedule)

    def forward(self, obs: dict[str, th.Tensor], deterministic: bool = False,
                action_masks: Any = None) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """Action, value and log-probability per row, as sb3-contrib computes them, without its distribution objects.

        Why: this runs once per rollout step on a batch of ``n_envs`` rows,
        where sb3-contrib's ``MaskableCategorical`` builds three torch
        ``Categorical`` objects per call (construction, unmasking, masking)
        and they cost more than the network. The arithmetic is the same
        operations in the same order: normalise the logits, set masked ones
        to -1e8, normalise again, softmax, one ``multinomial`` draw (or the
        argmax), and the log-probability gathered from the normalised
        logits; so actions, values and log-probabilities are bit-identical
        and the random stream is consumed alike (tests/test_slot_forward.py).
        Training's ``evaluate_actions`` (entropy included) is sb3-contrib's own.

        Called with gradients off (SB3's rollout runs it under ``no_grad``), it
        runs in ``torch.inference_mode``: the same kernels without autograd's
        version counters and view tracking, a third less time for a 2-row batch
        on the CPU. The outputs are then inference tensors, which SB3 only
        copies into its numpy rollout buffer.
        """
        with th.inference_mode(not th.is_grad_enabled()):
            return self._lean_forward(obs, deterministic, action_masks)

    def _lean_forward(self, obs: dict[str, th.Tensor], deterministic: bool, action_masks: Any
                      ) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        features = self.extract_features(obs)
        if self.share_features_extractor:
            latent_pi, latent_vf = self.mlp_extractor(features)
        else:
            pi_features, vf_features = features
            latent_pi = self.mlp_extractor.forward_actor(pi_features)
            latent_vf = self.mlp_extractor.forward_critic(vf_features)
        values = self.value_net(latent_vf)
        raw = self.action_net(latent_pi)
        logits = raw - raw.logsumexp(dim=-1, keepdim=True)
        if action_masks is not None:
            masks = th.as_tensor(action_masks, dtype=th.bool, device=logits.device).reshape(logits.shape)
            logits = th.where(masks, logits, th.tensor(-1e8, dtype=logits.dtype, device=logits.device))
        logits = logits - logits.logsumexp(dim=-1, keepdim=True)
        probs = F.softmax(logits, dim=-1)
        if deterministic:
            actions = th.argmax(probs, dim=1)
        else:
            actions = th.multinomial(probs.reshape(-1, probs.shape[-1]), 1, True).T.reshape(probs.shape[:-1])
        log_prob = logits.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        return actions.reshape((-1, *self.action_space.shape)), values, log_prob


class SlotPolicy(MultiInputActorCriticPolicy):
    """SB3 PPO/A2C policy with :class:`SlotActionHead` (no action masking)."""

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        _swap_head(self, lr_schedule)
