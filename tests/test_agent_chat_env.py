"""MageRAG-Chat-v0: check_env, replayable tasks, stable numbers, bad input counted and never raising, no gold."""
from __future__ import annotations

import json
import warnings

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mage_gym
from agent_helpers import ANSWER, gold_marked_pairs, toy_chat_env
from mage_gym.agent.chat_env import MageChatEnv, fingerprint, text_of, to_openai_messages
from mage_gym.agent.spaces import AssistantMessage, ChatMessages
from mage_gym.agent.tasks import TaskId
from mage_gym.bench.synthetic import hash_query_fn
from mage_gym.testing import toy_episodes


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


@pytest.fixture(scope="module")
def env() -> MageChatEnv:
    return toy_chat_env()


def test_registered_and_passes_check_env():
    env = gym.make(mage_gym.CHAT_ENV_ID, episodes=toy_episodes(), query_fn=hash_query_fn(16), K=16, retriever="bm25")
    assert isinstance(env.unwrapped, MageChatEnv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gymnasium warns that the spaces are not its own
        from gymnasium.utils.env_checker import check_env

        check_env(env.unwrapped, skip_render_check=True)
    obs, info = env.reset(seed=3)
    assert ChatMessages().contains(obs) and [m["role"] for m in obs] == ["system", "user"]
    assert "episodes" in env.spec.kwargs and "Sealed" in repr(env.spec.kwargs["episodes"])  # the gold stays sealed


def test_reset_shows_question_budget_evidence_and_numbered_candidates(env):
    obs, info = env.reset(options={"task": str(env.task_id("elem"))})
    user = obs[1]["content"]
    assert "<question>Which chart shows revenue growth?</question>" in user and "<budget " in user
    assert '<c n="1" ' in user and "<evidence>" in user and 'steps_left="132"' in user
    assert info["task"] == "mmlongbench/toy/elem/k5-m4-M24-T6-B16/s0" and info["process"]["cost_calls"] == 0.0
    assert set(info["process"]["budget_left"]) == {"rounds", "activations", "activations_in_round", "opens", "steps"}


def test_a_good_turn_runs_each_call_and_shows_only_what_changed(env):
    obs0, _ = env.reset(options={"task": str(env.task_id("elem"))})
    node = env.view.node_of(2)
    obs, r, term, trunc, info = env.step(call("activate", candidates=[2]) + call("open", ids=[node]))
    text = obs[0]["content"]
    assert obs[0]["role"] == "user" and not (term or trunc) and r == 0.0
    assert f"candidate 2 ({node}): activated" in text and f"{node}: opened" in text
    assert f'<opened id="{node}"' in text or f'<added id="{node}"' in text
    assert "<evidence>" not in text  # the held evidence is not sent again
    assert info["format_errors"] == 0 and info["invalid_calls"] == 0 and info["tool_calls"] == 2
    assert info["process"]["operations"] == 2 and info["process"]["cost_calls"] > 0
    assert len(text) < len(obs0[1]["content"])


def test_structured_calls_get_one_tool_message_each(env):
    env.reset(options={"task": str(env.task_id("page"))})
    msg = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "a1", "type": "function", "function": {"name": "activate", "arguments": {"candidates": [1]}}},
        {"id": "a2", "type": "function", "function": {"name": "activate", "arguments": {"candidates": [999]}}}]}
    obs, *_, info = env.step(msg)
    assert [m["role"] for m in obs] == ["tool", "tool"] and [m["tool_call_id"] for m in obs] == ["a1", "a2"]
    assert "no candidate was shown with this number" in obs[1]["content"] and "<budget " in obs[1]["content"]
    assert info["invalid_calls"] == 1 and info["format_errors"] == 0


def test_bad_input_is_answered_counted_and_costs_a_step(env):
    env.reset(options={"task": str(env.task_id("elem"))})
    obs, r, term, trunc, info = env.step("the answer is probably on page 2")
    assert "no tool call found" in obs[0]["content"] and info["format_errors"] == 1 and info["steps_used"] == 1
    obs, *_, info = env.step(call("activate", candidates="x") + call("open", ids=["toy:p99:e9"]))
    assert info["format_errors"] == 1 and info["invalid_calls"] == 1 and info["steps_used"] == 3
    assert "must be an integer" in obs[0]["content"] and "toy:p99:e9: unknown id" in obs[0]["content"]
    assert info["format_errors_total"] == 2 and info["invalid_calls_total"] == 1


def test_the_step_cap_truncates_and_pays_the_terminal_reward():
    env = toy_chat_env(budget={"k": 2, "m": 1, "M": 4, "T": 1, "B": 1})  # step cap T*(m+B+2) = 4
    env.reset(options={"task": str(env.task_id("elem", budget={"k": 2, "m": 1, "M": 4, "T": 1, "B": 1}))})
    done, steps = False, 0
    while not done:
        obs, r, term, trunc, info = env.step("nothing useful")
        done, steps = term or trunc, steps + 1
    assert trunc and not term and steps == 4 and info["stop_reason"] == "step_cap"
    assert "reward_components" in info and r == pytest.approx(info["reward_components"]["reward"])
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step(call("stop"))


def test_stop_terminates_and_finish_truncates_without_counting_a_reply(env):
    env.reset(options={"task": str(env.task_id("unans"))})
    *_, term, trunc, info = env.step(call("stop") + call("activate", candidates=[1]))
    assert term and not trunc and info["stop_reason"] == "stop" and info["invalid_calls"] == 1  # after stop: not run
    env.reset(options={"task": str(env.task_id("unans"))})
    obs, r, term, trunc, info = env.finish()
    assert trunc and not term and info["stop_reason"] == "rollout_end"
    assert info["metrics"]["evaluator_calls"] == 0 and info["reward_components"]["cost_calls"] > 0  # the reader only


def test_candidate_numbers_are_stable_and_grouping_does_not_change_the_state(env):
    task = str(env.task_id("elem"))
    env.reset(options={"task": task})
    first = {n: env.view.node_of(n) for n in range(1, 5)}
    env.step(call("activate", candidates=[1]))
    assert {n: env.view.node_of(n) for n in range(1, 5)} == first  # numbers never move
    seq = [("activate", {"candidates": [2]}), ("activate", {"candidates": [3]}), ("stop", {})]
    env.reset(options={"task": task})
    *_, one = env.step([{"name": n, "arguments": a} for n, a in seq])
    env.reset(options={"task": task})
    for n, a in seq:
        *_, apart = env.step([{"name": n, "arguments": a}])
    same = ("tokens_rendered", "pages_rendered", "elements_rendered", "activations", "opens", "evidence_page_recall")
    assert {k: one["metrics"][k] for k in same} == {k: apart["metrics"][k] for k in same}
    assert one["metrics"]["evaluator_calls"] == 1 and apart["metrics"]["evaluator_calls"] == 3  # one per reply


def test_task_ids_are_checked(env):
    with pytest.raises(ValueError, match="dataset"):
        env.reset(options={"task": "synth/toy/elem/k5-m4-M24-T6-B16/s0"})
    with pytest.raises(KeyError, match="unknown episode"):
        env.reset(options={"task": "mmlongbench/toy/nope/k5-m4-M24-T6-B16/s0"})
    with pytest.raises(ValueError, match="document"):
        env.reset(options={"task": "mmlongbench/other/elem/k5-m4-M24-T6-B16/s0"})


def test_a_task_brings_its_own_budget(env):
    obs, info = env.reset(options={"task": str(TaskId("mmlongbench", "toy", "elem", env.budget.__class__(T=2)))})
    assert 'rounds="2"' in obs[1]["content"] and info["step_cap"] == 2 * (4 + 16 + 2)


_messages = st.one_of(
    st.text(max_size=80),
    st.lists(st.tuples(st.sampled_from(["activate", "open", "search", "prune", "stop", "zap"]),
                       st.integers(-2, 25), st.sampled_from(["toy:p1", "toy:p2:e1", "toy:p3:e0", "bad id", ""])),
             min_size=1, max_size=3).map(lambda calls: "".join(
                 call(n, **({"activate": {"candidates": [i]}, "open": {"ids": [s]}, "search": {"query": s},
                             "prune": {"ids": [s], "reason": "x"}, "stop": {}, "zap": {"x": i}}[n])) for n, i, s in calls)),
    st.builds(lambda s: AssistantMessage(seed=s).sample(), st.integers(0, 10_000)),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(["elem", "page", "region", "unans"]), st.integers(0, 3),
       st.lists(_messages, min_size=1, max_size=6))
def test_same_task_and_same_calls_give_the_same_observations_and_reward(env, episode, seed, messages):
    task = str(env.task_id(episode, seed=seed))

    def play():
        obs, info = env.reset(options={"task": task})
        log, total, done = [fingerprint(obs)], 0.0, False
        for m in messages:
            obs, r, term, trunc, info = env.step(m)  # never raises on anything a model writes
            log.append((fingerprint(obs), info["format_errors"], info["invalid_calls"]))
            total += r
            done = term or trunc
            if done:
                break
        if not done:
            obs, r, *_ = env.finish()
            total += r
        return log, total

    assert play() == play()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_messages, min_size=1, max_size=8))
def test_errors_are_counted_and_totals_add_up(env, messages):
    env.reset(options={"task": str(env.task_id("elem"))})
    fmt = inv = 0
    for m in messages:
        obs, r, term, trunc, info = env.step(m)
        fmt += info["format_errors"]
        inv += info["invalid_calls"]
        assert info["format_errors_total"] == fmt and info["invalid_calls_total"] == inv
        assert len(info["errors"]) == info["format_errors"] + info["invalid_calls"]
        if term or trunc:
            break


def test_no_message_holds_gold():
    env = MageChatEnv(episodes=gold_marked_pairs(), query_fn=hash_query_fn(16), K=16, retriever="bm25")
    for eid in env.episode_ids:
        obs, info = env.reset(options={"task": str(env.task_id(eid))})
        seen = [text_of(obs), json.dumps(info, default=str)]
        for m in (call("activate", candidates=[1, 2]), call("search", query="revenue"), call("stop")):
            obs, r, term, trunc, info = env.step(m)
            seen.append(text_of(obs))
            if not (term or trunc):
                seen.append(json.dumps(info, default=str))  # pre-terminal info too
        assert not any(ANSWER in s for s in seen)


def test_vision_parts_and_their_openai_form(tmp_path):
    from mage_gym.data.synth.config import SynthConfig
    from mage_gym.data.synth.corpus import generate_corpus, load_synth

    generate_corpus(tmp_path, n_docs=1, seed=0, cfg=SynthConfig(min_pages=3, max_pages=3, questions_per_doc=1),
                    workers=1, progress=False)
    env = MageChatEnv(episodes=load_synth(tmp_path), parser="fast", retriever="bm25", K=16, vision=True,
                      max_images_per_turn=2)
    obs, _ = env.reset(seed=0)
    parts = obs[1]["content"]
    assert isinstance(parts, list) and parts[0]["type"] == "text"
    images = [p for p in parts if p["type"] == "image"]
    assert 1 <= len(images) <= 2 and images[0]["image"].size[0] > 0
    wire = to_openai_messages(obs)
    assert wire[1]["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert ChatMessages().contains(obs) and ChatMessages().contains(wire)
    assert np.all([isinstance(m["content"], (str, list)) for m in wire])
