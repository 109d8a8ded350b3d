"""JSONL traces and replay."""
from __future__ import annotations

import json

import numpy as np

from mage_gym.env import MageRAGEnv, RoundDecision
from mage_gym.testing import hash_query_fn, toy_episodes
from mage_gym.trace import TraceRecorder, load_traces, replay

QF = hash_query_fn(16)


def make(trace_path=None, **kw):
    """A bare env; with ``trace_path`` a recorder observes it (what the TraceRecording wrapper attaches)."""
    env = MageRAGEnv(episodes=toy_episodes(), query_fn=QF, K=16, **kw)
    if trace_path is not None:
        env.add_observer(TraceRecorder(trace_path))
    return env


def play_flat(env, seed):
    env.reset(seed=seed)
    rng, done = np.random.default_rng(seed), False
    while not done:
        valid = np.flatnonzero(env.action_masks())
        a = int(valid[rng.integers(len(valid))]) if rng.random() > 0.05 else 0
        _, _, terminated, truncated, _ = env.step(a)
        done = terminated or truncated


def play_rounds(env):
    env.reset(options={"episode_id": "page"})
    env.submit_round(RoundDecision(activate=(1, 2), prune=(env.candidates()[0],)), raw="<think>x</think>")
    working = [env.gi.node_ids[v] for v in env.state.working if v >= env.gi.n_pages]
    env.submit_round(RoundDecision(open=tuple(working[:1]), search="asia risk margin"), raw="second")
    return env.submit_round(RoundDecision(stop=True), raw="stop now")


def test_trace_file_holds_every_record_kind(tmp_path):
    path = tmp_path / "trace.jsonl"
    env = make(trace_path=str(path))
    play_flat(env, 1)
    play_rounds(env)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    kinds = {r["kind"] for r in lines}
    assert kinds == {"reset", "step", "round", "round_end", "end"}
    episodes = load_traces(path)
    assert len(episodes) == 2 and episodes[1][0]["episode_id"] == "page"
    step = next(r for r in lines if r["kind"] == "step")
    assert {"op", "node_id", "ok", "error", "budget_left", "changed"} <= set(step)
    rounds = [r for r in episodes[1] if r["kind"] == "round"]
    assert [r["raw"] for r in rounds] == ["<think>x</think>", "second", "stop now"]
    end = episodes[1][-1]
    assert end["kind"] == "end" and end["stop_reason"] == "stop"
    assert end["rendered"]["xml"].startswith("<evidence") and "reward" in end["reward_components"]
    assert all("node_id" in im and "width" in im for im in end["rendered"]["images"])
    assert set(end["final_states"].values()) <= {"activated", "opened", "pruned"}


def test_replay_reproduces_flat_and_round_episodes(tmp_path):
    path = tmp_path / "t.jsonl"
    for play in (lambda e: play_flat(e, 3), play_rounds):
        env = make(trace_path=str(path))
        play(env)
        final = env.state.node_state.copy()
        again = replay(path, make())
        assert np.array_equal(again.state.node_state, final)
        assert again.state.counters == env.state.counters
        assert again.last_render.xml == env.last_render.xml
        path.unlink()


def test_an_episode_abandoned_by_reset_is_still_written(tmp_path):
    path = tmp_path / "t.jsonl"
    env = make(trace_path=str(path))
    env.reset(options={"episode_id": "elem"})
    env.step(1)  # one step, then reset mid-episode
    env.reset(options={"episode_id": "page"})
    env.step(0)
    episodes = load_traces(path)
    assert [e[0]["episode_id"] for e in episodes] == ["elem", "page"]
    assert episodes[0][-1]["kind"] == "step" and episodes[1][-1]["kind"] == "end"
