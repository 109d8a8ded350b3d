"""Task ids round-trip and replay; task lists hold prompts and public info, never gold; transcripts likewise."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_helpers import ANSWER, gold_marked_pairs
from mage_gym.agent.chat_env import MageChatEnv
from mage_gym.agent.tasks import TaskId, dataset_label, task_rows
from mage_gym.agent.transcripts import read_jsonl, record_episode, sft_rows, step_actor, write_jsonl
from mage_gym.env import Budget
from mage_gym.bench.synthetic import hash_query_fn


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=30), st.text(min_size=1, max_size=30),
       st.tuples(*[st.integers(1, 50)] * 5), st.integers(-5, 10**6))
def test_task_ids_round_trip_whatever_the_names(dataset, doc, episode, b, seed):
    task = TaskId(dataset, doc, episode, Budget(k=b[0], m=b[1], M=b[2], T=b[3], B=b[4]), seed)
    assert TaskId.parse(str(task)) == task and str(TaskId.parse(str(task))) == str(task)


@pytest.mark.parametrize("text, part", [
    ("a/b/c", "must be dataset/document/episode/budget/seed"),
    ("a/b/c/k5-m4-M24-T6/s0", "must name k, m, M, T and B"),
    ("a/b/c/k5-m4-M24-T6-B16-x1/s0", "budget part"),
    ("a/b/c/k5-m4-M24-T6-B16/seed0", "seed part"),
])
def test_malformed_task_ids_name_the_bad_part(text, part):
    with pytest.raises(ValueError, match=part):
        TaskId.parse(text)


def test_task_rows_hold_prompt_task_and_public_info_only():
    pairs = gold_marked_pairs()
    rows = task_rows(pairs, dataset_label(pairs), budget={"k": 3}, seeds=(0, 1), split="test")
    assert len(rows) == 2 * len(pairs) and dataset_label(pairs) == "mmlongbench"
    for row in rows:
        assert set(row) == {"prompt", "task", "info"} and [m["role"] for m in row["prompt"]] == ["system", "user"]
        assert set(row["info"]) == {"dataset", "split", "doc_id", "episode_id", "question", "budget", "seed",
                                    "prompt_version"}
        assert TaskId.parse(row["task"]).budget == Budget(k=3)
    text = json.dumps(rows)
    assert ANSWER not in text and "evidence_pages" not in text and "gold" not in text.lower()


def test_task_rows_make_a_datasets_dataset():
    import datasets
    rows = task_rows(gold_marked_pairs(), "mmlongbench")
    ds = datasets.Dataset.from_list(rows)
    assert ds.column_names == ["prompt", "task", "info"] and ds[0]["prompt"][0]["role"] == "system"


def test_oracle_transcripts_are_the_envs_messages_and_never_show_gold(tmp_path):
    from policies import get_policy
    from mage_gym.bench.protocol import EnvInfo

    env = MageChatEnv(episodes=gold_marked_pairs(), query_fn=hash_query_fn(16), K=16, retriever="bm25",
                      privileged=True, numeric_obs_in_info=True, max_candidates=16)
    oracle = get_policy("oracle")
    inner_act = step_actor(env, lambda obs, mask: oracle.act(obs, None, mask))

    def actor(messages, info):
        if len(messages) <= 2:
            oracle.bind(env.inner)
            oracle.reset(EnvInfo.from_env(env.inner))
        return inner_act(messages, info)

    transcripts = [record_episode(env, actor, task=str(env.task_id(e)), source="oracle", privileged=True)
                   for e in env.episode_ids]
    path = tmp_path / "t.jsonl"
    assert write_jsonl(path, transcripts) == 4
    rows = read_jsonl(path)
    assert ANSWER not in path.read_text()
    for row in rows:
        roles = [m["role"] for m in row["messages"]]
        assert roles[:2] == ["system", "user"] and roles.count("assistant") >= 1 and row["privileged"] is True
        for m in row["messages"]:
            if m["role"] == "assistant":
                assert isinstance(m["tool_calls"][0]["function"]["arguments"], str)  # one Arrow schema for all
        assert json.loads(row["tools"])[0]["function"]["name"] == "activate"
    # the teacher gathers gold the student can see: it acts at least once beyond stop somewhere
    assert any(sum(m["role"] == "assistant" for m in r["messages"]) > 1 for r in rows)
    # replaying a transcript's calls through a fresh env gives its reward (transcripts are exact)
    fresh = MageChatEnv(episodes=gold_marked_pairs(), query_fn=hash_query_fn(16), K=16, retriever="bm25",
                        max_candidates=16)
    for row in rows:
        fresh.reset(options={"task": row["task"]})
        total = 0.0
        for m in row["messages"]:
            if m["role"] == "assistant":
                *_, r, term, trunc, _ = fresh.step(m)
                total += r
        assert total == pytest.approx(row["reward"])
    kept = sft_rows(rows, min_reward=0.5)
    assert kept and set(kept[0]) == {"messages", "tools"}
    import datasets
    assert datasets.load_dataset("json", data_files=str(path), split="train").num_rows == 4
