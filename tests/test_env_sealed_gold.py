"""Gold is sealed: policies and the training path run on episodes whose gold fields raise when read.

The gold fields of these episodes raise unless the env is computing the
episode's reward and metrics (:func:`mage_gym.env.outcome.score_episode`,
wrapped here to open a gate), so any other read - by the env while it builds
observations, masks, text views or info, by a wrapper, or by a policy - fails
the test. A second test walks every public attribute reachable from the env
and its wrappers and finds no gold object.
"""
from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest

import mage_gym
from mage_gym.data.episode import Episode
from mage_gym.data.gold import GoldEvidence
from mage_gym.env import EnvEpisode, PrivilegedAccessError, PrivilegedView
from mage_gym.testing import hash_query_fn
from mage_gym.env.episodes import Gold
from gold_guard import GoldRead, GuardedEpisode, gate, open_gate_while_scoring, public_reach
from mage_gym.testing import make_toy_graph
from policies import get_policy
from policies.llm_evaluator import CallableBackend
from mage_gym.bench.play import run_episode

K, BUDGET = 16, {"k": 2, "m": 2, "M": 6, "T": 3, "B": 3}
QF = hash_query_fn(16)


def guarded(ep: Episode) -> GuardedEpisode:
    with gate():
        return GuardedEpisode(**{f.name: getattr(ep, f.name) for f in dataclasses.fields(Episode)})


@pytest.fixture
def reward_gate(monkeypatch):
    """Open the gate only while the env scores the finished episode."""
    open_gate_while_scoring(monkeypatch)


@pytest.fixture(scope="module")
def pairs() -> list[EnvEpisode]:
    g = make_toy_graph(n_pages=8, elements_per_page=4, dim=16, seed=5)
    out = []
    for i in range(6):
        el = g.elements[i * 4 + 1 + (i % 2)]
        ep = Episode(episode_id=f"q{i}", benchmark="synth", doc_id="toy", source="<toy>", question=el.text,
                     answer=f"secret-{i}", answer_format="Str", evidence_pages=(el.page,),
                     gold_node_ids=(el.node_id,), evidence_sources=("Table",), answerable=i != 5)
        out.append(EnvEpisode(guarded(ep), g))
    return out


def make(pairs, render_mode: str = "text", **kw) -> gym.Env:
    return gym.make("MageRAG-v0", episodes=pairs, K=K, budget=BUDGET, retriever="bm25", query_fn=QF,
                    render_mode=render_mode, **kw)


def test_the_guard_works(pairs):
    with pytest.raises(GoldRead):
        _ = pairs[0].episode.answer
    with gate():
        assert pairs[0].episode.answer == "secret-0"


def build(name: str, env: gym.Env):
    if name == "llm_evaluator":
        reply = '<agent_decision><selected_actions><action index="1"/></selected_actions></agent_decision>'
        return get_policy(name, backend=CallableBackend(lambda system, user: reply), cache=False)
    if name == "ppo":
        from policies.ppo import build_model

        return get_policy(name, model=build_model(env, hparams={"n_steps": 32, "batch_size": 16}))
    return get_policy(name)


def _non_privileged() -> list[str]:
    """Every registered policy that does not declare itself privileged (new policies join automatically)."""
    from policies import POLICIES, policy_class

    return [n for n in sorted(POLICIES) if not getattr(policy_class(n), "privileged", False)]


@pytest.mark.parametrize("name", _non_privileged())
def test_every_non_privileged_policy_completes_without_reading_gold(name, pairs, reward_gate, tmp_path):
    env = make(pairs, text_view_in_info=True, trace_path=str(tmp_path / "t.jsonl"))
    policy = build(name, env)
    env = make(pairs, render_mode=policy.render_mode or "text", text_view_in_info=True,
               trace_path=str(tmp_path / "t.jsonl"))
    for i, p in enumerate(pairs):
        r = run_episode(env, policy, p.episode.episode_id, seed=i)
        assert r.metrics["stop_reason"] in ("stop", "max_rounds", "max_replies", "step_cap") and "support" in r.components


def test_the_training_path_runs_on_sealed_episodes(pairs, reward_gate):
    import torch

    torch.set_num_threads(1)
    from policies.imitation import behaviour_clone, collect_demos
    from policies.ppo import build_model

    env = mage_gym.make_training_env(pairs, K=K, budget=BUDGET, retriever="bm25", query_fn=QF, render_mode="text")
    teacher = get_policy("heuristic", expand_min_rel=0.9, open_min_rel=0.9)
    demos = collect_demos(env, teacher, [p.episode.episode_id for p in pairs], progress=False)
    model = build_model(env, seed=0, hparams={"n_steps": 32, "batch_size": 16, "n_epochs": 1})
    assert behaviour_clone(model, demos, updates=3, batch_size=16, log_every=1)
    model.learn(64)
    assert set(demos) == {"obs/nodes", "obs/slot_mask", "obs/budget", "obs/progress", "obs/question", "masks",
                          "actions"}


def test_privileged_view_only_on_a_privileged_env(pairs, reward_gate):
    env = make(pairs)
    env.reset(seed=0, options={"episode_id": "q1"})
    with pytest.raises(PrivilegedAccessError, match="privileged=True"):
        env.get_wrapper_attr("privileged_view")()
    env = make(pairs, privileged=True)
    env.reset(seed=0, options={"episode_id": "q1"})
    with gate():  # a privileged reader opens the gold on purpose
        view = env.get_wrapper_attr("privileged_view")()
        gold_id = pairs[1].episode.gold_node_ids[0]
    assert isinstance(view, PrivilegedView) and view.answerable and view.gold_known
    assert view.gold_node_ids == (gold_id,) and view.pages == (int(gold_id.split(":p")[1].split(":")[0]),)
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.pages = ()  # type: ignore[misc]


GOLD_TYPES = (Episode, GoldEvidence, Gold, PrivilegedView)


def test_the_walk_fails_on_a_property_that_reads_gold(pairs):
    """The walk's own check: a public property reading a guarded field is a failure, never skipped."""

    class Leaky:
        def __init__(self, episode):
            self._episode = episode

        @property
        def answer(self) -> str:
            return self._episode.answer

    with pytest.raises(GoldRead, match=r"env\.answer reads gold"):
        list(public_reach(Leaky(pairs[0].episode)))


def test_no_public_attribute_of_the_env_or_its_wrappers_yields_gold(pairs, reward_gate, tmp_path):
    env = make(pairs, text_view_in_info=True, trace_path=str(tmp_path / "t.jsonl"))
    obs, info = env.reset(seed=0, options={"episode_id": "q2"})
    obs, _, _, _, info = env.step(int(np.flatnonzero(env.get_wrapper_attr("action_masks")())[-1]))
    reached = list(public_reach(env))
    assert len(reached) > 100  # the walk does go through the env, its state, graph and spec
    leaks = [path for path, obj in reached if isinstance(obj, GOLD_TYPES)]
    assert not leaks, leaks[:5]
    # what an episode provider hands out (the old leak was env.provider.get(id).episode) is sealed too
    loaded = env.unwrapped._provider.get("q2")
    assert not [path for path, obj in public_reach(loaded) if isinstance(obj, GOLD_TYPES)]
    assert repr(loaded.gold) == "SealedGold(<sealed>)" and not [n for n in dir(loaded.gold) if not n.startswith("_")]
    texts = [obj for _, obj in reached if isinstance(obj, str)]
    assert all("secret-" not in t for t in [repr(env.spec), env.get_wrapper_attr("text_view")(), *texts])


def test_the_privileged_view_carries_every_gold_field() -> None:
    """Each field of PrivilegedView.of for a two-hop region episode, written out (the oracle and shaping read them)."""
    from dataclasses import replace

    from mage_gym.data.episode import Region
    from mage_gym.testing import toy_episodes

    base = next(p for p in toy_episodes() if p.episode.episode_id == "region")
    g = base.graph
    regions = (Region(page=7, bbox=(0.1, 0.21, 0.9, 0.39), type="Table"),
               Region(page=2, bbox=(0.1, 0.01, 0.9, 0.2), type="Chart"))
    ep = replace(base.episode, episode_id="two_hops", evidence_pages=(2, 7), evidence_regions=regions,
                 evidence_hops=(2, 1))
    env = _privileged_env(EnvEpisode(ep, g))
    view = env.privileged_view()
    items = tuple(tuple(int(v) for v in it) for it in view.items)
    assert view.episode_id == "two_hops" and view.answerable is True and view.level == "element"
    assert view.pages == (2, 7) and view.regions == regions and view.region_hops == (2, 1)
    assert len(items) == 2 and all(len(it) >= 1 for it in items) and view.item_is_page == (False, False)
    assert view.item_pages == (2, 7) and view.gold_nodes == tuple(sorted({v for it in items for v in it}))
    assert view.gold_node_ids == tuple(g.node_ids[v] for v in view.gold_nodes)
    assert all(nid.startswith(("toy:p7:", "toy:p2:")) for nid in view.gold_node_ids) and view.gold_known
    single = _privileged_env(EnvEpisode(replace(ep, evidence_hops=()), g)).privileged_view()
    assert single.region_hops == ()


def _privileged_env(pair):
    from mage_gym.env import MageRAGEnv

    env = MageRAGEnv(episodes=[pair], query_fn=QF, K=16, retriever="bm25", privileged=True)
    env.reset(seed=0)
    return env


def test_the_privileged_view_names_gold_node_zero_and_drops_a_node_past_the_end() -> None:
    """Page 0's node is a gold node like any other; an index past the graph (a stale resolution) has no id."""
    g = make_toy_graph(n_pages=2, elements_per_page=2)
    ep = Episode(episode_id="edge", benchmark="synth", doc_id=g.doc_id, source="x", question="q", answer="a",
                 answer_format="Str", answerable=True)
    ev = GoldEvidence(items=((0,), (3,)), pages=(0, 1), item_pages=(0, 1), item_is_page=(True, False),
                      level="page", gold_nodes=np.array([0, 3, g.n_nodes], dtype=np.int32))
    view = PrivilegedView.of(Gold(ep, ev), g)
    assert view.gold_nodes == (0, 3, g.n_nodes) and view.gold_node_ids == (g.node_ids[0], g.node_ids[3])
