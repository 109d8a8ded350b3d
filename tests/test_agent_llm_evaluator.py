"""llm_evaluator drives MageRAG-Chat-v0 (protocol=tools) through the one runner, counted like its XML rounds."""
from __future__ import annotations

import json

import pytest

from agent_helpers import toy_chat_env
from mage_gym.bench.synthetic import hash_query_fn
from mage_gym.testing import toy_episodes
from policies import get_policy
from mage_gym.bench.play import run_episode


class ScriptedChat:
    """A backend holding a conversation: replies in turn, and what it was sent."""

    def __init__(self, replies):
        self.replies, self.seen = list(replies), []

    def identity(self):
        return {"backend": "scripted-chat"}

    def chat(self, messages):
        self.seen.append(list(messages))
        return self.replies.pop(0)


def make_env():
    import gymnasium as gym
    import mage_gym  # noqa: F401 - registers MageRAG-v0

    return gym.make("MageRAG-v0", episodes=toy_episodes(), query_fn=hash_query_fn(16), K=16, retriever="bm25",
                    record_trace=True)


def test_tools_protocol_runs_through_run_episode_with_structured_and_text_replies():
    backend = ScriptedChat([
        '<tool_call>{"name": "activate", "arguments": {"candidates": [1, 2]}}</tool_call>',
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "k1", "type": "function", "function": {"name": "stop", "arguments": "{}"}}]}])
    policy = get_policy("llm_evaluator", backend=backend, cache=False, protocol="tools")
    assert policy.level == "chat"
    res = run_episode(make_env(), policy, episode_id="elem", seed=0)
    assert res.decisions == 2 and res.invalid == 0 and res.metrics["stop_reason"] == "stop"
    assert res.metrics["evaluator_calls"] == 2 and res.metrics["activations"] == 2
    first = backend.seen[0]
    assert [m["role"] for m in first] == ["system", "user"] and "Tools:" in first[0]["content"]
    second = backend.seen[1]
    assert second[2]["role"] == "assistant" and "activated" in second[3]["content"]  # the env's reply came back
    s = policy.stats
    assert s["evaluator_rounds"] == s["evaluator_calls"] == s["evaluator_strict"] == 2 and s["evaluator_fallback"] == 0


def test_unusable_replies_fall_back_and_the_reply_limit_ends_the_episode():
    policy = get_policy("llm_evaluator", backend=ScriptedChat(["no idea", "still none"]), cache=False,
                        protocol="tools", max_rounds=2)
    res = run_episode(make_env(), policy, episode_id="page", seed=0)
    s = policy.stats
    assert s["evaluator_unusable"] == s["evaluator_fallback"] == 2 and s["evaluator_calls"] == 2
    assert res.metrics["stop_reason"] == "max_replies" and res.metrics["evaluator_calls"] == 2
    assert res.metrics["activations"] >= 1  # the fallback activated the listed candidates


def test_the_chat_env_replays_what_the_policy_did():
    backend = ScriptedChat(['<tool_call>{"name": "activate", "arguments": {"candidates": [3]}}</tool_call>',
                            '<tool_call>{"name": "stop", "arguments": {}}</tool_call>'])
    res = run_episode(make_env(), get_policy("llm_evaluator", backend=backend, cache=False, protocol="tools"),
                      episode_id="elem", seed=0)
    env = toy_chat_env(max_candidates=16)
    env.reset(options={"task": str(env.task_id("elem"))})
    total = 0.0
    for m in ('<tool_call>{"name": "activate", "arguments": {"candidates": [3]}}</tool_call>',
              '<tool_call>{"name": "stop", "arguments": {}}</tool_call>'):
        total += env.step(m)[1]
    assert total == pytest.approx(res.reward)
    json.dumps(res.components)


@pytest.mark.parametrize("replies", [
    ['<tool_call>{"name": "activate", "arguments": {"candidates": [1, 4]}}</tool_call>',
     '<tool_call>{"name": "prune", "arguments": {"ids": ["toy:p1"], "reason": "risk"}}</tool_call>'
     '<tool_call>{"name": "stop", "arguments": {}}</tool_call>'],
    ["nothing", "nothing"],  # ends at the reply limit: the env's end hook, recorded with its reason
])
def test_a_chat_episodes_trace_replays_to_the_same_outcome(replies):
    from mage_gym.trace import replay

    env = make_env()
    res = run_episode(env, get_policy("llm_evaluator", backend=ScriptedChat(list(replies)), cache=False,
                                      protocol="tools", max_rounds=2), episode_id="elem", seed=0)
    records = list(env.get_wrapper_attr("trace").records)
    fresh = make_env()
    replay(records, fresh)
    again = fresh.unwrapped.last_outcome
    assert again.reward == pytest.approx(res.reward) and again.metrics == res.metrics
