"""Wrappers: traces (also of LLM rounds; old traces still read), text view in info, potential shaping, check_env."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import mage_gym  # noqa: F401 - registers MageRAG-v0
from mage_gym.env import OBSERVATION_KEYS, MageRAGEnv, PrivilegedAccessError, RoundDecision
from mage_gym.testing import hash_query_fn, toy_episodes
from mage_gym.env.episodes import SealedEpisodes
from mage_gym.trace import TRACE_FORMAT, load_traces, replay
from mage_gym.wrappers import PotentialShaping, TextViewInfo, TraceRecording

QF = hash_query_fn(16)
OLD_TRACE = Path(__file__).parent / "data" / "trace_before_wrappers.jsonl"
#: the reward weights the old trace was recorded with (the class default of lambda_cost was 0.1 then)
OLD_REWARD = {"lambda_cost": 0.1}


def base(**kw) -> MageRAGEnv:
    kw.setdefault("K", 16)
    return MageRAGEnv(episodes=toy_episodes(), query_fn=QF, **kw)


def call(env, name, *args, **kw):
    return env.get_wrapper_attr(name)(*args, **kw)


#: end-of-episode metrics added after tests/data/trace_before_wrappers.jsonl was written (issue 41's item-level
#: support and the count of pages recalled through the page-level-gold rule); everything else must match
METRICS_ADDED_SINCE_THE_FIXTURE = ("item_support", "gold_pages_by_any_element")


def play_like_the_old_fixture(env) -> None:
    """The moves that wrote tests/data/trace_before_wrappers.jsonl with the code before the wrappers."""
    env.reset(seed=3, options={"episode_id": "elem"})
    rng, done = np.random.default_rng(3), False
    while not done:
        valid = np.flatnonzero(call(env, "action_masks"))
        a = int(valid[rng.integers(len(valid))]) if rng.random() > 0.05 else 0
        _, _, terminated, truncated, _ = env.step(a)
        done = terminated or truncated
    env.reset(seed=4, options={"episode_id": "page"})
    call(env, "submit_round", RoundDecision(activate=(1, 2), prune=(call(env, "candidates")[0],)),
         raw="<think>x</think>")
    state, gi = env.get_wrapper_attr("state"), env.get_wrapper_attr("gi")
    working = [gi.node_ids[v] for v in state.working if v >= gi.n_pages]
    call(env, "submit_round", RoundDecision(open=tuple(working[:1]), search="asia risk margin"), raw="second")
    call(env, "submit_round", RoundDecision(stop=True), raw="stop now")


def test_trace_wrapper_writes_the_same_records_as_before_plus_a_format_field(tmp_path):
    path = tmp_path / "t.jsonl"
    env = TraceRecording(base(budget={"k": 2}, reward=OLD_REWARD), path)
    play_like_the_old_fixture(env)
    new = [json.loads(x) for x in path.read_text().splitlines()]
    old = [json.loads(x) for x in OLD_TRACE.read_text().splitlines()]
    assert len(new) == len(old)
    for a, b in zip(new, old):
        if a["kind"] == "reset":
            assert a.pop("trace_format") == TRACE_FORMAT
        for key in METRICS_ADDED_SINCE_THE_FIXTURE:  # present in every end record now, absent from the fixture
            assert key not in b.get("metrics", {}) and (a["kind"] != "end" or key in a["metrics"])
            a.get("metrics", {}).pop(key, None)
        assert a == b
    kinds = {r["kind"] for r in new}
    assert kinds == {"reset", "step", "round", "round_end", "end"}  # LLM rounds and their steps are there
    assert env.trace.records[-1]["kind"] == "end"


def test_old_traces_replay_and_feed_the_report():
    from mage_gym.report import read_trace_file, replay_states

    episodes = load_traces(OLD_TRACE)
    assert len(episodes) == 2 and all("trace_format" not in e[0] for e in episodes)
    for records in episodes:
        env = replay(records, base(budget={"k": 2}, reward=OLD_REWARD))
        names = ("unvisited", "activated", "opened", "pruned")
        got = {env.graph.node_ids[i]: names[int(s)] for i, s in enumerate(env.state.node_state) if s}
        assert got == records[-1]["final_states"]
        assert env.last_outcome.components == records[-1]["reward_components"]
    traces = read_trace_file(OLD_TRACE, "old")
    assert [t.episode_id for t in traces] == ["elem", "page"]
    assert all(replay_states(t) is not None for t in traces)


def test_trace_wrapper_through_gym_make_and_the_runner_records_llm_rounds(tmp_path):
    from policies import get_policy
    from policies.llm_evaluator import CallableBackend
    from mage_gym.bench.play import run_episode

    reply = '<agent_decision><selected_actions><action index="1"/></selected_actions></agent_decision>'
    policy = get_policy("llm_evaluator", backend=CallableBackend(lambda system, user: reply), cache=False)
    path = tmp_path / "llm.jsonl"
    env = TraceRecording(gym.make("MageRAG-v0", episodes=toy_episodes(), query_fn=QF, K=16, retriever="bm25",
                                  render_mode="text"), path)
    r = run_episode(env, policy, "page", seed=0)
    [records] = load_traces(path)
    rounds = [x for x in records if x["kind"] == "round"]
    assert len(rounds) == r.metrics["evaluator_calls"] > 0 and rounds[0]["raw"] == reply
    assert any(x["op"] in ("ActivatePage", "ActivateNode") for x in records if x["kind"] == "step")
    again = replay(records, gym.make("MageRAG-v0", episodes=toy_episodes(), query_fn=QF, K=16, retriever="bm25",
                                     render_mode="text"))
    assert again.unwrapped.last_outcome.metrics == r.metrics


def test_gym_make_trace_keywords_wrap_and_the_bare_env_refuses_them(tmp_path):
    in_memory = gym.make("MageRAG-v0", episodes=toy_episodes(), query_fn=QF, K=8, record_trace=True)
    in_memory.reset(seed=0)
    in_memory.step(0)
    assert [r["kind"] for r in in_memory.get_wrapper_attr("trace").records] == ["reset", "step", "end"]
    plain = gym.make("MageRAG-v0", episodes=toy_episodes(), query_fn=QF, K=8, trace_path="")
    with pytest.raises(AttributeError):
        plain.get_wrapper_attr("trace")
    for key, value in (("trace_path", str(tmp_path / "t.jsonl")), ("record_trace", True)):
        with pytest.raises(TypeError, match="TraceRecording"):
            base(**{key: value})


def test_text_view_info_at_reset_and_every_move_but_the_last():
    env = TextViewInfo(base())
    _, info = env.reset(seed=0, options={"episode_id": "elem"})
    assert info["text_view"] == call(env, "text_view")
    _, _, _, _, info = env.step(int(np.flatnonzero(call(env, "action_masks"))[-1]))
    assert info["text_view"].startswith("<mage_state>")
    _, _, done, _, info = call(env, "submit_round", RoundDecision(activate=(1,)))
    assert not done and "text_view" in info
    _, _, done, _, info = call(env, "operate", "Stop")
    assert done and "text_view" not in info


def test_a_prunes_reason_passes_through_every_wrapper_to_the_trace(tmp_path):
    """``operate(..., reason=)`` through TextViewInfo over TraceRecording reaches the base env (the chat's prune)."""
    env = TextViewInfo(TraceRecording(base(), path=tmp_path / "t.jsonl"))
    env.reset(seed=0, options={"episode_id": "elem"})
    call(env, "submit_round", RoundDecision(activate=(1,)))
    node = next(iter(call(env, "candidates")))
    call(env, "operate", "PruneNode", node, reason="off topic")
    ops = [r for r in env.get_wrapper_attr("trace").records if r.get("op") == "PruneNode"]
    assert ops and ops[-1]["reason"] == "off topic"


def test_shaping_needs_a_privileged_env():
    with pytest.raises(PrivilegedAccessError):
        PotentialShaping(base())
    with pytest.raises(PrivilegedAccessError):
        gym.make("MageRAG-v0", episodes=toy_episodes(), query_fn=QF, shaping=True)
    with pytest.raises(PrivilegedAccessError):
        base().privileged_view()
    with pytest.raises(TypeError, match="wrapper"):
        base(text_view_in_info=True)
    with pytest.raises(TypeError, match="PotentialShaping"):
        base(reward={"shaping": True})  # shaping is the wrapper alone: no reward setting turns it on


def test_shaping_pays_the_potential_difference_per_move_and_telescopes():
    from mage_gym.reward import potential

    env = PotentialShaping(base(budget={"k": 1, "m": 2}, privileged=True), gamma=1.0, scale=1.0)
    u = env.unwrapped
    env.reset(seed=0, options={"episode_id": "elem"})
    view = u.privileged_view()

    def phi() -> float:
        s = u.state
        return potential(view, s.node_state, s.gi.node_page, s.gi.n_pages, True, view.answerable)

    phi0 = before = phi()
    rng, total, done = np.random.default_rng(2), 0.0, False
    while not done:
        valid = np.flatnonzero(u.action_masks())
        if rng.random() < 0.3:
            _, r, terminated, truncated, info = env.submit_round(RoundDecision(activate=(1,)))  # one move
        else:
            _, r, terminated, truncated, info = env.step(int(valid[rng.integers(len(valid))]))
        done = terminated or truncated
        after = 0.0 if done else phi()
        terminal = info["reward_components"]["reward"] if done else 0.0
        assert r == pytest.approx(terminal + after - before)
        before = after
        total += r
    assert total == pytest.approx(info["reward_components"]["reward"] - phi0)


def test_shaping_is_the_wrapper_keyword_alone():
    with pytest.raises(TypeError, match="unknown reward setting"):
        gym.make("MageRAG-v0", episodes=toy_episodes(), query_fn=QF, K=8, reward={"shaping": True})
    env = gym.make("MageRAG-v0", episodes=toy_episodes(), query_fn=QF, K=8, privileged=True,
                   shaping={"gamma": 0.9})
    assert env.get_wrapper_attr("privileged") and env.get_wrapper_attr("gamma") == 0.9
    shaped = mage_gym.make_training_env(toy_episodes(), privileged=True, shaping=True, query_fn=QF, K=8)
    chain, e = [], shaped
    while isinstance(e, gym.Wrapper):
        chain.append(type(e))
        e = e.env
    assert PotentialShaping in chain and e.privileged
    with pytest.raises(PrivilegedAccessError):
        mage_gym.make_training_env(toy_episodes(), shaping=True, query_fn=QF)


def test_check_env_with_and_without_the_wrappers_and_the_text_key(tmp_path):
    from gymnasium.utils.env_checker import check_env
    from sb3_contrib.common.maskable.utils import get_action_masks
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    plain = gym.make("MageRAG-v0", episodes=toy_episodes(), query_fn=QF, K=8)
    wrapped = gym.make("MageRAG-v0", episodes=toy_episodes(), query_fn=QF, K=8, privileged=True, shaping=True,
                       text_view_in_info=True, trace_path=str(tmp_path / "c.jsonl"))
    texty = gym.make("MageRAG-v0", episodes=toy_episodes(), query_fn=QF, K=8, observation_keys=OBSERVATION_KEYS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the checkers warn that the env is wrapped / "nodes" is 2-D
        for env in (plain, wrapped, texty):
            check_env(env, skip_render_check=True)
        for env in (plain, wrapped):
            sb3_check_env(env)
    assert plain.observation_space == MageRAGEnv(episodes=toy_episodes(), query_fn=QF, K=8).observation_space
    assert "text" not in plain.observation_space.spaces and "text" in texty.observation_space.spaces
    wrapped.reset(seed=0)
    assert np.array_equal(get_action_masks(wrapped), wrapped.unwrapped.action_masks())


def test_the_text_key_holds_any_unicode_and_stays_in_its_space():
    from dataclasses import replace

    from mage_gym.env import EnvEpisode

    pair = toy_episodes()[0]
    odd = "Ünïcödé — 中文 ﬁ ligature 🙂 \u200b zero-width, tab\tand \x0b control"
    g = pair.graph
    g2 = replace(g, elements=[replace(e, text=odd + e.text, summary=odd) for e in g.elements],
                 pages=[replace(p, summary=odd) for p in g.pages])
    env = MageRAGEnv(episodes=[EnvEpisode(replace(pair.episode, question=odd), g2)], query_fn=QF, K=8,
                     observation_keys=OBSERVATION_KEYS)
    obs, _ = env.reset(seed=0)
    assert "中文" in obs["text"] and "🙂" in obs["text"]
    assert env.observation_space.contains(obs)
    space = env.observation_space["text"]
    assert space.contains(space.sample()) and not space.contains(b"bytes")


def test_spec_holds_sealed_episodes_and_rebuilds_the_env():
    env = gym.make("MageRAG-v0", episodes=toy_episodes(), query_fn=QF, K=8)
    sealed = env.spec.kwargs["episodes"]
    assert isinstance(sealed, SealedEpisodes) and "answer" not in repr(env.spec)
    again = gym.make(env.spec)
    assert again.get_wrapper_attr("episode_ids") == env.get_wrapper_attr("episode_ids")
    again.reset(seed=0)
