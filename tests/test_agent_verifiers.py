"""verifiers' own evaluation of MageRAG-Chat-v0 against a real llama.cpp server with SmolLM2, on loopback.

``run_eval`` (verifiers 0.4's eval runner, what ``vf-eval`` runs) plays 2
tasks x 2 rollouts through :mod:`mage_gym.agent.verifiers_env`; every model
call goes through verifiers' interception proxy to the server. SmolLM2 was
never taught these tools, so the request asks the server for JSON that fits
one tool call (``response_format`` with :func:`mage_gym.agent.tools.tool_call_schema`,
llama.cpp's grammar-constrained decoding): its replies are real tool calls,
right or wrong. The schema bounds lists and strings and ``max_tokens`` leaves
room for a bounded call: at 40 tokens and an unbounded schema, SmolLM2 at
temperature 1 was cut off in 16 of 20 replies, and a run whose every reply
was cut failed this test now and then. Checks: every rollout has the env's reward as its one
verifiers reward, and replaying the replies verifiers recorded in its trace
through a fresh chat env gives exactly that reward.
"""
from __future__ import annotations

import asyncio
import json

import pytest

import verifiers  # noqa: E402,F401  (the verifiers extra: a broken install fails, never skips)
from llama_server import PAPER_MODEL, LlamaServer  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from mage_gym.data.synth.config import SynthConfig
    from mage_gym.data.synth.corpus import generate_corpus

    root = tmp_path_factory.mktemp("vf_synth")
    generate_corpus(root, n_docs=1, seed=0, cfg=SynthConfig(min_pages=4, max_pages=5, questions_per_doc=4),
                    workers=1, progress=False)
    return root


CHAT = {"parser": "fast", "retriever": "bm25", "K": 16, "max_candidates": 3, "preview_chars": 60}


def test_vf_eval_runs_two_tasks_by_two_rollouts_and_rewards_are_the_envs(corpus, tmp_path):
    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.configs.cli.eval import EvalConfig
    from verifiers.v1.types import AssistantMessage

    from mage_gym.agent import verifiers_env as V
    from mage_gym.agent.chat_env import MageChatEnv
    from mage_gym.agent.tools import tool_call_schema
    from mage_gym.data.synth.corpus import load_synth

    taskset = {"id": V.PLUGIN_ID, "dataset": "synth", "root": str(corpus), "split": "all", "limit": 2, "chat": CHAT}
    server = LlamaServer(tmp_path / "server.log")
    try:
        cfg = EvalConfig(env={"taskset": taskset, "agent": {"max_turns": 2}}, model=PAPER_MODEL,
                         client={"type": "eval", "base_url": server.base_url, "api_key_var": "MAGE_NO_KEY"},
                         sampling={"max_tokens": 128, "temperature": 1.0,
                                   "response_format": {"type": "json_object", "schema": tool_call_schema()}},
                         num_rollouts=2, push=False, rich=None, output_dir=str(tmp_path / "vf"), max_concurrent=1)
        episodes = asyncio.run(run_eval(cfg))
    finally:
        server.kill()
    traces = [t for ep in episodes for t in ep.traces]
    assert len(traces) == 4 and len({t.info["mage"]["task"] for t in traces}) == 2
    assert all(t.ok and not t.errors for t in traces), [t.errors for t in traces]
    assert any(server.requests()), "the model calls reached the server"
    written = list((tmp_path / "vf").rglob("traces.jsonl"))
    assert written and sum(len(f.read_text().splitlines()) for f in written) == len(traces)
    kw = {k: v for k, v in CHAT.items() if k != "parser"}
    env = MageChatEnv(episodes=load_synth(corpus), parser="fast", dataset="synth", **kw)
    calls = 0
    for t in traces:
        mage = t.info["mage"]
        assert set(t.rewards) == {"mage_reward"} and t.reward == pytest.approx(mage["reward"])
        said = [m.content for m in t.messages if isinstance(m, AssistantMessage)]
        assert [r["content"] for r in mage["replies"]] == said  # verifiers' own transcript: the same replies
        env.reset(options={"task": mage["task"]})
        total, done = 0.0, False
        for reply in mage["replies"]:
            _, r, term, trunc, info = env.step(reply)
            calls += info["tool_calls"] - info["format_errors"]
            total += r
            done = term or trunc
        if not done:
            _, r, *_ = env.finish("rollout_end")
            total += r
        assert total == pytest.approx(t.reward, abs=1e-9)
    replies = [r["content"] for t in traces for r in t.info["mage"]["replies"]]
    assert calls >= 1, replies  # constrained decoding gives well-formed calls (right or wrong)
    json.dumps([t.info["mage"] for t in traces])


def test_load_environment_yields_tasks_without_gold(corpus):
    from mage_gym.agent.tasks import TaskId
    from mage_gym.agent.verifiers_env import MageChatVerifiersEnv, load_environment
    from mage_gym.data.synth.corpus import load_synth

    env = load_environment(dataset="synth", root=str(corpus), split="all", limit=2, seeds=[0, 1], chat=CHAT)
    assert isinstance(env, MageChatVerifiersEnv)
    tasks = list(env.taskset)
    assert len(tasks) == 4 and len({t.key for t in tasks}) == 4
    assert all(TaskId.parse(t.data.task).dataset == "synth" for t in tasks)
    eps = load_synth(corpus)
    questions = " ".join(e.question for e in eps)
    answers = [str(e.answer) for e in eps if e.answer and str(e.answer) not in questions]  # comparisons name it
    dumped = json.dumps([t.data.model_dump(mode="json") for t in tasks])
    assert answers and not any(a in dumped for a in answers)
    assert "evidence" not in dumped
