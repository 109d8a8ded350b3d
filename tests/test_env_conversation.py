"""Multi-turn episodes (conversations) on one document: turns, carried state, per-turn rewards, no gold early."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from mage_gym.env import MageRAGEnv
from mage_gym.env.episodes import EnvEpisode
from mage_gym.env.observation import CONVERSATION_KEYS, NUMERIC_KEYS
from mage_gym.env.state import ACTIVATED, OPENED
from mage_gym.testing import hash_query_fn, toy_episodes
from mage_gym.testing import toy_conversation, toy_crossdoc
from policies import POLICIES, get_policy
from mage_gym.bench.play import run_episode

QF = hash_query_fn(16)


def conversation() -> EnvEpisode:
    return toy_conversation()


def make_env(K: int = 16, **kw) -> MageRAGEnv:
    return MageRAGEnv(episodes=[conversation()], query_fn=QF, K=K, **kw)


def test_conversation_env_passes_check_env_and_adds_turn_keys():
    env = make_env()
    assert env.observation_keys == NUMERIC_KEYS + CONVERSATION_KEYS
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=0)
    assert info["turn"] == 0 and info["n_turns"] == 3
    assert obs["turn"].tolist() == [0.0, 0.0] and not obs["prev_question"].any()


def test_single_turn_envs_keep_todays_observation_keys():
    env = MageRAGEnv(episodes=toy_episodes(), query_fn=QF, K=16)
    assert env.observation_keys == NUMERIC_KEYS
    _, info = env.reset(seed=0)
    assert "turn" not in info


def test_stop_ends_a_turn_pays_its_reward_and_carries_the_working_set():
    env = make_env()
    obs, _ = env.reset(seed=0)
    q0 = env.question
    working0 = list(env.state.working)
    act = int(np.flatnonzero(env.action_masks()[1:])[0]) + 1  # any valid non-stop action
    env.step(act)
    held = [v for v in env.state.working]
    obs, r, term, trunc, info = env.step(0)  # Stop: turn 0 ends
    assert not term and not trunc
    assert info["turn_end"] is True and info["turn"] == 1 and "answer" in info
    assert "metrics" not in info and "reward_components" not in info  # gold-derived numbers only at the end
    assert env.question != q0 and env.turn == 1
    st = env.state.node_state
    assert all(st[v] in (ACTIVATED, OPENED) for v in held), "the working subgraph carries into the next question"
    assert set(working0) <= set(env.state.working)
    assert obs["turn"][1] == 1.0 and obs["prev_question"].any()
    assert env.state.counters.round == 0 and env.state.counters.acts_used == 0  # per-turn budget is fresh
    env.state.check_invariants()


def test_last_turn_terminates_with_per_turn_metrics_and_summed_tokens():
    env = make_env()
    env.reset(seed=0)
    rewards, turn_ends = [], 0
    while True:
        _, r, term, trunc, info = env.step(0)
        rewards.append(r)
        if term or trunc:
            break
        turn_ends += info.get("turn_end", False)
    assert turn_ends == 2 and term and not trunc
    per_turn = info["metrics"]["per_turn"]
    assert [t["turn"] for t in per_turn] == [0, 1, 2]
    assert sum(t["tokens_rendered"] for t in per_turn) == info["metrics"]["tokens_rendered"]
    assert info["reward_components"]["reward"] == pytest.approx(sum(rewards))
    assert [t["reward"] for t in per_turn] == pytest.approx(rewards)
    recalls = [t["evidence_page_recall"] for t in per_turn]
    assert info["metrics"]["evidence_page_recall"] == pytest.approx(np.mean(recalls))


def test_text_view_shows_earlier_questions_and_answers_never_gold():
    env = make_env(reader="oracle")
    env.reset(seed=0)
    assert "<conversation>" not in env.text_view()
    env.step(0)
    view = env.text_view()
    assert "<conversation>" in view and "Which chart shows revenue growth?" in view
    assert "toy:p4:e2" not in view.split("<conversation>")[1].split("</conversation>")[0]


def test_conversation_cap_limits_paid_activations_over_turns():
    env = make_env(budget={"k": 2, "m": 2, "M": 3, "T": 3, "B": 4}, conversation_cap=4)
    env.reset(seed=0)
    while True:  # activate whenever the mask allows: without the cap three turns would pay 3 x M = 9
        mask = env.action_masks()
        acts = [a for a in np.flatnonzero(mask) if env.layout.decode(int(a))[0].name.startswith("ACTIVATE")]
        _, _, term, trunc, info = env.step(int(acts[0]) if acts else 0)
        if term or trunc:
            break
    assert info["metrics"]["activations"] == 4


def _policy(name: str):
    if name == "llm_evaluator":  # a scripted model: a valid decision, then stop
        from policies.llm_evaluator import CallableBackend

        replies = iter(['<agent_decision><selected_actions><action index="1"/></selected_actions></agent_decision>',
                        "<agent_decision><stop>true</stop></agent_decision>"] * 50)
        return get_policy(name, backend=CallableBackend(lambda system, user: next(replies)), cache=False)
    return get_policy(name)  # ppo: the shipped checkpoint (K=64)


@pytest.mark.parametrize("name", sorted(POLICIES))
@pytest.mark.parametrize("kind", ["conversation", "cross_document"])
def test_every_policy_runs_both_kinds_with_valid_actions(name: str, kind: str):
    pair = conversation() if kind == "conversation" else toy_crossdoc()
    policy = _policy(name)
    privileged = bool(getattr(policy, "privileged", False))
    env = MageRAGEnv(episodes=[pair], query_fn=QF, K=64, privileged=privileged,
                     render_mode=policy.render_mode or "visual")
    if privileged:
        policy.bind(env)
    res = run_episode(env, policy, seed=0)
    if policy.level == "step":
        assert res.invalid == 0, res.errors
    if kind == "conversation":
        assert res.metrics["turns"] == 3 and len(res.metrics["per_turn"]) == 3
    else:
        assert set(res.metrics["per_document_recall"]) == {"A", "B"}


def test_reader_input_grows_with_the_carried_subgraph():
    """Stopping at once each turn: every turn's reader input holds the earlier turns' entry pages too."""
    env = make_env()
    env.reset(seed=0)
    n = env.graph.n_pages
    held = [{int(p) for p in env.state.working if p < n}]
    while True:
        _, _, term, trunc, info = env.step(0)
        if term or trunc:
            break
        held.append({int(p) for p in env.state.working if p < n})
    assert len(held) == 3 and held[0] < held[1] <= held[2], held  # each turn starts on the last one's pages
    toks = [t["tokens_rendered"] for t in info["metrics"]["per_turn"]]
    assert toks[0] < toks[1] < toks[2], toks  # more pages, then the same pages and a longer question


def test_gold_per_turn_is_the_turns_own_privileged_view():
    env = make_env(privileged=True)
    env.reset(seed=0)
    first = env.privileged_view().gold_node_ids
    env.step(0)
    second = env.privileged_view().gold_node_ids
    assert first == ("toy:p4:e2",) and second == ("toy:p3:e2",)


def test_composite_json_round_trip(tmp_path):
    from mage_gym.data.io import load_episodes, save_episodes

    ep = conversation().episode
    single = toy_episodes()[0].episode
    save_episodes(tmp_path / "e.jsonl", [ep, single])
    back = load_episodes(tmp_path / "e.jsonl")
    assert back[0] == ep and back[1] == single
    assert back[0].with_split("test").turns[0].evidence[0].split == "test"
    assert replace(ep, split="val").doc_id == "g0"


def _gold_variant(pair: EnvEpisode) -> EnvEpisode:
    """The same conversation with every gold field changed (answers, evidence, answerability)."""
    ep = pair.episode
    turns = tuple(replace(t, answer="something else", answerable=i != 1,
                          evidence=() if i == 1 else tuple(replace(e, evidence_pages=(0,), gold_node_ids=("toy:p0:e1",))
                                                           for e in t.evidence))
                  for i, t in enumerate(ep.turns))
    return EnvEpisode(replace(ep, turns=turns), pair.graph)


def _play(pair: EnvEpisode, actions: list[int]):
    env = MageRAGEnv(episodes=[pair], query_fn=QF, K=16,
                     observation_keys=NUMERIC_KEYS + CONVERSATION_KEYS + ("text",))
    seen = []
    obs, info = env.reset(seed=3)
    seen.append((obs, env.action_masks(), env.text_view(), dict(info)))
    for a in actions:
        mask = env.action_masks()
        if not mask[a]:  # the same substitute in both runs: the first valid non-Stop action
            valid = np.flatnonzero(mask[1:])
            a = int(valid[0]) + 1 if len(valid) else 0
        obs, _, term, trunc, info = env.step(a)
        if term or trunc:
            return seen
        seen.append((obs, env.action_masks(), env.text_view(), dict(info)))
    return seen


def test_no_gold_reaches_a_policy_before_the_conversation_ends():
    a, b = conversation(), _gold_variant(conversation())
    actions = [17, 0, 20, 33, 0, 18, 40, 0, 0]
    sa, sb = _play(a, actions), _play(b, actions)
    assert len(sa) == len(sb) > 3
    for (oa, ma, va, ia), (ob, mb, vb, ib) in zip(sa, sb):
        assert set(oa) == set(ob)
        for k in oa:
            assert np.array_equal(oa[k], ob[k]) if k != "text" else oa[k] == ob[k]
        assert np.array_equal(ma, mb) and va == vb and ia == ib


def test_without_carry_over_each_question_starts_from_its_own_entry_pages():
    env = make_env(carry_over=False)
    env.reset(seed=0)
    act = int(np.flatnonzero(env.action_masks()[1:])[0]) + 1
    env.step(act)
    env.step(0)
    fresh = MageRAGEnv(episodes=[conversation()], query_fn=QF, K=16)
    fresh.reset(seed=0)
    entry = fresh.retrieval.relevance(fresh.graph, env.question).page_order[: fresh.budget.k].tolist()
    assert sorted(env.state.working) == sorted(entry)  # nothing of turn 0 (its extra activation) is kept


class _EchoReader:
    """A reader that answers with the question it was given (what the env asks, turn by turn)."""

    answers = True

    def __init__(self) -> None:
        self.questions: list[str] = []

    def read(self, rendered):
        from mage_gym.readers.base import ReaderOutput

        self.questions.append(rendered.question)
        return ReaderOutput(answer=f"ans{len(self.questions)}", raw="")


def test_reader_gets_each_turns_question_with_the_earlier_turns():
    reader = _EchoReader()
    env = MageRAGEnv(episodes=[conversation()], query_fn=QF, K=16, reader=reader)
    env.reset(seed=0)
    for _ in range(3):
        env.step(0)
    first, second, third = reader.questions
    assert first == "Which chart shows revenue growth?"
    assert second.endswith("Now answer: And the asia risk margin?") and "A1: ans1" in second
    assert "Q1: Which chart shows revenue growth?" in third and "Q2: And the asia risk margin?" in third
