"""Property tests over random (masked and unmasked) action sequences and LLM rounds.

Properties: budgets never go negative or past their caps; the mask marks
exactly the actions the transition accepts (every action is tried on a copy
of the state); the incremental bookkeeping (working set, frontier, relation
counts, counters) stays consistent; pruned nodes are never rendered; replaying
the trace reproduces the final state.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mage_gym.env import PRUNED, MageRAGEnv, Op, RoundDecision, decode_action, n_actions
from mage_gym.testing import hash_query_fn, toy_episodes
from mage_gym.env.actions import apply_operation
from mage_gym.trace import TraceRecorder, replay

QF = hash_query_fn(16)


def _with_conversation(pairs: list) -> list:
    """The toy episodes plus a three-turn conversation on the same graph (turn ends, carried state, replay)
    and a question over two documents."""
    from mage_gym.data.composite import CompositeEpisode, DocumentRef, Turn
    from mage_gym.env.episodes import EnvEpisode

    g = pairs[0].graph
    parts = [p.episode for p in pairs if p.episode.answerable]
    turns = tuple(Turn(p.question, p.answer, p.answer_format, True, (p,)) for p in parts[:3])
    conv = CompositeEpisode(episode_id="conv", benchmark="mmlongbench", documents=(DocumentRef(g.doc_id, "<toy>"),),
                            turns=turns, group="toy")
    # and a question over two documents (the union graph, gold in both)
    from mage_gym.testing import make_toy_graph

    g2 = make_toy_graph(n_pages=4, elements_per_page=3, doc_id="toy2", dim=16, seed=3)
    other = replace(parts[0], episode_id="x2", doc_id="toy2", source="<toy2>", evidence_pages=(2,),
                    gold_node_ids=("toy2:p2:e1",), evidence_regions=())
    xdoc = CompositeEpisode(episode_id="xdoc", benchmark="mmlongbench",
                            documents=(DocumentRef(g.doc_id, "<toy>"), DocumentRef("toy2", "<toy2>")),
                            turns=(Turn(parts[0].question, "x", "Str", True, (parts[0], other)),), group="toys")
    return pairs + [EnvEpisode(conv, [g]), EnvEpisode(xdoc, [g, g2])]


EPISODES = _with_conversation(toy_episodes(n_pages=6, elements_per_page=4))

budgets = st.fixed_dictionaries({
    "k": st.integers(0, 3), "m": st.integers(1, 3), "M": st.integers(0, 6),
    "T": st.integers(1, 3), "B": st.integers(0, 3),
})


def make(budget, K, mode, final_pass=False) -> MageRAGEnv:
    return MageRAGEnv(episodes=EPISODES, query_fn=QF, budget=budget, K=K, render_mode=mode,
                      final_open_pass=final_pass)


def accepted(env: MageRAGEnv, action: int) -> bool:
    """Would the transition accept ``action``? Tried on a copy of the state."""
    op, slot = decode_action(action, env.K)
    if op == Op.STOP:
        return not env.state.stopped
    node = int(env.slots[slot])
    res = apply_operation(env.state.copy(), op, node, search=lambda: np.zeros(env.gi.n_pages))
    return res.ok


def check_budget(env: MageRAGEnv) -> None:
    c, b = env.state.counters, env.budget
    assert 0 <= c.acts_used <= b.M and 0 <= c.opens_used <= b.B
    assert 0 <= c.round_acts <= b.m and 0 <= c.round <= b.T
    assert 0 <= c.steps <= b.max_steps
    assert all(v >= 0 for v in env.state.budget_left().values())


def random_decision(env: MageRAGEnv, rng: np.random.Generator) -> RoundDecision:
    cands = env.candidates()
    working = [env.gi.node_ids[v] for v in env.state.working]
    pick = lambda xs, n: [xs[i] for i in rng.permutation(len(xs))[:n]] if xs else []  # noqa: E731
    return RoundDecision(
        activate=tuple(int(i) for i in rng.integers(0, len(cands) + 2, size=rng.integers(0, 3))),
        open=tuple(pick(working, int(rng.integers(0, 3)))),
        search=("revenue growth" if rng.random() < 0.3 else None),
        prune=tuple(pick(working, int(rng.integers(0, 2)))),
        stop=bool(rng.random() < 0.1),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(budget=budgets, K=st.sampled_from([4, 8, 16]), mode=st.sampled_from(["visual", "text", "elements"]),
       episode=st.sampled_from([e.episode.episode_id for e in EPISODES]), seed=st.integers(0, 10_000),
       p_invalid=st.sampled_from([0.0, 0.2]), p_round=st.sampled_from([0.0, 0.3]),
       final_pass=st.booleans())
def test_random_episodes_keep_every_invariant(budget, K, mode, episode, seed, p_invalid, p_round, final_pass):
    env = make(budget, K, mode, final_pass)
    trace = TraceRecorder()  # in memory, observing the transition as the TraceRecording wrapper does
    env.add_observer(trace)
    rng = np.random.default_rng(seed)
    env.reset(seed=seed, options={"episode_id": episode})
    done = False
    while not done:
        mask = env.action_masks()
        assert mask.shape == (n_actions(K),)
        for a in range(len(mask)):
            assert bool(mask[a]) == accepted(env, a), f"mask disagrees with the transition on action {a}"
        if rng.random() < p_round:
            _, reward, terminated, truncated, info = env.submit_round(random_decision(env, rng), raw="raw text")
        else:
            valid = np.flatnonzero(mask)
            a = int(rng.integers(len(mask))) if rng.random() < p_invalid else int(valid[rng.integers(len(valid))])
            if a == 0 and rng.random() < 0.95 and len(valid) > 1:
                a = int(valid[1 + rng.integers(len(valid) - 1)])  # keep episodes going a little longer
            _, reward, terminated, truncated, info = env.step(a)
        done = terminated or truncated
        assert not (terminated and truncated)
        assert done == env.state.stopped and truncated == (env.state.stop_reason == "step_cap")
        env.state.check_invariants()
        check_budget(env)
    # pruned nodes are never rendered; everything rendered is activated or opened
    rendered = env.last_render
    idx = env.graph.index_of
    states = env.state.node_state
    assert all(states[idx[n]] != PRUNED for n in rendered.node_ids)
    assert all(states[idx[n]] in (1, 2) for n in rendered.node_ids)
    assert {im.node_id for im in rendered.images} <= set(rendered.node_ids)
    assert (len(rendered.images) > 0) <= (mode != "text")
    assert not rendered.page_image_ids or mode == "visual"
    assert np.isfinite(reward)
    # replaying the trace reproduces the final state
    records = list(trace.records)
    again = make(budget, K, mode, final_pass)
    replay(records, again)
    assert np.array_equal(again.state.node_state, env.state.node_state)
    assert again.state.counters == env.state.counters
    assert again.state.stop_reason == env.state.stop_reason
    assert again.last_render.xml == rendered.xml
