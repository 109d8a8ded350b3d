"""DAgger from the privileged oracle: the student learns the teacher's moves from observations alone.

Toy episodes on one 10-page document (milliseconds per episode). The gold
fields of every episode raise when read, except while the env scores a
finished episode and while the teacher reads its privileged view; so any
path that fed gold to the student (its actions, the aggregate it is fitted
on, its validation) would fail these tests.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import mage_gym.env  # noqa: F401 - registers MageRAG-v0
from mage_gym.env import NUMERIC_KEYS, EnvEpisode, PrivilegedAccessError
from mage_gym.testing import hash_query_fn
from gold_guard import GoldRead, GuardedEpisode, gate, open_gate_while_scoring
from mage_gym.testing import make_toy_graph
from policies.dagger import DaggerConfig, aggregate, collect_round, on_policy_agreement, run_dagger
from policies.oracle import OraclePolicy

K, BUDGET = 16, {"k": 1, "m": 2, "M": 6, "T": 3, "B": 3}
QF = hash_query_fn(16)


class GatedOracle(OraclePolicy):
    """The oracle, allowed to read gold (it is the privileged teacher); nobody else is."""

    def reset(self, env_info: Any) -> None:
        with gate():
            super().reset(env_info)

    def act(self, obs: Any, text_view: Any, mask: Any) -> int:
        with gate():
            return super().act(obs, text_view, mask)

    def choices(self, obs: Any, mask: Any) -> Any:
        with gate():
            return super().choices(obs, mask)


@pytest.fixture(autouse=True)
def reward_gate(monkeypatch):
    """Open the gate only while the env scores the finished episode."""
    open_gate_while_scoring(monkeypatch)


def _pairs(seed: int, n: int, prefix: str) -> list[EnvEpisode]:
    """Each question quotes an element; its gold is the element at the same place on the next page, so the
    teacher must fetch a page beyond the single entry page (one well-chosen activation among many valid actions)."""
    g = make_toy_graph(n_pages=10, elements_per_page=4, dim=16, seed=seed)
    out = []
    for i in range(n):
        quoted = g.elements[(7 * i + 3) % len(g.elements)]
        el = g.elements[(7 * i + 3 + 4) % len(g.elements)]
        with gate():
            ep = GuardedEpisode(episode_id=f"{prefix}{i}", benchmark="synth", doc_id=f"toy{seed}", source="<toy>",
                                question=quoted.text, answer="x", answer_format="Str", evidence_pages=(el.page,),
                                gold_node_ids=(el.node_id,), evidence_sources=("Table",))
        out.append(EnvEpisode(ep, g))
    return out


@pytest.fixture(scope="module")
def train_pairs() -> list[EnvEpisode]:
    return _pairs(seed=1, n=10, prefix="tr")


@pytest.fixture(scope="module")
def val_pairs() -> list[EnvEpisode]:
    return _pairs(seed=2, n=6, prefix="va")  # another document: states the student never trained on


def make(pairs, privileged: bool) -> gym.Env:
    return gym.make("MageRAG-v0", episodes=pairs, K=K, budget=BUDGET, retriever="bm25", query_fn=QF,
                    render_mode="visual", privileged=privileged)


def ids(pairs) -> list[str]:
    with gate():
        return [p.episode.episode_id for p in pairs]


@pytest.fixture
def model(train_pairs):
    import torch

    torch.set_num_threads(1)
    from policies.ppo import build_model

    return build_model(make(train_pairs, privileged=False), seed=0)


def test_student_agreement_rises_above_chance_on_unseen_states(model, train_pairs, val_pairs) -> None:
    env, venv = make(train_pairs, privileged=True), make(val_pairs, privileged=True)
    before = on_policy_agreement(venv, model, GatedOracle(venv), ids(val_pairs), seed=500)
    cfg = DaggerConfig(rounds=3, episodes_per_round=10, beta0=1.0, beta_decay=0.5, updates=150, batch_size=64,
                       lr=3e-3, patience=5)
    out = run_dagger(model, env, GatedOracle(env), ids(train_pairs), cfg, seed=0)
    after = on_policy_agreement(venv, model, GatedOracle(venv), ids(val_pairs), seed=500)
    rounds = out["rounds"]
    assert len(rounds) == 3 and out["stopped"] == "rounds" and out["best_round"] is None  # no validate given
    assert [r["beta"] for r in rounds] == [1.0, 0.5, 0.25]
    assert rounds[0]["rollout_teacher_share"] == 1.0 and rounds[-1]["rollout_teacher_share"] < 1.0
    assert rounds[-1]["aggregate"] == sum(r["rollout_steps"] for r in rounds)  # aggregated, not replaced
    assert after["steps"] > 0 and 0.0 < after["chance"] < 0.5
    assert after["agreement"] > max(2 * after["chance"], before["agreement"] + 0.2), (before, after)


def test_the_student_sees_only_observation_arrays(model, train_pairs, monkeypatch) -> None:
    """Every input of the student's network, acting or being fitted, is a public observation key; the labelled
    states keep only observation arrays, masks and actions; the teacher cannot run on an ordinary env."""
    from policies.slot_net import SlotSetExtractor

    seen: list[set[str]] = []
    forward = SlotSetExtractor.forward

    def spy(self, obs):
        seen.append(set(obs))
        return forward(self, obs)

    monkeypatch.setattr(SlotSetExtractor, "forward", spy)
    env = make(train_pairs, privileged=True)
    demos, stats = collect_round(env, model, GatedOracle(env), ids(train_pairs)[:4], beta=0.5, seed=0,
                                 rng=np.random.default_rng(0))
    assert set(demos) == {f"obs/{k}" for k in NUMERIC_KEYS} | {"masks", "actions", "label_sets"}
    assert all(m[a] for m, a in zip(demos["masks"], demos["actions"]))  # labels are valid actions
    # label sets: valid actions only, always holding the teacher's own action
    assert not (demos["label_sets"] & ~demos["masks"]).any()
    assert all(ls[a] for ls, a in zip(demos["label_sets"], demos["actions"]))
    run_dagger(model, env, GatedOracle(env), ids(train_pairs)[:4],
               DaggerConfig(rounds=1, episodes_per_round=2, updates=5, batch_size=16), seed=0)
    assert seen and all(keys == set(NUMERIC_KEYS) for keys in seen)
    with pytest.raises(PrivilegedAccessError):
        venv = make(train_pairs, privileged=False)
        collect_round(venv, model, GatedOracle(venv), ids(train_pairs)[:1], beta=0.0, seed=0,
                      rng=np.random.default_rng(0))


def test_validation_selects_the_best_round_and_stops_on_patience(model, train_pairs) -> None:
    env = make(train_pairs, privileged=True)
    scores = iter([0.3, 0.5, 0.4, 0.45, 0.9])
    weights: dict[int, Any] = {}

    def validate(m):
        return {"val_reward": next(scores)}

    def on_round(m, row):
        weights[row["round"]] = {k: v.clone() for k, v in m.policy.state_dict().items()}

    out = run_dagger(model, env, GatedOracle(env), ids(train_pairs),
                     DaggerConfig(rounds=5, episodes_per_round=2, updates=5, batch_size=16, patience=2), seed=0,
                     validate=validate, on_round=on_round)
    assert out["stopped"] == "patience" and len(out["rounds"]) == 4 and out["best_round"] == 1
    assert out["best_val_reward"] == 0.5
    state = model.policy.state_dict()
    assert all(np.array_equal(state[k].numpy(), weights[1][k].numpy()) for k in state)  # best round restored


def test_aggregate_keeps_the_newest_states() -> None:
    a = {"obs/x": np.arange(3), "masks": np.ones((3, 2), bool), "actions": np.arange(3)}
    b = {"obs/x": np.arange(3, 6), "masks": np.ones((3, 2), bool), "actions": np.arange(3, 6)}
    out = aggregate(aggregate(None, a, cap=4), b, cap=4)
    assert out["actions"].tolist() == [2, 3, 4, 5] and out["obs/x"].tolist() == [2, 3, 4, 5]
    with pytest.raises(ValueError, match="unknown DAgger options"):
        DaggerConfig.coerce({"round": 3})


def test_episodes_are_guarded(train_pairs) -> None:
    with pytest.raises(GoldRead):
        _ = train_pairs[0].episode.gold_node_ids
    assert dataclasses.is_dataclass(train_pairs[0].episode)


def test_oracle_label_sets_hold_its_action_first_and_only_valid_actions(train_pairs) -> None:
    """``choices`` is the tie set of the rule that fires: its first action is what ``act`` does, all are valid
    and distinct, and playing the last of them (not the one ``act`` names) still ends the episode."""
    env = make(train_pairs, privileged=True)
    teacher = GatedOracle(env)
    sizes = []
    for i, eid in enumerate(ids(train_pairs)):
        obs, _ = env.reset(seed=i, options={"episode_id": eid})
        from mage_gym.bench.protocol import EnvInfo

        teacher.reset(EnvInfo.from_env(env, seed=i))
        done = False
        while not done:
            mask = np.asarray(env.get_wrapper_attr("action_masks")(), dtype=bool)
            _, actions = teacher.choices(obs, mask)
            assert actions[0] == teacher.act(obs, None, mask)
            assert all(mask[a] for a in actions) and len(set(actions)) == len(actions)
            sizes.append(len(actions))
            obs, _, term, trunc, _ = env.step(actions[-1])  # any accepted action must keep the episode sane
            done = bool(term or trunc)
    assert min(sizes) == 1 and sizes


def test_set_likelihood_is_the_probability_mass_on_the_set() -> None:
    import torch as th
    from sb3_contrib.common.maskable.distributions import MaskableCategoricalDistribution

    from policies.imitation import set_log_prob

    dist = MaskableCategoricalDistribution(4).proba_distribution(th.tensor([[0.0, 1.0, 2.0, 3.0]] * 2))
    dist.apply_masking(np.array([[True, True, True, False]] * 2))
    sets = th.tensor([[False, True, True, False], [True, False, False, False]])
    p = th.softmax(th.tensor([0.0, 1.0, 2.0]), dim=0)
    got = set_log_prob(dist, sets)
    assert th.allclose(got, th.log(th.stack([p[1] + p[2], p[0]])), atol=1e-6)


def test_a_question_blind_slot_net_ignores_the_question_embedding() -> None:
    """``use_question=False``: two observations that differ only in the question give the same features (the
    relevance columns still carry the question); with the default, they differ."""
    import torch as th
    from gymnasium import spaces

    from policies.slot_net import SlotSetExtractor

    K_, F_ = 5, 7
    space = spaces.Dict({"nodes": spaces.Box(0, 1, (K_, F_)), "slot_mask": spaces.Box(0, 1, (K_,)),
                         "budget": spaces.Box(0, 1, (3,)), "progress": spaces.Box(0, 1, (1,)),
                         "question": spaces.Box(-1, 1, (12,))})
    rng = np.random.default_rng(0)
    base = {k: th.as_tensor(rng.random((1, *v.shape)), dtype=th.float32) for k, v in space.spaces.items()}
    other = {**base, "question": -base["question"]}
    th.manual_seed(0)
    blind = SlotSetExtractor(space, use_question=False)
    th.manual_seed(0)
    seeing = SlotSetExtractor(space)
    with th.no_grad():
        assert th.equal(blind(base), blind(other))
        assert not th.allclose(seeing(base), seeing(other))


def test_act_weight_counts_the_states_where_the_teacher_acts_more(train_pairs) -> None:
    """One observation labelled Stop three times and an activation once: the fitted probability of the
    activation follows the weighted label frequency, about 1/4 unweighted and about 1/2 with ``act_weight=3``."""
    import torch as th

    from policies.imitation import _distribution, behaviour_clone
    from policies.ppo import build_model

    th.set_num_threads(1)
    env = make(train_pairs, privileged=False)
    obs, _ = env.reset(seed=0, options={"episode_id": ids(train_pairs)[0]})
    mask = np.asarray(env.get_wrapper_attr("action_masks")(), dtype=bool)
    act = int(np.flatnonzero(mask[1:])[0]) + 1
    demos = {f"obs/{k}": np.stack([np.asarray(v)] * 4) for k, v in obs.items()}
    demos["masks"] = np.stack([mask] * 4)
    demos["actions"] = np.array([0, 0, 0, act])
    demos["label_sets"] = np.zeros((4, len(mask)), dtype=bool)
    demos["label_sets"][np.arange(4), demos["actions"]] = True
    probs = {}
    for w in (1.0, 3.0):
        m = build_model(env, seed=0)
        behaviour_clone(m, demos, updates=300, batch_size=4, lr=3e-3, act_weight=w)
        o = {k: th.as_tensor(demos[f"obs/{k}"][:1]) for k in obs}
        with th.no_grad():
            probs[w] = float(_distribution(m.policy, o, demos["masks"][:1]).distribution.probs[0, act])
    env.close()
    assert abs(probs[1.0] - 0.25) < 0.1 and abs(probs[3.0] - 0.5) < 0.1, probs
